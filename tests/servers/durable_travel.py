"""The travel agent journaling its trips, for `tests/test_travel_recovery.py`.

``python tests/servers/durable_travel.py LEDGER JOURNAL`` books a trip through the app's MCP tool
with every charge hanging: it prints ``charging`` once the flight and the hotel are booked and the
charge has begun, then waits there to be killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp import Client

from aegis_nb.mock import FaultPlan, Latency, Ledger, ToolFaults, TravelAgency, travel_app
from aegis_nb.saga.events import SagaEvent, StepStarted
from aegis_nb.server.app import AegisMCP

TRIP = {"destination": "Lisbon", "nights": 3, "card_number": "4242424242424242"}
HANG = FaultPlan({"charge_card": ToolFaults(latency=Latency.fixed(3600))})


def app(ledger: Path, journal: Path, *, faults: FaultPlan | None = None) -> AegisMCP:
    """The travel app over its own agency, with the ledger and the journal in SQLite files."""
    return travel_app(TravelAgency(Ledger(ledger), faults), journal=journal, workflow_timeout=None)


async def book_until_killed(ledger: Path, journal: Path) -> None:
    served = app(ledger, journal, faults=HANG)

    def announce(event: SagaEvent) -> None:
        if isinstance(event, StepStarted) and event.step == "ChargeCard":
            print("charging", flush=True)

    served.workflow_engine.subscribe(announce)
    async with Client(served) as client:
        await client.call_tool("book_trip", TRIP)


if __name__ == "__main__":
    anyio.run(book_until_killed, Path(sys.argv[1]), Path(sys.argv[2]))
