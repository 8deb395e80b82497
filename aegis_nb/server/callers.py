"""Who is calling: the identity a saga handle is bound to, from the SDK's public request context.

A saga opened by one caller answers that caller only (aegis_nb.server.saga_handles). The caller is,
first match wins:

1. the bearer token's principal, when the server authenticates with the SDK's auth (a
   `TokenVerifier`): its (client id, issuer, subject), as the SDK binds sessions and request state;
2. over streamable HTTP, the protocol session (``Mcp-Session-Id``, 2025-11-25 and older): the SDK
   routes a request to a session only by that header, so a request that reaches a tool with it is
   that session's;
3. over a connection of its own (stdio, an in-process `Client`): that connection. The SDK serves each
   such connection inside its own run of the server's lifespan, whose state it hands every request
   as ``lifespan_context``; `Callers.connected` mints an identity for each run;
4. otherwise none: protocol 2026-07-28 over HTTP has no sessions (SEP-2567) and, without the SDK's
   auth, nothing else tells two clients apart. Then the handle alone is the capability: 256 random
   bits only its holder knows, as a per-saga owner secret sent in ``_meta`` would be (and it would
   travel with the handle anyway). A static ``--token`` is a door key shared by every client, not an
   identity, so it binds nothing.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import principal_components
from mcp.server.mcpserver import Context
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER

from aegis_nb.server.signature import request_context

SESSION_HEADER: Final = MCP_SESSION_ID_HEADER.lower()


class Callers:
    """One server's identities for its callers (see the module docstring); `of(request)` finds one."""

    def __init__(self) -> None:
        # Lifespan state -> (identity, runs using that state now). Keyed by id(): the state is held
        # by its run for as long as the entry is here, so no other live object has that id.
        self._connections: dict[int, tuple[str, int]] = {}

    @asynccontextmanager
    async def connected(self, state: object) -> AsyncIterator[None]:
        """Mark one run of the lifespan (one connection), whose requests see `state`, as a caller.

        A lifespan that yields one shared object to several connections at once makes them one caller.
        """
        key = id(state)
        identity, runs = self._connections.get(key, (secrets.token_urlsafe(16), 0))
        self._connections[key] = (identity, runs + 1)
        try:
            yield
        finally:
            identity, runs = self._connections[key]
            if runs == 1:
                del self._connections[key]
            else:
                self._connections[key] = (identity, runs - 1)

    def of(self, request: Context[Any, Any] | None) -> str | None:
        """The identity of the caller of `request`, or None when it has none (see above)."""
        token = get_access_token()
        if token is not None:
            return "principal:" + json.dumps(principal_components(token))
        context = request_context(request)
        if context is None:  # called in process, outside any request
            return None
        if context.request is not None:  # streamable HTTP
            headers = getattr(context.request, "headers", None)
            session = None if headers is None else headers.get(SESSION_HEADER)
            return None if not session else f"session:{session}"
        found = self._connections.get(id(context.lifespan_context))
        return None if found is None else f"connection:{found[0]}"
