"""What `pip install aegis-nb` gets: the sdist and wheel hatchling builds, checked file by file.

The wheel holds both packages' modules, their ``py.typed`` and the licence, and nothing else (the code
reads no data files); its metadata names the licence, the Python versions and the extras.
"""

from __future__ import annotations

import email
import importlib.util
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from pathlib import Path

import pytest

import aegis_nb
from tests.conftest import require
from tests.servers.launch import ROOT

PACKAGES = ("aegis_nb", "aegismcp")
INFO = f"aegis_nb-{aegis_nb.__version__}.dist-info/"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and wheel of the working tree, built once into a temporary folder (never the repo's)."""
    require(importlib.util.find_spec("hatchling") is not None, "hatchling (the dev extra)")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return out


def wheel_files(dist: Path) -> list[str]:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def wheel_file(dist: Path, name: str) -> bytes:
    """One file of the wheel's ``.dist-info``."""
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(f"{INFO}{name}")


def metadata(dist: Path) -> Message:
    return email.message_from_bytes(wheel_file(dist, "METADATA"))


def test_the_wheel_holds_every_module_py_typed_and_the_licence_and_nothing_else(dist: Path) -> None:
    sources = sorted(
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )
    # The mock agency's gateway policy ships beside its code (`aegis-nb gateway --mock`), and so do
    # the example policies for third-party servers.
    expected = [*sources, "aegis_nb/py.typed", "aegismcp/py.typed", "aegis_nb/mock/travel_policy.toml"]
    expected += ["aegis_nb/gateway/examples/memory_policy.toml"]
    expected += [f"{INFO}{name}" for name in ("METADATA", "WHEEL", "entry_points.txt", "RECORD")]
    expected += [f"{INFO}licenses/LICENSE"]
    assert sorted(wheel_files(dist)) == sorted(expected)


def test_the_wheel_metadata_names_licence_pythons_extras_and_the_command(dist: Path) -> None:
    meta = metadata(dist)
    assert (meta["Name"], meta["Version"]) == ("aegis-nb", aegis_nb.__version__)
    assert (meta["License-Expression"], meta["License-File"]) == ("MIT", "LICENSE")
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_all("Requires-Dist", [])[:3] == ["anyio>=4.6", "immutables>=0.20", "sniffio>=1.3"]
    assert sorted(meta.get_all("Provides-Extra", [])) == [
        "agents",
        "bench",
        "dev",
        "mcp",
        "notebook",
        "otel",
        "temporal",
    ]
    assert "Typing :: Typed" in meta.get_all("Classifier", [])
    scripts = wheel_file(dist, "entry_points.txt").decode()
    assert scripts == "[console_scripts]\naegis-nb = aegis_nb.cli:main\n"


def test_the_sdist_rebuilds_the_wheel_and_runs_the_tests_but_carries_no_local_state(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.partition("/")[2] for name in archive.getnames()}
    for needed in ("pyproject.toml", "README.md", "LICENSE", "aegis_nb/py.typed", "aegismcp/py.typed"):
        assert needed in names
    assert "tests/conftest.py" in names
    local = [
        name
        for name in names
        if {".venv", "__pycache__", ".pytest_cache", ".mypy_cache"} & set(name.split("/"))
    ]
    assert local == []
