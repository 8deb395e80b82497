"""Every Python the package metadata claims is one the suite runs on: a claim nothing tests would go stale."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_pythons_pyproject_claims_are_the_ones_make_tests() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    claimed = [
        c.rpartition(" :: ")[2]
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    oldest = project["requires-python"].removeprefix(">=")
    # `make test` runs on the oldest (the dev venv's), `make test-pythons` on the rest.
    others = re.search(r"^PYTHONS\s*\?=\s*(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert others is not None
    assert claimed == [oldest, *others[1].split()]
