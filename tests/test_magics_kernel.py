"""The magics in a real ipykernel (nbclient), where the loop keeps running between cells.

InteractiveShell runs no loop between cells, so only a kernel shows a ``--background`` saga going on
while other cells run, and the expression form (``job = %aegis_saga ... --background``) returning at
once. (nbclient ignores display updates sent for a cell that has finished, so the in-place swap of a
background run's live output is checked in the browser test instead.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

CELLS = [
    "%load_ext aegis_nb\nimport asyncio\nrelease = asyncio.Event()",
    "%%aegis_step Hold\nasync def execute(ctx):\n    await release.wait()\n    return None\n\n"
    "async def compensate(ctx):\n    pass",
    "%aegis_saga Hold --background --name held -o run",
    "job = _\nprint(job)\nprint('bound yet:', 'run' in globals())",
    "release.set()\nfinished = await job\nprint(finished.status.value, finished is run)",
    "other = %aegis_saga Hold --background --name again\n"
    "print(type(other).__name__)\nprint((await other).ok)",
]


def test_a_background_saga_runs_on_while_later_cells_run_and_ends_as_a_static_diagram(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    client = nbclient.NotebookClient(
        notebook, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [cell.outputs for cell in notebook.cells]

    assert [o.output_type for o in outputs[2]] == ["display_data", "display_data", "execute_result"]
    assert "application/vnd.jupyter.widget-view+json" in outputs[2][0].data  # the live view, shown at once
    assert outputs[2][1].data == {"text/plain": ""}  # its fallback, blanked once the run was over
    assert outputs[2][2].data["text/plain"] == (
        "<saga held running in the background: `await` this for its SagaRun>"
    )
    assert "".join(o.text for o in outputs[3]) == (
        "<saga held running in the background: `await` this for its SagaRun>\nbound yet: False\n"
    )
    assert "".join(o.text for o in outputs[4]) == "committed True\n"
    # Expression form: the run ended within this cell, so its live output became the diagram here.
    assert outputs[5][0].output_type == "display_data"
    assert outputs[5][0].data["text/plain"].startswith("again — COMMITTED")
    assert outputs[5][1].data == {"text/plain": ""}
    assert "".join(o.text for o in outputs[5][2:]) == "BackgroundRun\nTrue\n"
