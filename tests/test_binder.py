"""Binder: the files repo2docker reads, and a fresh venv built from them that runs the quickstart.

The venv test does what Binder does: a new Python 3.12 environment, ``pip install -r
binder/requirements.txt`` from the repository root, then it runs ``01_quickstart`` top to bottom in a
kernel of that environment (nbclient), from a directory outside the repository so the installed
package is the one imported. pip's cache is shared with the developer's, so a warm run takes well
under a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
PYTHON_312 = Path("/root/.pyenv/versions/3.12.1/bin/python3")
BINDER_INSTALL = ("-r", str(BINDER / "requirements.txt"), "ipykernel", "nbclient")


def test_binder_files_say_python_312_graphviz_and_this_repository_with_its_notebook_extras() -> None:
    assert (BINDER / "runtime.txt").read_text() == "python-3.12\n"
    assert (BINDER / "apt.txt").read_text() == "graphviz\n"
    # The agents extra (pydantic-ai) drives the gateway in tutorial 06 (agents in the loop).
    assert (BINDER / "requirements.txt").read_text() == ".[notebook,temporal,agents]\n"
    post_build = BINDER / "postBuild"
    assert not post_build.exists() or post_build.read_text().startswith("#!/bin/bash\nset -e\n")


RUN_QUICKSTART = r"""
import json, sys
import nbformat
from nbclient import NotebookClient

source, workdir = sys.argv[1], sys.argv[2]
notebook = nbformat.read(source, as_version=4)
where = "import aegis_nb, sys\nprint(sys.prefix)\nprint(aegis_nb.__file__)"
notebook.cells.append(nbformat.v4.new_code_cell(where))
resources = {"metadata": {"path": workdir}}
NotebookClient(notebook, timeout=120, kernel_name="python3", resources=resources).execute()


def summary(output):
    kind, mimes = output["output_type"], sorted(output.get("data", {}))
    return {"type": kind, "name": output.get("name"), "text": output.get("text"), "mimes": mimes}


cells = [[summary(o) for o in cell.outputs] for cell in notebook.cells if cell.cell_type == "code"]
json.dump(cells, sys.stdout)
"""


def _python() -> str:
    if PYTHON_312.exists():
        return str(PYTHON_312)
    require(sys.version_info >= (3, 11), "Python 3.12 (pyenv) or a Python >= 3.11 to build the Binder venv")
    return sys.executable


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_fresh_venv_from_binder_requirements_runs_the_quickstart(tmp_path: Path) -> None:
    started = time.monotonic()
    venv = tmp_path / "venv"
    subprocess.run([_python(), "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "JUPYTER_PREFER_ENV_PATH": "1",
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
    }
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    # Binder's base image brings Jupyter itself (a kernel and the server); the test brings the
    # kernel and nbclient in their place.
    install = subprocess.run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", *BINDER_INSTALL],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]

    workdir = tmp_path / "notebooks"
    workdir.mkdir()
    notebook = shutil.copy(ROOT / "notebooks" / "01_quickstart.ipynb", workdir)
    run = subprocess.run(
        [python, "-c", RUN_QUICKSTART, str(notebook), str(workdir)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    cells = json.loads(run.stdout)

    assert all(output["type"] != "error" for cell in cells for output in cell)
    rollback = cells[1]  # the third cell of the notebook: the live view's rollback
    # The steps' prints, then the outcome: a rollback the cell asked for is one plain line, not a
    # crash, so nothing on stderr. (How the kernel splits stdout into messages depends on timing.)
    streams = [o for o in rollback if o["type"] == "stream"]
    assert [o["name"] for o in streams if o["name"] != "stdout"] == []
    assert "".join(o["text"] for o in streams) == (
        "Booking flight...\n"
        "Attempting to charge card for FLIGHT_999...\n"
        "Canceling flight FLIGHT_999...\n"
        "Card Declined! — rolled back: BookFlightStep · SagaRolledBack in aegis_last_error\n"
    )
    assert ["text/html", "text/plain"] in [o["mimes"] for o in rollback]
    prefix, package = cells[-1][0]["text"].splitlines()
    assert Path(prefix) == venv
    assert Path(package).is_relative_to(venv)
    assert time.monotonic() - started < 240
