"""Which agent-saga registry serves a request: the one of the lifespan run the request came through.

The SDK runs a server's lifespan once per served connection over stdio or in process (a `Client`
given the server object), and once for all sessions over streamable HTTP; it hands every request
that run's state as ``lifespan_context``. `SagaServing` holds one `SagaHandles` per run, found by
that state, so two in-process clients of one server each reach their own sagas (a single attribute,
set by the latest run, sent the first client's calls to the second's registry, and to none once the
second left).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import Context

from aegis_nb.server.saga_handles import SagaHandles
from aegis_nb.server.signature import request_context


class SagaServing:
    """The registries of the lifespan runs serving now, each built by `make` when its run starts."""

    def __init__(self, make: Callable[[], SagaHandles]) -> None:
        self._make = make
        # Lifespan state -> the registries of the runs that yielded it (one, unless a lifespan yields
        # one shared object to several runs: then the latest serves). Keyed by id(): each state is
        # held by its run for as long as it is here.
        self._runs: dict[int, list[SagaHandles]] = {}

    @asynccontextmanager
    async def serving(self, state: object) -> AsyncIterator[SagaHandles]:
        """Hold a registry for the run whose requests see `state`; leaving rolls back its open sagas."""
        async with self._make() as handles:
            key = id(state)
            self._runs.setdefault(key, []).append(handles)
            try:
                yield handles
            finally:
                self._runs[key].remove(handles)
                if not self._runs[key]:
                    del self._runs[key]

    def of(self, request: Context[Any, Any] | None) -> SagaHandles | None:
        """The registry serving `request`; outside any request, the only one if exactly one serves."""
        context = request_context(request)
        if context is None:
            return self.only()
        found = self._runs.get(id(context.lifespan_context))
        return None if not found else found[-1]

    def only(self) -> SagaHandles | None:
        """The one registry serving now, or None (none, or several: then it depends on the request)."""
        runs = [handles for registries in self._runs.values() for handles in registries]
        return runs[0] if len(runs) == 1 else None
