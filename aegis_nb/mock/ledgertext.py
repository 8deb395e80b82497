"""The ledger as a person reads it: money, one-line summaries, and a table (as text and as HTML).

Kept apart from the values (`bookings`) so that what they are and how they read can change apart;
`LedgerState.summary()` and its notebook display come from here.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from aegis_nb.kernel.text import counted

if TYPE_CHECKING:  # bookings imports this module for LedgerState's display
    from aegis_nb.mock.bookings import LedgerState


def money(cents: int) -> str:
    """``€555.00``: the agency prices everything in euro cents."""
    return f"€{cents / 100:,.2f}"


def undone_text(cancellations: int, refunds: int) -> str:
    """``2 cancellations, 1 refund``: what the agency has undone."""
    return f"{counted(cancellations, 'cancellation')}, {counted(refunds, 'refund')}"


def ledger_summary(state: LedgerState) -> str:
    """``1 flight, 1 hotel, 1 charge (€512.00 held)`` or ``empty``."""
    kinds = (("flight", state.flights), ("hotel", state.hotels), ("charge", state.charges))
    live = [counted(len(records), noun) for noun, records in kinds if records]
    if not live:
        return "empty"
    held = f" ({money(state.balance_cents)} held)" if state.balance_cents else ""
    return f"{', '.join(live)}{held}"


def ledger_change(before: LedgerState, after: LedgerState) -> str:
    """One line comparing the ledger before and after a run."""
    if (before.flights, before.hotels, before.charges) == (after.flights, after.hotels, after.charges):
        return f"travel ledger unchanged: {ledger_summary(after)}"
    return f"travel ledger: {ledger_summary(before)} → {ledger_summary(after)}"


class LedgerTable:
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
            rows.append((booking.id, what, money(booking.price_cents)))
        for charge in self.state.charges:
            rows.append((charge.id, f"charge on card …{charge.card_last4}", money(charge.amount_cents)))
        return rows

    def __repr__(self) -> str:
        rows = self.rows()
        head = f"travel ledger: {ledger_summary(self.state)}"
        tail = f"(undone so far: {undone_text(self.state.cancellations, self.state.refunds)})"
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
            f'<div style="color:#64748b;font-size:12px">undone so far: '
            f"{undone_text(self.state.cancellations, self.state.refunds)}</div>"
        )
