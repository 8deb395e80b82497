"""Where no widget can be drawn, the explorer and the replay slider still show their last state.

Each is shown as its widget followed by a fallback output, which the drawn widget hides (with a
style of its own). ``jupyter nbconvert --execute --to html`` draws widgets only with a widget
manager fetched online: offline, and on GitHub or in a notebook reopened without widget state,
the fallback is what shows: the explorer's last run (diagram and history, even when it was pressed
from later cells) and the replay's diagram, as an ``<img>`` with an SVG data URI, plus their text.
"""

from __future__ import annotations

import base64
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aegis_nb.notebook.widgets import EXPLORER_ESM

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbconvert")

CELLS = [
    "%load_ext aegis_nb",
    "%%aegis_step BookFlight\nasync def execute(ctx):\n    return ctx.with_metadata({'flight': 'FL-1'})\n\n"
    "async def compensate(ctx):\n    pass",
    "%%aegis_step ChargeCard\nasync def execute(ctx):\n    return None\n\n"
    "async def compensate(ctx):\n    pass",
    "explorer = %aegis_saga BookFlight ChargeCard --interactive --deadline 0.5 --name trip -o last\nexplorer",
    "await explorer.run_once()\nexplorer.failing['ChargeCard'].value = True\nawait explorer.run_once();",
    "from aegis_nb.notebook import ReplayView\nReplayView(last)",
]


FAILED = "failed (injected by --fail)"


def images(cell_html: str) -> list[tuple[str, str]]:
    """Each ``<img>``'s alt text and decoded SVG, in order (nbconvert may reorder the attributes)."""
    found = []
    for tag in re.findall(r"<img [^>]*>", cell_html):
        source = re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', tag)
        alt = re.search(r'alt="([^"]*)"', tag)
        assert source is not None, tag
        assert alt is not None, tag
        found.append((html.unescape(alt.group(1)), base64.b64decode(source.group(1)).decode()))
    return found


def fallback(cell_html: str) -> str:
    """The fallback output in a cell's HTML (the one a drawn widget hides), to the cell's end.

    The last cell's chunk runs on into the page's saved widget state: that part is cut off.
    """
    start = cell_html.find('<div class="aegis-fallback" data-for="')
    assert start >= 0, "no fallback output"
    end = cell_html.find("<script", start)
    return cell_html[start : None if end < 0 else end]


def test_nbconvert_html_shows_the_explorers_last_run_and_the_replays_diagram(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "fallbacks.ipynb"
    nbformat.write(notebook, path)
    subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--execute", "--to", "html", str(path)],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    page = (tmp_path / "fallbacks.html").read_text()
    # One block per code cell's outputs, in order: the explorer's is the fourth, the replay's the sixth.
    cells = re.split(r'<div class="jp-Cell jp-CodeCell', page)[1:]
    assert len(cells) == len(CELLS)
    explorer, replay = fallback(cells[3]), fallback(cells[5])

    assert [alt for alt, _ in images(explorer)] == [
        "trip: ChargeCard failed (injected by --fail) — rolled back: BookFlight"
    ]
    assert "trip" in images(explorer)[0][1]
    assert "saga explorer for trip (BookFlight, ChargeCard), after 2 runs" in explorer
    history = re.search(r'<table class="aegis-history".*?</table>', explorer, flags=re.S)
    assert history is not None
    rows = re.findall(r"<tr>(.*?)</tr>", history.group(0), flags=re.S)
    texts = [[html.unescape(td) for td in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)] for row in rows]
    assert texts == [
        ["run", "deadline", "latency", "failing", "outcome"],
        ["1", "0.5 s", "none", "none", "committed: BookFlight, ChargeCard"],
        [
            "2",
            "0.5 s",
            "none",
            "ChargeCard",
            "ChargeCard failed (injected by --fail) — rolled back: BookFlight",
        ],
    ]
    assert [alt for alt, _ in images(replay)] == [
        "trip: rolled back — ChargeCard failed (injected by --fail) — rolled back: BookFlight"
    ]
    assert "model not found" not in page


def test_the_stored_notebook_keeps_the_fallback_beside_the_widget_view(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "fallbacks.ipynb"
    nbformat.write(notebook, path)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--execute",
            "--to",
            "notebook",
            "--inplace",
            str(path),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    stored = json.loads(path.read_text())
    outputs = stored["cells"][3]["outputs"]
    assert [sorted(output["data"]) for output in outputs] == [
        ["application/vnd.jupyter.widget-view+json", "text/plain"],
        ["text/html", "text/plain"],
    ]
    assert "".join(outputs[0]["data"]["text/plain"]) == ""
    # The fallback is marked with the widget's fallback id; the widget's own front-end code hides it.
    key = re.search(r'data-for="([0-9a-f]{32})"', "".join(outputs[1]["data"]["text/html"]))
    assert key is not None
    widget_state = stored["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    view_id = outputs[0]["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
    explorer = widget_state[view_id]["state"]
    assert explorer["fallback_id"] == key.group(1)
    assert explorer["_esm"] == EXPLORER_ESM
    assert "hideFallback(model, el);" in EXPLORER_ESM
    text = "".join(outputs[1]["data"]["text/plain"])
    assert text.splitlines()[:4] == [
        "saga explorer for trip (BookFlight, ChargeCard), after 2 runs:",
        "run 1: deadline 0.5 s · latency: none → committed",
        "run 2: deadline 0.5 s · latency: none · failing: ChargeCard → rolled back",
        "run 2:",
    ]
