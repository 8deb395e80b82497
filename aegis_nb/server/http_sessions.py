"""A streamable HTTP session that nobody uses after ``initialize`` is closed soon, not after the idle timeout.

A bare ``initialize`` costs the client one request and the server a session (a task and its
streams) for the whole idle timeout; a burst of them fills the session table and every later
client gets 503. A real client follows its ``initialize`` at once (the ``initialized``
notification, then its GET stream and calls). So a session that has had no request since the one
that opened it gets a short idle deadline (`UnusedSessionReaper`); its next request puts the SDK's
own idle countdown back, and the SDK closes the session either way.

The deadline is the SDK's: each session's transport has an ``idle_scope`` (a cancel scope the
session's task runs in), which it sets to ``now + session_idle_timeout`` when its last request ends.
The SDK gives no public way from a session ID to its transport, so `_transport` reads the session
manager's table (``_server_instances``); tests/test_http_serving_security.py pins that it works.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER

if TYPE_CHECKING:
    from mcp.server.streamable_http import StreamableHTTPServerTransport
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

_SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode("ascii")


class UnusedSessionReaper:
    """ASGI middleware: a session whose opening request is its only one closes after `timeout` seconds."""

    def __init__(self, app: ASGIApp, manager: StreamableHTTPSessionManager, timeout: float) -> None:
        self._app = app
        self._manager = manager
        self._timeout = timeout
        # Sessions whose opening response has started and not yet ended, and that no other
        # request has named since: the client learns the ID from that response's headers.
        self._opening: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        named = _session_id(scope["headers"])
        if named is not None:
            self._opening.discard(named)  # a request after the opening one: the session is in use
            await self._app(scope, receive, send)
            return
        opened: str | None = None

        async def watch(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened = _session_id(message.get("headers", []))
                if opened is not None:
                    self._opening.add(opened)
            await send(message)

        try:
            await self._app(scope, receive, watch)
        finally:
            if opened is not None and opened in self._opening:
                self._opening.discard(opened)
                self._shorten(opened)

    def _shorten(self, session_id: str) -> None:
        """Bring the idle deadline of an unused session in to `timeout` from now."""
        transport = _transport(self._manager, session_id)
        idle = None if transport is None else transport.idle_scope
        if idle is None or idle.deadline == math.inf:  # gone already, or a request in flight holds it
            return
        idle.deadline = min(idle.deadline, anyio.current_time() + self._timeout)


def _transport(
    manager: StreamableHTTPSessionManager, session_id: str
) -> StreamableHTTPServerTransport | None:
    return manager._server_instances.get(session_id)


def _session_id(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    return next((value.decode("latin-1") for name, value in headers if name == _SESSION_HEADER), None)
