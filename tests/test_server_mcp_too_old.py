"""With an mcp release older than the server needs, serving says the installed mcp is too old, and which
release is needed, not that the extra is missing.

Another package may pin an older mcp (1.x has no ``mcp.server.mcpserver``). A fake 1.27.0 release, put
first on the path of a child process, stands for it: ``aegis-nb serve`` and importing the server then
name the installed version and the one needed, in one line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

NEEDED = (
    "needs mcp >= 2.3, but mcp 1.27.0 is installed (no module named 'mcp.server.mcpserver'; another "
    "package may have pinned an older one): pip install 'mcp>=2.3'"
)


@pytest.fixture
def old_mcp(tmp_path: Path) -> Path:
    """A folder holding an installed-looking mcp 1.27.0 without the module mcp 2.3 added."""
    (tmp_path / "mcp" / "server").mkdir(parents=True)
    (tmp_path / "mcp" / "__init__.py").write_text("")
    (tmp_path / "mcp" / "server" / "__init__.py").write_text("")
    info = tmp_path / "mcp-1.27.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mcp\nVersion: 1.27.0\n")
    return tmp_path


def run(old_mcp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(old_mcp), "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).parent.parent,
        check=False,
    )


def test_serve_says_the_installed_mcp_is_too_old_and_which_release_is_needed(old_mcp: Path) -> None:
    done = run(old_mcp, "-m", "aegis_nb.cli", "serve", "aegis_nb.mock.travel:travel_app")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"aegis-nb serve: serving an MCP app {NEEDED}\n",
    )


def test_importing_the_server_raises_the_same_words_as_a_missing_extra(old_mcp: Path) -> None:
    code = (
        "from aegis_nb.kernel.extras import ExtraTooOld, MissingExtra\n"
        "try:\n"
        "    import aegis_nb.server\n"
        "except ExtraTooOld as exc:\n"
        "    kinds = isinstance(exc, MissingExtra), isinstance(exc, ModuleNotFoundError)\n"
        "    print(*kinds, exc.name, exc.extra)\n"
        "    print(exc)\n"
    )
    done = run(old_mcp, "-c", code)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"True True mcp.server.mcpserver mcp\naegis_nb.server (AegisMCP, connect, ToolPairStep) {NEEDED}\n"
    )
