"""Serving over real HTTP in tests: ``aegis-nb ... --transport http`` in a child process on a free port,
its stderr followed as it comes (`ServerLog`: tests wait on its lines, not on timers), and clients.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from subprocess import PIPE
from typing import Any

import anyio
import httpx2
from anyio.abc import Process
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from tests.servers.launch import LINE_TIMEOUT, ROOT, Lines, free_port

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bare", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
POST_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class ServerLog:
    """The server's stderr, kept whole and read as it comes; `wait_for` waits on new lines, not a timer."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ended = False
        self._changed = anyio.Event()

    async def follow(self, lines: Lines) -> None:
        try:
            while True:
                self.lines.append(await lines.next_line())
                self._changed.set()
                self._changed = anyio.Event()
        except anyio.EndOfStream:
            self.ended = True
            self._changed.set()

    async def wait_for(self, found: Callable[[list[str]], bool]) -> None:
        with anyio.fail_after(LINE_TIMEOUT):
            while not found(self.lines):
                assert not self.ended, f"the server exited first:\n{self.text()}"
                await self._changed.wait()

    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Served:
    origin: str  # scheme://host:port as the test reaches it
    port: int
    log: ServerLog

    @property
    def url(self) -> str:
        return f"{self.origin}/mcp"


@asynccontextmanager
async def served(*argv: str, host: str = "127.0.0.1", **env: str) -> AsyncIterator[Served]:
    """``aegis-nb <argv> --transport http --host <host>`` on a free port, from when uvicorn listens."""
    port = free_port()
    command = [sys.executable, "-m", "aegis_nb.cli", *argv, "--transport", "http"]
    command += ["--host", host, "--port", str(port)]
    environment = {k: v for k, v in os.environ.items() if k != "AEGIS_NB_TOKEN"}
    environment.update(PYTHONUNBUFFERED="1", **env)
    process: Process = await anyio.open_process(command, cwd=ROOT, env=environment, stderr=PIPE)
    log = ServerLog()
    try:
        async with anyio.create_task_group() as tasks:
            assert process.stderr is not None
            tasks.start_soon(log.follow, Lines(process.stderr))
            await log.wait_for(lambda lines: any("Uvicorn running on" in line for line in lines))
            reached = "127.0.0.1" if host == "0.0.0.0" else host
            yield Served(f"http://{reached}:{port}", port, log)
            stop(process)  # its stderr ends with its shutdown lines, and `follow` with it
    finally:
        stop(process)
        with anyio.move_on_after(10, shield=True):
            await process.wait()
        if process.returncode is None:
            process.kill()


def stop(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError):  # asyncio's, once the process has exited
        process.terminate()


@asynccontextmanager
async def client(
    url: str, mode: str = "auto", *, read_timeout: float = 5.0, **headers: str
) -> AsyncIterator[Client]:
    """An mcp client sending `headers` with every request (the SDK leaves a given httpx2 client open),
    waiting up to `read_timeout` seconds for each answer (httpx's default, 5 s, unless told)."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=read_timeout) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as session,
    ):
        yield session


async def post(url: str, body: dict[str, Any], **headers: str) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.post(url, json=body, headers={**POST_HEADERS, **headers})


def holding_server() -> MCPServer[Any]:
    """A bare `MCPServer` whose ``hold`` call stays in flight until a ``release`` call (any session)."""
    server: MCPServer[Any] = MCPServer("holding")
    released: list[anyio.Event] = []  # made on first use: an Event needs the serving loop

    def release_event() -> anyio.Event:
        if not released:
            released.append(anyio.Event())
        return released[0]

    @server.tool()
    async def hold() -> str:
        print("hold: in flight", file=sys.stderr, flush=True)  # what a test waits for
        await release_event().wait()
        return "released"

    @server.tool()
    async def release() -> str:
        release_event().set()
        return "done"

    return server
