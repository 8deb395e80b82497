"""Third-party MCP servers for the gateway's tests, as `make clients` installs them: where each one's
command is, the shipped example policy pointed at it, and a skip (a failure under AEGIS_STRICT=1) that
says what to run when one is missing.

- ``@modelcontextprotocol/server-memory`` (npm, pinned in tests/clients/package.json): a knowledge graph
  kept in the JSON-lines file named by ``MEMORY_FILE_PATH``.
- ``mcp-server-git`` (PyPI, pinned in the Makefile) in a venv of its own, ``.venvs/mcp-server-git``.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import tomlkit

from tests.clients import CLIENTS, NODE_BIN
from tests.conftest import require

ROOT = Path(__file__).parent.parent

MEMORY_SERVER = CLIENTS / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
GIT_SERVER = ROOT / ".venvs" / "mcp-server-git" / "bin" / "mcp-server-git"
MEMORY_POLICY = ROOT / "aegis_nb" / "gateway" / "examples" / "memory_policy.toml"


def memory_server() -> tuple[str, list[str]]:
    """The command and arguments that start the memory server over stdio (Node 22 from npm, else the
    machine's Node, which runs it too)."""
    node = NODE_BIN / "node"
    found = str(node) if node.exists() else shutil.which("node")
    require(
        found is not None and MEMORY_SERVER.exists(), "@modelcontextprotocol/server-memory (make clients)"
    )
    assert found is not None
    return found, [str(MEMORY_SERVER)]


def git_server(repository: Path) -> tuple[str, list[str]]:
    """The command and arguments that start mcp-server-git over stdio on `repository`."""
    require(GIT_SERVER.exists(), "mcp-server-git in .venvs/mcp-server-git (make clients)")
    return str(GIT_SERVER), ["--repository", str(repository)]


def memory_policy() -> str:
    """The shipped memory-server policy with its upstream started from the installed server instead
    of ``npx`` (which would fetch it): the same tools, bindings and ``${MEMORY_FILE_PATH}`` env."""
    command, args = memory_server()
    document = tomlkit.parse(MEMORY_POLICY.read_text(encoding="utf-8"))
    upstream = document["upstreams"]["memory"]
    upstream["command"] = command
    upstream["args"] = args
    text = tomlkit.dumps(document)
    assert tomllib.loads(text)["upstreams"]["memory"]["env"] == {"MEMORY_FILE_PATH": "${MEMORY_FILE_PATH}"}
    return text
