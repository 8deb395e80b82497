"""Who streamable HTTP lets in: Host and Origin allow-lists, a bearer token, and bounded sessions.

The SDK checks Host and Origin (DNS rebinding) only when it serves on 127.0.0.1, localhost or ::1,
and not at all anywhere else; `HttpSecurity` always turns the check on, with the SDK's own
`TransportSecuritySettings` (a bad Host answers 421, a bad Origin 403). On loopback the loopback
names are allowed, plus any configured; off loopback (0.0.0.0, a LAN address, a host name) nothing
is allowed until `allowed_hosts` names what clients reach the server by, so `UnsafeServing` refuses
to start without it. Browsers send an Origin: only `allowed_origins` may call (none by default).

The bearer token is a small ASGI gate of our own (`BearerTokenGate`), not the SDK's auth
(`AuthSettings` with a `TokenVerifier`): that one requires an OAuth issuer URL, lives in the
server's constructor rather than in how it is served, and keeps the presented token in an
`AccessToken` whose repr shows it. A static token needs none of that: compare it in constant time
(`hmac.compare_digest`) and answer 401 with ``WWW-Authenticate: Bearer``. It guards every HTTP
request, the app's custom routes too. The token is a `Secret`: no repr, log or error shows it.

Sessions (protocol 2025-11-25 and older; 2026-07-28 has none) are admitted by
`aegis_nb.server.http_sessions`: at most ``max_sessions`` open, and a full table closes its least
recently active idle session (one that did nothing beyond its initialization first) rather than
refusing the newcomer, so one peer flooding ``initialize`` keeps nobody out; a session that did
nothing beyond its initialization is closed after ``unused_session_timeout``. The SDK's
``session_idle_timeout`` closes any session with no request in flight for that long.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
from dataclasses import dataclass, field
from types import UnionType
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings

from aegis_nb.kernel.errors import AegisError
from aegis_nb.kernel.values import Secret
from aegis_nb.server.http_sessions import SessionAdmission

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)

DEFAULT_MAX_SESSIONS: Final = 1000
"""Sessions open at once (the SDK's default, 10,000, holds 370 MiB); a newcomer to a full table
takes an idle session's place."""

DEFAULT_SESSION_IDLE_TIMEOUT: Final = 600.0
"""Seconds a session may go without a request in flight before it is closed (the SDK's: 1800).
A client holding its GET stream open is never idle."""

DEFAULT_UNUSED_SESSION_TIMEOUT: Final = 30.0
"""Seconds a session that did nothing beyond its initialization (``initialize``, the ``initialized``
notification, no GET stream open) is kept. A full table closes such sessions first anyway."""

LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
"""The Host names allowed on loopback, as the SDK allows them, with the bind address added."""

TOKEN_ENV: Final = "AEGIS_NB_TOKEN"
"""The environment variable `aegis-nb serve` reads the token from (a --token shows in `ps`)."""


class UnsafeServing(AegisError, ValueError):
    """Serving streamable HTTP off loopback without `allowed_hosts`: refused before anything starts."""

    def __init__(self, host: str) -> None:
        self.host = host
        super().__init__(
            f"refusing to serve on {host}, off loopback, without allowed_hosts: name the hosts clients"
            " reach the server by (allowed_hosts=['mcp.example.com']), and allowed_origins for the web"
            " pages allowed to call it; or serve on 127.0.0.1"
        )


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only: localhost, 127.0.0.0/8 or ::1 (0.0.0.0 is all)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def host_patterns(text: str) -> tuple[str, ...]:
    """``HOST[:PORT]`` -> the Host header values the SDK should allow: without a port, any port.

    A name alone allows ``name`` (a proxy on the default port) and ``name:*`` (any port).
    """
    value = text.strip().lower()
    if not value or "://" in value or any(c in value for c in "/?#@ \t"):
        raise ValueError(f"expected HOST[:PORT] (mcp.example.com, mcp.example.com:8000), got {text!r}")
    if value.startswith("["):  # [IPv6] or [IPv6]:PORT
        name, bracket, rest = value.partition("]")
        name += bracket
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"expected [IPv6] or [IPv6]:PORT, got {text!r}")
        port = rest[1:] if rest else None
    elif value.count(":") > 1:  # a bare IPv6 address: Host headers bracket it
        name, port = f"[{value}]", None
    else:
        name, colon, port_text = value.partition(":")
        port = port_text if colon else None
    if name in ("", "[]"):
        raise ValueError(f"expected HOST[:PORT] with a host, got {text!r}")
    if port is None:
        return (name, f"{name}:*")
    if port != "*" and not (port.isdigit() and 0 < int(port) <= 65535):
        raise ValueError(f"expected a port 1-65535 or * after the host, got {text!r}")
    return (f"{name}:{port}",)


def origin(text: str) -> str:
    """An Origin header value to allow: ``scheme://host[:port]`` (port ``*``: any), no path."""
    parts = urlsplit(text.strip())
    try:
        port_ok = parts.port is not None or not parts.netloc.endswith(":")
    except ValueError:  # not a number: only the SDK's wildcard is a port then
        port_ok = parts.netloc.endswith(":*")
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or not port_ok
        or "@" in parts.netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise ValueError(f"expected an origin scheme://host[:port] (http or https, no path), got {text!r}")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def check_token(token: Secret) -> None:
    """A token fit for an HTTP header, or ValueError (whose message never holds the token)."""
    value = token.reveal()
    if not value:
        raise ValueError("the bearer token is empty")
    if not all("!" <= c <= "~" for c in value):
        raise ValueError("the bearer token must be printable ASCII with no spaces (it travels in a header)")


