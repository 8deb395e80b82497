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
from html import escape
from typing import Any

from aegis_nb.kernel.errors import ToolError
from aegis_nb.mock.agency import TravelAgency
from aegis_nb.mock.ledger import LedgerState
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

    def ledger(self) -> LedgerView:
        """What is live in the ledger now, as a table."""
        return LedgerView(self.agency.state())

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


def ledger_summary(state: LedgerState) -> str:
    """``1 flight, 1 hotel, 1 charge ($512.00 held)`` or ``empty``."""
    parts = [
        _count(len(state.flights), "flight"),
        _count(len(state.hotels), "hotel"),
        _count(len(state.charges), "charge"),
    ]
    live = [part for part in parts if part]
    if not live:
        return "empty"
    held = f" ({dollars(state.balance_cents)} held)" if state.balance_cents else ""
    return f"{', '.join(live)}{held}"


def ledger_change(before: LedgerState, after: LedgerState) -> str:
    """One line comparing the ledger before and after a run."""
    if (before.flights, before.hotels, before.charges) == (after.flights, after.hotels, after.charges):
        return f"travel ledger unchanged: {ledger_summary(after)}"
    return f"travel ledger: {ledger_summary(before)} → {ledger_summary(after)}"


def dollars(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _count(n: int, noun: str) -> str:
    if n == 0:
        return ""
    return f"{n} {noun}{'s' if n != 1 else ''}"


class LedgerView:
    """The live bookings and charges as a small table (``text/html``) and as text."""

    __slots__ = ("state",)

    def __init__(self, state: LedgerState) -> None:
        self.state = state

    def rows(self) -> list[tuple[str, str, str]]:
        """``(id, what, amount)`` for every live booking and charge."""
        rows = []
        for booking in (*self.state.flights, *self.state.hotels):
            what = f"{booking.kind.value} {booking.item} → {booking.place}"
            if booking.nights is not None:
                what = f"{booking.kind.value} {booking.item}, {booking.nights} nights"
            rows.append((booking.id, what, dollars(booking.price_cents)))
        for charge in self.state.charges:
            rows.append((charge.id, f"charge on card …{charge.card_last4}", dollars(charge.amount_cents)))
        return rows

    def __repr__(self) -> str:
        rows = self.rows()
        head = f"travel ledger: {ledger_summary(self.state)}"
        tail = f"(undone so far: {self.state.cancellations} cancellations, {self.state.refunds} refunds)"
        if not rows:
            return f"{head}\n{tail}"
        width = max(len(what) for _, what, _ in rows)
        lines = [f"  {ident:<8} {what:<{width}} {amount:>10}" for ident, what, amount in rows]
        return "\n".join([head, *lines, tail])

    def _repr_html_(self) -> str:
        rows = self.rows()
        cells = "".join(
            f"<tr><td><code>{escape(ident)}</code></td><td>{escape(what)}</td>"
            f'<td style="text-align:right">{escape(amount)}</td></tr>'
            for ident, what, amount in rows
        )
        body = (
            cells or '<tr><td colspan="3" style="color:#15803d">nothing live: the ledger is clean</td></tr>'
        )
        return (
            '<table class="aegis-ledger" style="border-collapse:collapse;font-size:13px">'
            f'<caption style="text-align:left;font-weight:600">travel ledger: '
            f"{escape(ledger_summary(self.state))}</caption>"
            "<thead><tr><th>id</th><th>what</th><th>amount</th></tr></thead>"
            f"<tbody>{body}</tbody></table>"
            f'<div style="color:#64748b;font-size:12px">undone so far: {self.state.cancellations} '
            f"cancellations, {self.state.refunds} refunds</div>"
        )
