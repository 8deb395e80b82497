"""A saga that rolls back as the notebook meant it to is not a crash: in a real kernel, the cell of a
blocking ``%aegis_saga`` shows the diagram and one plain line (stdout, no stderr, no error output),
and the error stays at hand in ``aegis_last_error`` and the ``-o`` run. A step whose code is broken
(a `NameError`) still fails its cell after the rollback, and so does a malformed saga.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.slow  # a kernel of its own

STEPS = """\
%load_ext aegis_nb
from aegis_nb import AegisContext

class Flight:
    async def execute(self, ctx: AegisContext):
        return ctx

    async def compensate(self, ctx: AegisContext):
        pass

class Card:
    async def execute(self, ctx: AegisContext):
        raise ValueError("Card Declined!")

    async def compensate(self, ctx: AegisContext):
        pass

class Typo:
    async def execute(self, ctx: AegisContext):
        return ctx.with_metadata({"id": bookng_id})

    async def compensate(self, ctx: AegisContext):
        pass

class NoUndo:
    async def execute(self, ctx: AegisContext):
        return ctx
"""

CELLS = [
    STEPS,
    "%aegis_saga Flight Card --name trip -o run",
    "print(repr(aegis_last_error))\nprint(aegis_last_error is run.error)",
    "%aegis_saga Flight Typo --name trip -o broken",
    "print(broken.status.value, repr(aegis_last_error.__cause__))",
    "%aegis_saga Flight NoUndo --name trip",
    "%aegis_saga Flight --name trip\nprint(aegis_last_error)",
]


def texts(outputs: list[Any]) -> list[tuple[str, str]]:
    """Each output as (kind, text): a stream's name and text, a display's plain text, an error's line."""
    shown = []
    for output in outputs:
        if output.output_type == "stream":
            shown.append((output.name, output.text))
        elif output.output_type == "error":
            shown.append(("error", f"{output.ename}: {output.evalue}"))
        else:
            shown.append((output.output_type, output.data.get("text/plain", "").split("\n")[0]))
    return shown


def test_an_intended_rollback_prints_one_line_and_a_broken_step_still_fails_its_cell(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    client = nbclient.NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    cells = [texts(cell.outputs) for cell in notebook.cells]

    assert cells[0] == []
    # The live view (blank as text), its fallback (blanked), the diagram, and one plain line.
    assert cells[1][:2] == [("display_data", ""), ("display_data", "")]
    assert cells[1][2][0] == "display_data"
    assert cells[1][2][1].startswith("trip — ROLLED BACK · 2 steps · ")
    assert cells[1][3:] == [
        ("stdout", "Card Declined! — rolled back: Flight · SagaRolledBack in aegis_last_error\n"),
    ]
    assert cells[2] == [
        (
            "stdout",
            "SagaRolledBack(\"saga 'trip': Card Declined! — rolled back: Flight\")\nTrue\n",
        )
    ]
    # A bug: the diagram of the rollback, then the cell fails with the saga's error.
    assert cells[3][2][1].startswith("trip — ROLLED BACK · 2 steps · ")
    assert cells[3][3:] == [
        ("error", "SagaRolledBack: saga 'trip': name 'bookng_id' is not defined — rolled back: Flight"),
    ]
    assert cells[4] == [("stdout", "rolled_back NameError(\"name 'bookng_id' is not defined\")\n")]
    assert cells[5] == [  # IPython shows a UsageError as one line on stderr, and the cell fails
        (
            "stderr",
            "UsageError: NoUndo is a type, not a step: a step has async execute(ctx, ...) and "
            "compensate(ctx, ...); define one with %%aegis_step\n",
        )
    ]
    assert cells[6][3:] == [("stdout", "None\n")]  # a committed run clears it
