"""The mock travel agency: an MCP server of flight, hotel and card tools over a `Ledger`, with faults.

Tools: ``search_flights``, ``book_flight``/``cancel_flight``, ``reserve_hotel``/``cancel_hotel``,
``charge_card``/``refund_card``, ``list_bookings``, and ``set_faults`` (replace the fault plan while
serving, for clients in another process). Every booking tool takes an optional ``idempotency_key``;
every undo tool takes the id it returned *or* that key, so an in-doubt step can be undone without
knowing whether it happened. Prices are derived from the names, so runs are reproducible.

Optional text arguments are typed ``str`` with ``""`` for "not given", not ``str | None``: the SDK
tries to parse every string sent for a parameter not typed exactly ``str`` as JSON (so a client may
send a list as text), and a key such as ``run-id/0`` fails that parse with an exception on every
call of a tool-pair step (~20 µs a call in bench/mcp.py). An empty key, id or flight number means none.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, NotRequired, TypeGuard, cast

import anyio
from pydantic import Field, WithJsonSchema
from typing_extensions import TypedDict

from aegis_nb.kernel.errors import ToolError
from aegis_nb.mock.faults import FaultOutcome, FaultPlan, FaultPlanError, FaultState, ToolFaults
from aegis_nb.mock.ledger import BookingKind, Ledger, LedgerError, LedgerState
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.session import ToolSession, connect

DECLINED = "Card Declined!"
DECLINED_TEST_CARD = "4000000000000002"
"""A card number that is always declined (as with payment providers' test cards)."""

Key = Annotated[str, Field(description="Makes retries safe: the same key returns the same result.")]
UndoKey = Annotated[str, Field(description="Undo what was done under this idempotency key instead.")]
UndoId = Annotated[str, Field(description="The id the booking tool returned.")]
# Published as a patterned string but accepted as any JSON value and checked in the tool: pydantic's
# error for a mismatch, a number or a list would repeat the card number to the caller, and into a
# saga's failure report, over four lines.
CardNumber = Annotated[
    object,
    Field(description="12 to 19 digits, no spaces."),
    WithJsonSchema({"type": "string", "pattern": r"^[0-9]{12,19}$"}),
]
_CARD_NUMBER = re.compile(r"[0-9]{12,19}")
_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", list: "an array", dict: "an object"}


def is_card_number(value: object) -> TypeGuard[str]:
    """Whether `value` is a card number the agency can charge: a string of 12 to 19 digits."""
    return isinstance(value, str) and _CARD_NUMBER.fullmatch(value) is not None


def card_number_problem(value: object) -> str:
    """Why `value` is not a card number, in words that never repeat it."""
    if isinstance(value, str):
        return f"a card number is 12 to 19 digits, no spaces, got {len(value)} characters"
    kind = "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)
    return f"a card number is a string of 12 to 19 digits, got {kind}"


class FlightOffer(TypedDict):
    flight_no: str
    destination: str
    price_cents: int


class FlightSearch(TypedDict):
    flights: list[FlightOffer]


class BookingResult(TypedDict):
    booking_id: str
    kind: str
    place: str
    item: str
    nights: NotRequired[int]
    price_cents: int
    status: str


class ChargeResult(TypedDict):
    charge_id: str
    amount_cents: int
    card_last4: str
    status: str


class UndoResult(TypedDict):
    id: str | None
    changed: bool


class LedgerView(TypedDict):
    flights: list[BookingResult]
    hotels: list[BookingResult]
    charges: list[ChargeResult]
    cancellations: int
    refunds: int
    balance_cents: int


def flight_offers(destination: str) -> list[FlightOffer]:
    """Three flights to `destination`, the same every time."""
    seed = zlib.crc32(destination.lower().encode())
    return [
        FlightOffer(
            flight_no=f"AE{100 + (seed >> (8 * i)) % 800}",
            destination=destination,
            price_cents=19_900 + ((seed >> (4 * i)) % 300) * 100,
        )
        for i in range(3)
    ]


def hotel_rate_cents(city: str) -> int:
    """The nightly rate in `city`, the same every time."""
    return 8_000 + (zlib.crc32(city.lower().encode()) % 120) * 100


class TravelAgency:
    """A ledger, a fault plan, and the MCP server (`server`) that exposes them as tools."""

    def __init__(self, ledger: Ledger | None = None, faults: FaultPlan | None = None) -> None:
        self.ledger = ledger if ledger is not None else Ledger()
        self._faults = FaultState(faults or FaultPlan())
        self.server = AegisMCP("travel-agency", tool_timeout=None, workflow_timeout=None)
        self._register()

    # -- faults -----------------------------------------------------------------------------------

    @property
    def faults(self) -> FaultPlan:
        return self._faults.plan

    def set_faults(self, plan: FaultPlan) -> None:
        """Replace the whole fault plan (counters and random generators start afresh)."""
        self._faults = FaultState(plan)

    def set_tool_faults(self, tool: str, faults: ToolFaults) -> None:
        """Replace one tool's faults (its counters and generators start afresh), keeping the others'.

        The other tools keep their state too: a compensation planned to fail twice still fails twice
        in all when another tool's faults change between its calls.
        """
        self._faults.replace_tool(tool, faults)

    def state(self) -> LedgerState:
        """What is live in the ledger now."""
        return self.ledger.state()

    @asynccontextmanager
    async def connect(self, **client_options: Any) -> AsyncIterator[ToolSession]:
        """An in-process client session on this agency (one call, a real MCP client)."""
        async with connect(self.server, **client_options) as session:
            yield session

    async def _before(self, tool: str) -> None:
        delay = self._faults.delay(tool)
        if delay > 0:
            await anyio.sleep(delay)
        outcome = self._faults.before(tool)
        if outcome is FaultOutcome.FAIL:
            raise ToolError(tool, f"{tool} is unavailable (injected failure)")
        if outcome is FaultOutcome.DECLINE:
            raise ToolError(tool, DECLINED)

    async def _after(self, tool: str) -> None:
        if self._faults.hangs_after_effect(tool):
            # The effect is committed; the caller never hears back (it times out: the in-doubt case).
            await anyio.sleep_forever()

    # -- tools ------------------------------------------------------------------------------------

    def _register(self) -> None:
        agency, server = self, self.server

        @server.tool()
        async def search_flights(destination: str) -> FlightSearch:
            """Flights to `destination`, cheapest first."""
            await agency._before("search_flights")
            offers = sorted(flight_offers(destination), key=lambda o: o["price_cents"])
            return FlightSearch(flights=offers)

        @server.tool()
        async def book_flight(
            destination: str, flight_no: str = "", idempotency_key: Key = ""
        ) -> BookingResult:
            """Book a seat to `destination` (the cheapest flight unless `flight_no` is given)."""
            await agency._before("book_flight")
            offers = sorted(flight_offers(destination), key=lambda o: o["price_cents"])
            chosen = [o for o in offers if not flight_no or o["flight_no"] == flight_no]
            if not chosen:
                known = ", ".join(o["flight_no"] for o in offers)
                raise ToolError("book_flight", f"no flight {flight_no} to {destination} (flights: {known})")
            offer = chosen[0]
            booking = agency._ledger_call(
                "book_flight",
                lambda: agency.ledger.book(
                    BookingKind.FLIGHT,
                    destination,
                    offer["flight_no"],
                    offer["price_cents"],
                    idempotency_key=idempotency_key or None,
                ),
            )
            await agency._after("book_flight")
            return cast(BookingResult, booking.to_json())

        @server.tool()
        async def cancel_flight(booking_id: UndoId = "", idempotency_key: UndoKey = "") -> UndoResult:
            """Cancel a flight booking; cancelling twice is a success that changes nothing."""
            await agency._before("cancel_flight")
            undo = agency._ledger_call(
                "cancel_flight",
                lambda: agency.ledger.cancel(
                    BookingKind.FLIGHT, booking_id=booking_id or None, idempotency_key=idempotency_key or None
                ),
            )
            await agency._after("cancel_flight")
            return UndoResult(id=undo.id, changed=undo.changed)

        @server.tool()
        async def reserve_hotel(
            city: str, nights: Annotated[int, Field(ge=1, le=60)], idempotency_key: Key = ""
        ) -> BookingResult:
            """Reserve a room in `city` for `nights` nights."""
            await agency._before("reserve_hotel")
            booking = agency._ledger_call(
                "reserve_hotel",
                lambda: agency.ledger.book(
                    BookingKind.HOTEL,
                    city,
                    f"Hotel {city.title()}",
                    nights * hotel_rate_cents(city),
                    nights=nights,
                    idempotency_key=idempotency_key or None,
                ),
            )
            await agency._after("reserve_hotel")
            return cast(BookingResult, booking.to_json())

        @server.tool()
        async def cancel_hotel(booking_id: UndoId = "", idempotency_key: UndoKey = "") -> UndoResult:
            """Cancel a hotel reservation; cancelling twice is a success that changes nothing."""
            await agency._before("cancel_hotel")
            undo = agency._ledger_call(
                "cancel_hotel",
                lambda: agency.ledger.cancel(
                    BookingKind.HOTEL, booking_id=booking_id or None, idempotency_key=idempotency_key or None
                ),
            )
            await agency._after("cancel_hotel")
            return UndoResult(id=undo.id, changed=undo.changed)

        @server.tool()
        async def charge_card(
            amount_cents: Annotated[int, Field(gt=0)],
            card_number: CardNumber,
            idempotency_key: Key = "",
        ) -> ChargeResult:
            """Charge `amount_cents` to a card; only its last four digits are kept."""
            if not is_card_number(card_number):
                raise ToolError("charge_card", card_number_problem(card_number))
            await agency._before("charge_card")
            if card_number == DECLINED_TEST_CARD:
                raise ToolError("charge_card", DECLINED)
            charge = agency._ledger_call(
                "charge_card",
                lambda: agency.ledger.charge(
                    amount_cents, card_number[-4:], idempotency_key=idempotency_key or None
                ),
            )
            await agency._after("charge_card")
            return cast(ChargeResult, charge.to_json())

        @server.tool()
        async def refund_card(charge_id: UndoId = "", idempotency_key: UndoKey = "") -> UndoResult:
            """Refund a charge in full; refunding twice is a success that changes nothing."""
            await agency._before("refund_card")
            undo = agency._ledger_call(
                "refund_card",
                lambda: agency.ledger.refund(
                    charge_id=charge_id or None, idempotency_key=idempotency_key or None
                ),
            )
            await agency._after("refund_card")
            return UndoResult(id=undo.id, changed=undo.changed)

        @server.tool()
        async def list_bookings() -> LedgerView:
            """The live flights, hotels and charges, and how many cancellations and refunds were applied."""
            await agency._before("list_bookings")
            return cast(LedgerView, agency.ledger.state().to_json())

        @server.tool()
        async def set_faults(plan: dict[str, dict[str, Any]]) -> dict[str, Any]:
            """Replace the fault plan, e.g. ``{"charge_card": {"declined": true}}``; ``{}`` clears it."""
            try:
                agency.set_faults(FaultPlan.from_json(plan))
            except FaultPlanError as exc:
                raise ToolError("set_faults", str(exc)) from None
            return {"faults": agency.faults.to_json()}

    def _ledger_call(self, tool: str, operation: Any) -> Any:
        try:
            return operation()
        except LedgerError as exc:
            raise ToolError(tool, str(exc)) from None
