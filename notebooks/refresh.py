"""Re-run the tutorials in fresh kernels and store their outputs the way nbval checks them.

    .venv/bin/python notebooks/refresh.py [NOTEBOOK ...]     # default: every 0*.ipynb here
    .venv/bin/python notebooks/refresh.py --tidy [NOTEBOOK ...]  # only the pictures and metadata

Run it after a change that alters what the tutorials print (a diagram's text, a message). Outputs are
stored with streams merged (nbval merges them too), no widget state, and widget views reduced to their
text (a widget saved without its state reads "model not found"); execution timestamps are dropped.
Both forms also `tidy` the notebook: markdown pictures from ``../assets/`` are embedded as attachments
(a notebook exported or opened away from this repository keeps them; run it after ``make assets``),
and the kernelspec is ipykernel's own, so JupyterLab does not mark a tutorial modified on opening.
"""

from __future__ import annotations

import base64
import re
import sys
import time
from pathlib import Path

import nbformat
from ipykernel.kernelspec import get_kernel_dict
from nbclient import NotebookClient
from nbformat import NotebookNode

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parent / "assets"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PICTURE = re.compile(r"!\[([^\]]*)\]\((?:\.\./assets/|attachment:)([\w.-]+\.png)\)")
"""A markdown picture from assets/, linked or already attached."""


def tidy(notebook: NotebookNode) -> None:
    """Embed the markdown pictures as attachments (fresh from assets/) and store ipykernel's kernelspec."""
    spec = get_kernel_dict()
    notebook.metadata["kernelspec"] = {
        "display_name": spec["display_name"],
        "language": spec["language"],
        "name": "python3",
    }
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        names = [name for _, name in PICTURE.findall(cell.source)]
        if not names:
            continue
        cell.source = PICTURE.sub(r"![\1](attachment:\2)", cell.source)
        cell.attachments = {
            name: {"image/png": base64.b64encode((ASSETS / name).read_bytes()).decode("ascii")}
            for name in names
        }


def refresh(path: Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    started = time.monotonic()
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        store_widget_state=False,
        coalesce_streams=True,
        resources={"metadata": {"path": str(HERE)}},
    ).execute()
    notebook.metadata.pop("widgets", None)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.metadata.pop("execution", None)
            for output in cell.outputs:
                output.get("data", {}).pop(WIDGET_MIME, None)
    tidy(notebook)
    nbformat.write(notebook, path)
    return time.monotonic() - started


def main(arguments: list[str]) -> None:
    only_tidy = "--tidy" in arguments
    paths = [Path(p) for p in arguments if p != "--tidy"] or sorted(HERE.glob("0*.ipynb"))
    for path in paths:
        if only_tidy:
            notebook = nbformat.read(path, as_version=4)
            tidy(notebook)
            nbformat.write(notebook, path)
            print(f"{path.name}: tidied", flush=True)
        else:
            print(f"{path.name}: {refresh(path):.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
