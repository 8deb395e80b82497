"""An `AegisMCP` travel agency whose booking tools are compensable, for the agent tests.

``aegis-nb serve tests.servers.compensable_agency:app`` (from the repository root) serves it; the
ledger is the mock agency's, in the SQLite file ``$AEGIS_AGENT_LEDGER`` (in memory when unset), so a
test reads what the agent's saga left standing. Prices and ids are the mock agency's, so the trip
agent's calls and their answers read the same as through the gateway. Each undo is a tool of the
app, bound to the booking's id (the flight, the hotel) or written as a function (the refund).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from aegis_nb.kernel.errors import ToolError
from aegis_nb.mock import DECLINED, DECLINED_TEST_CARD, BookingKind, Ledger, flight_offers, hotel_rate_cents
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.compensable import UndoTool


def build(ledger: Ledger) -> AegisMCP:
    """The app over `ledger`."""
    app = AegisMCP("compensable-agency")

    @app.tool()
    async def cancel_flight(booking_id: str, idempotency_key: str = "") -> dict[str, Any]:
        """Cancel a flight booking."""
        undo = ledger.cancel(BookingKind.FLIGHT, booking_id=booking_id)
        return {"id": undo.id, "changed": undo.changed}

    @app.tool()
    async def cancel_hotel(booking_id: str, idempotency_key: str = "") -> dict[str, Any]:
        """Cancel a hotel reservation."""
        undo = ledger.cancel(BookingKind.HOTEL, booking_id=booking_id)
        return {"id": undo.id, "changed": undo.changed}

    @app.tool(compensate=UndoTool.of("cancel_flight", {"booking_id": "/result/booking_id"}))
    async def book_flight(destination: str, idempotency_key: str = "") -> dict[str, Any]:
        """Book the cheapest flight to `destination`."""
        offer = min(flight_offers(destination), key=lambda o: o["price_cents"])
        booking = ledger.book(
            BookingKind.FLIGHT,
            destination,
            offer["flight_no"],
            offer["price_cents"],
            idempotency_key=idempotency_key or None,
        )
        return dict(booking.to_json())

    @app.tool(compensate=UndoTool.of("cancel_hotel", {"booking_id": "$response.body#/booking_id"}))
    async def reserve_hotel(city: str, nights: int, idempotency_key: str = "") -> dict[str, Any]:
        """Reserve a room in `city` for `nights` nights."""
        booking = ledger.book(
            BookingKind.HOTEL,
            city,
            f"Hotel {city.title()}",
            nights * hotel_rate_cents(city),
            nights=nights,
            idempotency_key=idempotency_key or None,
        )
        return dict(booking.to_json())

    async def refund(arguments: Mapping[str, Any], result: Mapping[str, Any] | None, key: str) -> None:
        # Refunded by key: a charge whose answer never came (result None) is found by it too.
        ledger.refund(idempotency_key=key)

    @app.tool(compensate=refund, secret="card_number")
    async def charge_card(amount_cents: int, card_number: str, idempotency_key: str = "") -> dict[str, Any]:
        """Charge `amount_cents` to the card."""
        if card_number == DECLINED_TEST_CARD:
            raise ToolError("charge_card", DECLINED)
        charge = ledger.charge(amount_cents, card_number[-4:], idempotency_key=idempotency_key or None)
        return dict(charge.to_json())

    return app


app = build(Ledger(os.environ.get("AEGIS_AGENT_LEDGER") or None))
