"""Run Python and `aegis-nb` as subprocesses: one-shot children, and servers for the transport and
third-party client tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from subprocess import PIPE

import anyio
from anyio.abc import ByteReceiveStream, Process

ROOT = Path(__file__).parent.parent.parent

LINE_TIMEOUT = 60.0
"""Seconds to wait for an expected line: generous, since a loaded machine starts Python slowly."""


def python_child(*args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    """This Python run on `args` in a process of its own, from the repository root (so `tests`
    imports), with `env` added to its environment and no bytecode written; its output captured."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


def aegis_nb(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command line in its own process, as a user runs it: exit code and whole stderr are real."""
    return python_child("-m", "aegis_nb.cli", *argv, check=False, **env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Lines:
    """A subprocess stream read as lines, on demand: ``await lines.wait_for("text")``."""

    def __init__(self, stream: ByteReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next_line(self) -> str:
        while b"\n" not in self._buffer:
            self._buffer += await self._stream.receive()
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace")

    async def wait_for(self, text: str) -> None:
        """Read until a line equal to `text` (an EndOfStream means the server died first)."""
        with anyio.fail_after(LINE_TIMEOUT):
            while await self.next_line() != text:
                pass

    async def wait_containing(self, text: str) -> None:
        with anyio.fail_after(LINE_TIMEOUT):
            while text not in await self.next_line():
                pass


class HttpServer:
    def __init__(self, url: str, stdout: Lines | None) -> None:
        self.url = url
        self.stdout = stdout


@asynccontextmanager
async def http_server(*args: str, capture_stdout: bool = False) -> AsyncIterator[HttpServer]:
    """Run ``aegis-nb <args> --transport http``; yield it once uvicorn says it is listening.

    With `capture_stdout`, what the server prints can be awaited line by line (unbuffered).
    """
    port = free_port()
    command = [sys.executable, "-m", "aegis_nb.cli", *args, "--transport", "http", "--port", str(port)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process: Process = await anyio.open_process(
        command, cwd=ROOT, env=env, stdout=PIPE if capture_stdout else None, stderr=PIPE
    )
    try:
        assert process.stderr is not None
        await Lines(process.stderr).wait_containing("Uvicorn running on")
        stdout = None if process.stdout is None else Lines(process.stdout)
        yield HttpServer(f"http://127.0.0.1:{port}/mcp", stdout)
    finally:
        process.terminate()
        with anyio.move_on_after(10, shield=True):
            await process.wait()
        if process.returncode is None:
            process.kill()
