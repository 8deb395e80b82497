"""The marimo version of tutorial 01 (``notebooks/marimo/quickstart.py``) runs: ``marimo export html``
executes every cell headless, the saga rolls back as the tutorial says, and the page it writes holds
the run's summary. (That its anywidget views render and grow in marimo is checked in a browser by
tests/test_views_elsewhere.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

pytestmark = pytest.mark.slow  # a marimo process of its own

QUICKSTART = Path(__file__).resolve().parent.parent / "notebooks" / "marimo" / "quickstart.py"


def test_every_cell_of_the_marimo_quickstart_runs_and_the_saga_rolls_back(tmp_path: Path) -> None:
    marimo = shutil.which("marimo", path=str(Path(sys.executable).parent))
    require(marimo is not None, "marimo")
    assert marimo is not None
    page = tmp_path / "quickstart.html"
    # A copy: marimo keeps a __marimo__ session folder beside the notebook it runs.
    notebook = Path(shutil.copy(QUICKSTART, tmp_path / QUICKSTART.name))
    done = subprocess.run(
        [marimo, "export", "html", str(notebook), "-o", str(page)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "MARIMO_SKIP_UPDATE_CHECK": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "Booking flight...\n"
        "Attempting to charge card for FLIGHT_999...\n"
        "Canceling flight FLIGHT_999...\n"
        "rolled_back\n"
        "Card Declined! — rolled back: BookFlightStep\n"
    ) in done.stdout + done.stderr
    assert "rolled back: BookFlightStep" in page.read_text().replace("\\u2014", "—")
