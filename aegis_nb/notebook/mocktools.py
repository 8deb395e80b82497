"""``--mock travel``: the mock MCP travel agency, reachable from steps through one variable (``travel``).

`MockTools` is what the magics bind to ``travel``: a `ToolCaller` whose calls go through a real MCP
client session on the agency. While a saga runs with ``--mock travel`` every call uses that run's
session; outside a run (a cell that looks at the bookings) each call opens a short one of its own.
Steps may therefore be built before any run, e.g. ``ToolPairStep(travel, "book_flight", ...)``.
A rehearsal points the same object at a fresh agency for each scenario, so every scenario starts
from an empty ledger.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

from aegis_nb.kernel.errors import ToolError
from aegis_nb.mock.agency import TravelAgency
from aegis_nb.mock.ledgertext import LedgerTable, ledger_summary
from aegis_nb.server.session import ToolSession

MOCK_VARIABLE = "travel"
"""The variable the magics bind the mock travel tools to."""


class MockTools:
    """The mock travel agency's tools as a session-like object, plus its ledger for inspection.

    Which agency and session a call uses is kept per task (a context variable of this object), so a
    saga in the background and a rehearsal in the foreground each talk to their own agency.
    """

    def __init__(self, agency: TravelAgency | None = None) -> None:
        self._agency = agency if agency is not None else TravelAgency()
        self._route: ContextVar[tuple[TravelAgency, ToolSession] | None] = ContextVar(
            f"aegis_mock_route_{id(self)}", default=None
        )

    @property
    def agency(self) -> TravelAgency:
        """The agency now served: its ledger and fault plan (``travel.agency.set_tool_faults(...)``)."""
        route = self._route.get()
        return self._agency if route is None else route[0]

    def ledger(self) -> LedgerTable:
        """What is live in the ledger now, as a table."""
        return LedgerTable(self.agency.state())

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, meta: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Call a tool through the run's MCP session (or a short one of its own); `ToolError` on error."""
        route = self._route.get()
        if route is not None:
            return await route[1].call_tool(name, arguments, meta=meta)
        failure: ToolError
        async with self._agency.connect() as session:
            try:
                return await session.call_tool(name, arguments, meta=meta)
            except ToolError as exc:
                # Raised out here: inside the session, its task group would wrap it in an ExceptionGroup.
                failure = exc
        raise failure

    async def list_tools(self) -> list[str]:
        async with self.agency.connect() as session:
            return await session.list_tools()

    @asynccontextmanager
    async def connected(self, agency: TravelAgency | None = None) -> AsyncIterator[MockTools]:
        """Route this task's calls through one MCP client session (on `agency`, if given)."""
        target = self._agency if agency is None else agency
        async with target.connect() as session:
            token = self._route.set((target, session))
            try:
                yield self
            finally:
                self._route.reset(token)

    def __repr__(self) -> str:
        state = "connected" if self._route.get() is not None else "idle"
        return f"<mock travel tools ({state}): {ledger_summary(self.agency.state())}>"
