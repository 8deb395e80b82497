"""Start `aegis-nb` servers as subprocesses for the transport and third-party client tests."""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process

ROOT = Path(__file__).parent.parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def http_server(*args: str) -> AsyncIterator[str]:
    """Run ``aegis-nb <args> --transport http``; yield its URL once uvicorn says it is listening."""
    port = free_port()
    command = [sys.executable, "-m", "aegis_nb.cli", *args, "--transport", "http", "--port", str(port)]
    process: Process = await anyio.open_process(command, cwd=ROOT, stdout=None)
    try:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(60):
            async for chunk in process.stderr:
                seen += chunk
                if b"Uvicorn running on" in seen:
                    break
        assert b"Uvicorn running on" in seen, seen.decode(errors="replace")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        with anyio.move_on_after(10, shield=True):
            await process.wait()
        if process.returncode is None:
            process.kill()
