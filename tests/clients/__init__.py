"""Where the npm-installed third-party MCP clients live, and how to run them."""

from __future__ import annotations

import os
from pathlib import Path

CLIENTS = Path(__file__).parent
BIN = CLIENTS / "node_modules" / ".bin"
NODE_BIN = CLIENTS / "node_modules" / "node" / "bin"


def client_env() -> dict[str, str]:
    """The environment with Node 22 (from npm) first on PATH."""
    return {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def installed(tool: str) -> bool:
    return (BIN / tool).exists() and (NODE_BIN / "node").exists()
