"""Streamable HTTP session admission that one peer cannot exhaust (protocol 2025-11-25 and older).

A session costs its client one ``initialize`` and the server a task and its streams until it is
closed, so a peer opening sessions at full speed fills any table, and a table that refuses
newcomers when full (the SDK's: 503) then keeps everyone out. Every peer may share one address
(loopback, a proxy), so a budget per address cannot tell the flooder apart. `SessionAdmission`
keeps its own table of the sessions the server opened, from the ``Mcp-Session-Id`` each opening
answer carries, and decides by what each session did:

- A full table closes its least recently active idle session to admit a newcomer, sessions that
  did nothing beyond their initialization first (``initialize`` and the ``initialized``
  notification, and no GET stream open); a flood of sessions then replaces its own. A session with
  a request in flight (a call being served) is never closed; a GET stream alone does not hold one
  (else a peer holding one per session would pin the table).
- A session that did nothing beyond its initialization, with no request in flight, is closed after
  `unused_timeout` seconds.

A session is closed as its client would close it: a DELETE naming it, sent to the server's own app,
with the headers the opening request passed the Host, Origin and token checks with. Requests that
name a session being closed answer 404 at once, as the SDK answers for one that is gone.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

_SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode("ascii")
_VERSION_HEADER = b"mcp-protocol-version"
_CLOSING_HEADERS = frozenset({b"host", b"origin", b"authorization"})
"""What a DELETE closing a session carries of its opening request: what the checks look at."""
_INITIALIZATION = frozenset({"initialize", "notifications/initialized"})
_PEEKED = 64 * 1024
"""Bytes of a request body read to tell initialization from use; a longer body is use."""
_GONE = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}'
"""The SDK's answer for a session it does not know."""


@dataclass(frozen=True, slots=True)
class _Session:
    """One open session as the admission sees it."""

    closing: Scope = field(repr=False)  # the DELETE that closes it (holds the opening's credentials)
    last_active: float  # when a request of it last started or ended
    calls: int = 0  # requests in flight other than GET streams: the session is busy
    streams: int = 0  # GET streams open
    used: bool = False  # a request beyond its initialization was answered

    @property
    def idle(self) -> bool:
        return self.calls == 0

    @property
    def unused(self) -> bool:
        """Nothing beyond its initialization, and no stream open: what a flooder leaves."""
        return not self.used and self.streams == 0


