"""The travel-agency demo of `make demo`: the documentation's saga three ways, traced event by event."""

from __future__ import annotations

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaFailed
from aegis_nb.saga.definition import SagaEntry
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.trace import describe


class BookFlight:
    async def execute(self, ctx: AegisContext, destination: str) -> AegisContext:
        await anyio.sleep(0.01)
        return ctx.with_metadata({"flight_id": f"FLIGHT-{destination.upper()}-999"})

    async def compensate(self, ctx: AegisContext, destination: str) -> None:
        await anyio.sleep(0.005)


class ReserveHotel:
    def __init__(self, latency: float = 0.01) -> None:
        self.latency = latency

    async def execute(self, ctx: AegisContext, nights: int) -> AegisContext:
        await anyio.sleep(self.latency)
        return ctx.with_metadata({"hotel_id": f"HOTEL-{nights}N-42"})

    async def compensate(self, ctx: AegisContext, nights: int) -> None:
        await anyio.sleep(0.005)


class ChargeCard:
    def __init__(self, declined: bool = False) -> None:
        self.declined = declined

    async def execute(self, ctx: AegisContext, amount: int) -> AegisContext:
        await anyio.sleep(0.01)
        if self.declined:
            raise ValueError("Card Declined!")
        return ctx.with_metadata({"charge_id": f"CHARGE-{amount}"})

    async def compensate(self, ctx: AegisContext, amount: int) -> None:
        await anyio.sleep(0.005)


def _print_event(event: SagaEvent) -> None:
    print(describe(event), flush=True)


async def run_demo() -> None:
    """Run the three scenarios, printing each event as it happens."""
    engine = WorkflowEngine(sinks=[_print_event])
    scenarios = [
        ("all steps succeed", ReserveHotel(), ChargeCard(), 5.0),
        ("the card is declined", ReserveHotel(), ChargeCard(declined=True), 5.0),
        ("the hotel is slower than the deadline", ReserveHotel(latency=1.0), ChargeCard(), 0.1),
    ]
    for title, hotel, card, deadline in scenarios:
        print(f"\n=== {title} (deadline {deadline * 1000:.0f} ms)")
        saga: list[SagaEntry] = [(BookFlight(), ("Lisbon",), {}), (hotel, (3,), {}), (card, (840,), {})]
        ctx = AegisContext({"traveller": "demo"}).with_timeout(deadline)
        try:
            final = await engine.execute_saga(saga, ctx, name="book_vacation")
            print(f"final metadata: {final.to_json()}")
        except SagaFailed as exc:
            print(f"{type(exc).__name__}: {exc}")
