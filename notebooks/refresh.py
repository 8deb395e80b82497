"""Re-run the tutorials in fresh kernels and store their outputs the way nbval checks them.

    .venv/bin/python notebooks/refresh.py [NOTEBOOK ...]     # default: every 0*.ipynb here

Run it after a change that alters what the tutorials print (a diagram's text, a message). Outputs are
stored with streams merged (nbval merges them too), no widget state, and widget views reduced to their
text (a widget saved without its state reads "model not found"); execution timestamps are dropped.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


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
    nbformat.write(notebook, path)
    return time.monotonic() - started


def main(paths: list[str]) -> None:
    for path in [Path(p) for p in paths] or sorted(HERE.glob("0*.ipynb")):
        print(f"{path.name}: {refresh(path):.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
