"""The tutorials as files: all six there, run top to bottom with outputs stored, readable without a kernel.

nbval (in ``make test``) re-runs them and compares outputs; these checks keep what nbval cannot see:
that the stored outputs exist, came from one clean run in order, and show without widget state.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from nbformat import NotebookNode

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = [
    "01_quickstart.ipynb",
    "02_mcp_tools.ipynb",
    "03_deadlines.ipynb",
    "04_when_compensation_fails.ipynb",
    "05_serving.ipynb",
    "06_agents.ipynb",
    "07_temporal.ipynb",
    "08_run_time_sagas.ipynb",
]
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def load(name: str) -> NotebookNode:
    notebook: NotebookNode = nbformat.read(NOTEBOOKS / name, as_version=4)
    return notebook


def test_the_six_tutorials_are_there() -> None:
    assert sorted(path.name for path in NOTEBOOKS.glob("*.ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_outputs_are_stored_from_one_clean_run_in_order(name: str) -> None:
    notebook = load(name)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    outputs = [output for cell in code for output in cell.outputs]
    assert [o for o in outputs if o.output_type == "error"] == []
    # A widget saved without its state reads "model not found": only its text is stored.
    assert [o for o in outputs if WIDGET_MIME in o.get("data", {})] == []
    assert "widgets" not in notebook.metadata
    images = [
        o for o in outputs if '<img src="data:image/svg+xml;base64,' in o.get("data", {}).get("text/html", "")
    ]
    assert images, "every tutorial shows at least one saga diagram"


def test_the_quickstart_shows_a_rollback_in_its_third_cell() -> None:
    third = load("01_quickstart.ipynb").cells[2]
    assert third.source.startswith("%aegis_saga ")
    assert "--latency BookFlightStep=0.8" in third.source  # slow enough to be seen growing
    streams = {o.name: o.text for o in third.outputs if o.output_type == "stream"}
    assert "stderr" not in streams  # a rollback the tutorial means is not shown as a crash
    assert streams["stdout"].endswith(
        "Card Declined! — rolled back: BookFlightStep · SagaRolledBack in aegis_last_error\n"
    )
    html = next(o.data["text/html"] for o in third.outputs if "text/html" in o.get("data", {}))
    assert re.search(r'alt="book_vacation: rolled back — ', html)


@pytest.mark.parametrize("name", NAMES)
def test_the_stored_kernelspec_is_ipykernels_so_opening_changes_nothing(name: str) -> None:
    kernel = pytest.importorskip("ipykernel.kernelspec").get_kernel_dict()
    assert dict(load(name).metadata.kernelspec) == {
        "display_name": kernel["display_name"],
        "language": "python",
        "name": "python3",
    }


@pytest.mark.parametrize("name", NAMES)
def test_markdown_pictures_travel_with_the_notebook_as_attachments(name: str) -> None:
    for cell in load(name).cells:
        if cell.cell_type != "markdown":
            continue
        linked = re.findall(r"!\[[^\]]*\]\(([^)]*)\)", cell.source)
        assert [link for link in linked if not link.startswith("attachment:")] == []
        attached = cell.get("attachments", {})
        assert sorted(link.removeprefix("attachment:") for link in linked) == sorted(attached)
        for picture in attached.values():
            assert base64.b64decode(picture["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")
