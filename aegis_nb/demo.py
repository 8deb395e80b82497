"""The travel-agency demo of `make demo`: the documentation's saga over MCP, three ways.

A real MCP client calls the ``book_trip`` workflow of an `AegisMCP` server; its three steps call the
mock travel agency's tools through their own client session. Each saga event arrives at the client
as a progress notification and is printed as it happens; each scenario starts with an empty agency,
whose ledger is printed after the run: full after a success, empty after a declined card and after a
timeout.
"""

from __future__ import annotations

from typing import Any, cast

import anyio
from mcp import Client
from mcp.types import RequestParamsMeta

from aegis_nb.mock.agency import TravelAgency
from aegis_nb.mock.faults import FaultPlan, Latency, ToolFaults
from aegis_nb.mock.ledgertext import money, undone_text
from aegis_nb.mock.travel import travel_app
from aegis_nb.server.deadline import TIMEOUT_META_KEY

CARD = "4242424242424242"

SCENARIOS: tuple[tuple[str, FaultPlan, float | None], ...] = (
    ("all steps succeed", FaultPlan(), None),
    ("the card is declined", FaultPlan({"charge_card": ToolFaults(declined=True)}), None),
    (
        "the hotel is slower than the client's 300 ms deadline",
        FaultPlan({"reserve_hotel": ToolFaults(latency=Latency.fixed(1.0))}),
        300.0,
    ),
)


def ledger_lines(ledger: dict[str, Any]) -> list[str]:
    """The agency's ledger, one line per kind of record."""

    flights = [f"{b['booking_id']} {b['item']} to {b['place']}" for b in ledger["flights"]]
    hotels = [f"{b['booking_id']} {b['item']}, {b['nights']} nights" for b in ledger["hotels"]]
    charges = [
        f"{c['charge_id']} {money(c['amount_cents'])} on card ****{c['card_last4']}"
        for c in ledger["charges"]
    ]
    return [
        f"  flights : {', '.join(flights) or '-'}",
        f"  hotels  : {', '.join(hotels) or '-'}",
        f"  charges : {', '.join(charges) or '-'}  (held: {money(ledger['balance_cents'])})",
        f"  undone  : {undone_text(ledger['cancellations'], ledger['refunds'])}",
    ]


async def run_scenario(number: int, title: str, faults: FaultPlan, deadline_ms: float | None) -> None:
    """Book a trip through a fresh agency with `faults`; print the events as they arrive, then the ledger."""
    started = 0.0  # when the call is made: times are the client's view of the saga

    async def show_progress(progress: float, total: float | None, message: str | None) -> None:
        print(f"  {(anyio.current_time() - started) * 1000:7.1f} ms  {message}", flush=True)

    print(f"\n=== {number}. {title}")
    async with Client(travel_app(TravelAgency(faults=faults))) as client:
        started = anyio.current_time()
        result = await client.call_tool(
            "book_trip",
            {"destination": "Lisbon", "nights": 3, "card_number": CARD},
            progress_callback=show_progress,
            meta=None if deadline_ms is None else cast(RequestParamsMeta, {TIMEOUT_META_KEY: deadline_ms}),
        )
        outcome = result.structured_content or {}
        if result.is_error:
            print(f"result (error): {outcome.get('summary')}")
        else:
            steps = ", ".join(step["name"] for step in outcome.get("steps", []))
            print(f"result (ok): committed: {steps}")
        ledger = await client.call_tool("list_bookings", {})
    print("ledger:")
    for line in ledger_lines(ledger.structured_content or {}):
        print(line)


async def run_demo() -> None:
    """Run the three scenarios, each against its own fresh mock agency."""
    for number, (title, faults, deadline_ms) in enumerate(SCENARIOS, start=1):
        await run_scenario(number, title, faults, deadline_ms)
