"""The travel-agency demo of `make demo`: the documentation's saga over MCP, three ways, then in parallel.

A real MCP client calls the ``book_trip`` workflow of an `AegisMCP` server; its three steps call the
mock travel agency's tools through their own client session. Each saga event arrives at the client
as a progress notification and is printed as it happens; each scenario starts with an empty agency,
whose ledger is printed after the run: full after a success, empty after a declined card and after a
timeout. The fourth books the flight and the hotel at the same time (a parallel group), over a
client session to the agency, and prints the trace (`describe`) as the members' events interleave:
the card is declined, and both bookings are undone together.
"""

from __future__ import annotations

from typing import Any, cast

import anyio
from mcp import Client
from mcp.types import RequestParamsMeta

from aegis_nb.kernel.report import SagaStatus
from aegis_nb.mock.agency import TravelAgency
from aegis_nb.mock.faults import FaultPlan, Latency, ToolFaults
from aegis_nb.mock.ledgertext import money, undone_text
from aegis_nb.mock.travel import travel_app, travel_steps, trip_context
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.parallel import parallel
from aegis_nb.saga.trace import describe
from aegis_nb.server.deadline import TIMEOUT_META_KEY
from aegis_nb.server.session import connect

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


PARALLEL_TITLE = "flight and hotel booked at the same time, then the card is declined"
PARALLEL_FAULTS = FaultPlan(
    {
        # Fixed latencies put the members' events in one order every run: the flight answers
        # first, and its undo too.
        "reserve_hotel": ToolFaults(latency=Latency.fixed(0.05)),
        "cancel_hotel": ToolFaults(latency=Latency.fixed(0.05)),
        "charge_card": ToolFaults(declined=True),
    }
)


async def run_parallel_scenario(number: int) -> None:
    """Book the flight and the hotel as a parallel group, then pay; print the trace, then the ledger."""
    started = 0.0

    def show(event: SagaEvent) -> None:
        print(f"  {(anyio.current_time() - started) * 1000:7.1f} ms  {describe(event).strip()}", flush=True)

    print(f"\n=== {number}. {PARALLEL_TITLE}")
    async with connect(TravelAgency(faults=PARALLEL_FAULTS).server) as session:
        flight, hotel, card = travel_steps(session)
        group = parallel(
            (flight, (), {"destination": "Lisbon"}), (hotel, (), {"city": "Lisbon", "nights": 3})
        )
        started = anyio.current_time()
        run = await WorkflowEngine().run_saga(
            [group, (card, (), {})], trip_context(CARD), name="book_trip", sinks=[show]
        )
        outcome = "ok" if run.status is SagaStatus.COMMITTED else "error"
        print(f"result ({outcome}): {run.report.summary()}")
        ledger = await session.call_tool("list_bookings", {})
    print("ledger:")
    for line in ledger_lines(ledger):
        print(line)


async def run_demo() -> None:
    """Run the three scenarios, each against its own fresh mock agency, then the parallel one."""
    for number, (title, faults, deadline_ms) in enumerate(SCENARIOS, start=1):
        await run_scenario(number, title, faults, deadline_ms)
    await run_parallel_scenario(len(SCENARIOS) + 1)