class SessionAdmission:
    """ASGI middleware around the SDK's streamable HTTP app: at most `capacity` sessions, see module."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        capacity: int,
        unused_timeout: float,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        self._app = app
        self._capacity = capacity
        self._unused_timeout = unused_timeout
        self._clock = clock
        # In order of last activity, least recent first (a touched session moves to the end).
        self._sessions: dict[str, _Session] = {}
        self._closing: set[str] = set()
        self._changed: anyio.Event | None = None  # made when the app starts: an Event needs its loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(scope, receive, send)
        elif scope["type"] != "http" or _header(scope, _VERSION_HEADER) not in (
            None,
            *HANDSHAKE_PROTOCOL_VERSIONS,
        ):
            await self._app(scope, receive, send)  # 2026-07-28 and later: no sessions
        elif (named := _header(scope, _SESSION_HEADER)) is None:
            await self._serve_opening(scope, receive, send)
        else:
            await self._serve_session(named, scope, receive, send)

    # -- serving --------------------------------------------------------------------------------

    async def _serve_lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app's lifespan, with the closing of unused sessions beside it until shutdown begins."""
        self._changed = anyio.Event()
        expiring = anyio.CancelScope()

        async def until_shutdown() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                expiring.cancel()  # the SDK's session manager stops next: close nothing through it
            return message

        async def expire() -> None:
            with expiring:
                await self._expire_unused()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(expire)
            try:
                await self._app(scope, until_shutdown, send)
            finally:
                expiring.cancel()

    async def _serve_opening(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request naming no session: if the server opens one, make room for it before it is known."""
        opened: str | None = None
        closing = _closing_scope(scope)

        async def admit(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened = _header_of(message.get("headers", []), _SESSION_HEADER)
                if opened is not None:
                    self._put(opened, _Session(closing(opened), self._clock(), calls=1))
                    # Before its client learns the ID: once this answer is out, the table is whole.
                    while len(self._sessions) > self._capacity and (victim := self._victim(opened)):
                        await self._close(victim, "to admit a new session")
            await send(message)

        try:
            await self._app(scope, receive, admit)
        finally:
            if opened is not None:
                self._ended(opened, call=True, used=False, gone=False)

    async def _serve_session(self, named: str, scope: Scope, receive: Receive, send: Send) -> None:
        """A request of session `named`: busy while in flight, used once beyond its initialization."""
        if named in self._closing:
            await _not_found(send)
            return
        session = self._sessions.get(named)
        if session is None:  # not one this admission opened, or gone: the SDK answers
            await self._app(scope, receive, send)
            return
        call = scope["method"] != "GET"
        self._put(named, replace(session, calls=session.calls + call, streams=session.streams + (not call)))
        body = bytearray()
        status: int | None = None

        async def peek() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(body) <= _PEEKED:
                body.extend(message.get("body", b""))
            return message

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._app(scope, peek, watch)
        finally:
            answered = status is not None and status < 400
            used = scope["method"] == "POST" and answered and not _initialization_only(bytes(body))
            gone = status == 404 or (scope["method"] == "DELETE" and answered)
            self._ended(named, call=call, used=used, gone=gone)

    # -- the table ------------------------------------------------------------------------------

    def _put(self, session_id: str, session: _Session) -> None:
        """Record `session` as the most recently active (a dict keeps insertion order)."""
        self._sessions.pop(session_id, None)
        self._sessions[session_id] = replace(session, last_active=self._clock())
        self._wake()

    def _ended(self, session_id: str, *, call: bool, used: bool, gone: bool) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            return  # closed meanwhile
        if gone:
            del self._sessions[session_id]
            return
        self._put(
            session_id,
            replace(
                session,
                calls=session.calls - call,
                streams=session.streams - (not call),
                used=session.used or used,
            ),
        )

    def _victim(self, newcomer: str) -> str | None:
        """The idle session to close for `newcomer`: unused ones first, each kind least recent first."""
        idle = (
            (not session.unused, session.last_active, session_id)
            for session_id, session in self._sessions.items()
            if session.idle and session_id != newcomer
        )
        chosen = min(idle, default=None)
        return None if chosen is None else chosen[2]

    async def _close(self, session_id: str, why: str) -> None:
        """Close the session through the app, as its client would (shielded: the table and the SDK
        agree on it whatever happens to the request that needed the room)."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return  # closed meanwhile (by its client, or for another newcomer)
        self._closing.add(session_id)
        answered: list[int] = []
        try:
            with anyio.CancelScope(shield=True):
                await self._app(session.closing, _empty_body(), _status_into(answered))
        finally:
            self._closing.discard(session_id)
        logger.debug("closed an idle session %s (answered %s)", why, answered[:1])

    async def _expire_unused(self) -> None:
        """Close each unused, idle session `unused_timeout` after its last activity, until cancelled."""
        while True:
            assert self._changed is not None
            changed = self._changed
            # The table is in order of last activity: the first unused, idle session is due first.
            first = next(
                ((sid, s.last_active) for sid, s in self._sessions.items() if s.unused and s.idle), None
            )
            due = math.inf if first is None else first[1] + self._unused_timeout
            if first is not None and due <= self._clock():
                await self._close(first[0], "unused")  # chosen and taken out with no await between
                continue
            with anyio.CancelScope(deadline=due):
                await changed.wait()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = anyio.Event()


def _closing_scope(opening: Scope) -> Callable[[str], Scope]:
    """The DELETE request that closes the session `opening` opened, as it reached this app."""
    kept = [(name, value) for name, value in opening["headers"] if name in _CLOSING_HEADERS]
    base: dict[str, Any] = {
        key: opening[key]
        for key in (
            "type",
            "asgi",
            "http_version",
            "scheme",
            "server",
            "client",
            "root_path",
            "path",
            "state",
        )
        if key in opening
    }

    def closing(session_id: str) -> Scope:
        headers = [*kept, (_SESSION_HEADER, session_id.encode("latin-1"))]
        return {**base, "method": "DELETE", "query_string": b"", "headers": headers}

    return closing


def _empty_body() -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": b"", "more_body": False}

    return receive


def _status_into(answered: list[int]) -> Send:
    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    return send


async def _not_found(send: Send) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_GONE)).encode())]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": _GONE})


def _initialization_only(body: bytes) -> bool:
    """Whether a POST body holds only ``initialize`` or the ``initialized`` notification."""
    if len(body) > _PEEKED:
        return False
    try:
        message = json.loads(body)
    except ValueError:
        return False
    messages = message if isinstance(message, list) else [message]
    return all(isinstance(m, dict) and m.get("method") in _INITIALIZATION for m in messages)


def _header(scope: Scope, name: bytes) -> str | None:
    return _header_of(scope["headers"], name)


def _header_of(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    return next((value.decode("latin-1") for key, value in headers if key == name), None)
