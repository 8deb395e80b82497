"""Shared fixtures: every async test runs on asyncio and trio; strict mode turns skips into failures."""

from __future__ import annotations

import os
import shutil

import pytest

STRICT = os.environ.get("AEGIS_STRICT") == "1"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def require(condition: bool, what: str) -> None:
    """Skip when `what` is missing on a developer machine; fail under AEGIS_STRICT=1 (CI)."""
    if condition:
        return
    if STRICT:
        pytest.fail(f"{what} is required in strict mode (AEGIS_STRICT=1)")
    pytest.skip(f"{what} is not available")


def require_executable(name: str) -> str:
    """The path of executable `name`, or skip/fail as `require` does."""
    path = shutil.which(name)
    require(path is not None, f"the `{name}` executable")
    assert path is not None
    return path