@dataclass(frozen=True, slots=True)
class HttpSecurity:
    """How `serve_http` lets requests in: allow-lists, an optional token, the session bounds.

    Raw option values are normalised on construction (`host_patterns`, `origin`); a bad one is a
    ValueError naming the field.
    """

    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    token: Secret | None = field(default=None, repr=False)
    max_sessions: int = DEFAULT_MAX_SESSIONS
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT
    unused_session_timeout: float = DEFAULT_UNUSED_SESSION_TIMEOUT

    def __post_init__(self) -> None:
        try:
            hosts = tuple(p for text in self.allowed_hosts for p in host_patterns(text))
        except ValueError as exc:
            raise ValueError(f"allowed_hosts: {exc}") from None
        try:
            origins = tuple(origin(text) for text in self.allowed_origins)
        except ValueError as exc:
            raise ValueError(f"allowed_origins: {exc}") from None
        # Frozen: the normalised values replace the raw ones once, here.
        object.__setattr__(self, "allowed_hosts", tuple(dict.fromkeys(hosts)))
        object.__setattr__(self, "allowed_origins", tuple(dict.fromkeys(origins)))
        if self.token is not None:
            check_token(self.token)
        if not _is_number(self.max_sessions, int) or self.max_sessions < 1:
            raise ValueError(f"max_sessions: expected a whole number >= 1, got {self.max_sessions!r}")
        for name in ("session_idle_timeout", "unused_session_timeout"):
            seconds = getattr(self, name)
            if not (_is_number(seconds, int | float) and math.isfinite(seconds) and seconds > 0):
                raise ValueError(f"{name}: expected a positive, finite number of seconds, got {seconds!r}")

    def transport_security(self, host: str) -> TransportSecuritySettings:
        """The SDK's Host/Origin check for serving on `host`; `UnsafeServing` off loopback with no hosts."""
        hosts, origins = list(self.allowed_hosts), list(self.allowed_origins)
        if is_loopback(host):
            bound = f"[{host.strip('[]')}]" if ":" in host else host
            names = dict.fromkeys([bound.lower(), *LOOPBACK_NAMES])
            hosts += [f"{name}:*" for name in names]
            origins += [f"http://{name}:*" for name in names]
        elif not hosts:
            raise UnsafeServing(host)
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
        )


def _is_number(value: object, kind: type | UnionType) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)  # True is an int, not a count


def secured_app(server: MCPServer[object], host: str, security: HttpSecurity) -> ASGIApp:
    """`server`'s streamable HTTP app (at /mcp) behind `security`, for serving on `host`."""
    checks = security.transport_security(host)  # first: a refusal leaves the server untouched
    app: ASGIApp = server.streamable_http_app(
        host=host,
        transport_security=checks,
        # The SDK refuses past its limit; ours makes room instead, once an opening is answered,
        # so the SDK's own limit leaves room for the sessions being opened at that moment.
        max_sessions=2 * security.max_sessions,
        session_idle_timeout=security.session_idle_timeout,
    )
    app = SessionAdmission(
        app, capacity=security.max_sessions, unused_timeout=security.unused_session_timeout
    )
    if security.token is not None:
        app = BearerTokenGate(app, security.token)
    elif not is_loopback(host):
        logger.warning("serving on %s without a bearer token: whoever can reach it can call its tools", host)
    return app


async def serve_http(server: MCPServer[object], host: str, port: int, security: HttpSecurity) -> None:
    """Serve `server` at ``http://host:port/mcp`` with uvicorn until stopped (as the SDK's own run does)."""
    import uvicorn

    app = secured_app(server, host, security)
    config = uvicorn.Config(app, host=host, port=port, log_level=server.settings.log_level.lower())
    await uvicorn.Server(config).serve()


class BearerTokenGate:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <token>`` gets 401."""

    def __init__(self, app: ASGIApp, token: Secret) -> None:
        check_token(token)
        self._app = app
        self._token = token  # kept a Secret, so that not even vars(gate) shows it

    def __repr__(self) -> str:
        return "BearerTokenGate(token=***)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan: starts and stops the sessions, no request
            await self._app(scope, receive, send)
            return
        presented = next((value for name, value in scope["headers"] if name == b"authorization"), None)
        if presented is None:
            # RFC 6750: a request with no credentials at all gets a challenge without an error code.
            await _unauthorized(send, "Bearer", "this server needs an Authorization: Bearer token")
            return
        scheme, _, credentials = presented.partition(b" ")
        expected = self._token.reveal().encode("ascii")
        # Constant time, so the answer's timing tells nothing about how much of a guess was right.
        if scheme.lower() != b"bearer" or not hmac.compare_digest(credentials.strip(), expected):
            client = scope.get("client")
            logger.warning(
                "refused a request with a wrong bearer token from %s", client[0] if client else "?"
            )
            await _unauthorized(send, 'Bearer error="invalid_token"', "the bearer token is not valid")
            return
        await self._app(scope, receive, send)


async def _unauthorized(send: Send, challenge: str, description: str) -> None:
    """A 401 with `challenge` as ``WWW-Authenticate``, its body shaped as the SDK's own auth answers."""
    body = json.dumps({"error": "invalid_token", "error_description": description}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", challenge.encode()),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
