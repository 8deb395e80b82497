"""An AegisMCP server whose workflows use both shapes of saga: one built step by step as it runs
(``engine.saga()``), deciding its next step from the last one's result, and a list holding a
parallel group. Served over streamable HTTP by ``aegis-nb serve tests.servers.shaped_trips:app``.

In each group the car answers only once the hotel has: members start together in whatever order
their tasks are scheduled, but they end in one order, so the progress a client sees is fixed but
for the order of the two starts.
"""

from __future__ import annotations

import anyio

from aegis_nb import AegisContext, AegisMCP, parallel


class Booking:
    """Books `name` at `price_cents` (written to the context), or is declined; undoes its booking."""

    def __init__(self, name: str, price_cents: int, *, declined: bool = False) -> None:
        self.name = name
        self.price_cents = price_cents
        self.declined = declined
        self.answered = anyio.Event()
        self.after: Booking | None = None  # a sibling that must answer first

    async def execute(self, ctx: AegisContext) -> AegisContext:
        try:
            if self.after is not None:
                await self.after.answered.wait()
            await anyio.lowlevel.checkpoint()
            if self.declined:
                raise RuntimeError(f"{self.name} declined")
            return ctx.with_metadata({self.name: {"price_cents": self.price_cents}})
        finally:
            self.answered.set()

    async def compensate(self, ctx: AegisContext) -> None:
        return None


def hotel_and_car(*, car_declined: bool) -> tuple[Booking, Booking]:
    """The two members of a trip's group, the car answering after the hotel."""
    hotel, car = Booking("hotel", 30_000), Booking("car", 9_000, declined=car_declined)
    car.after = hotel
    return hotel, car


app = AegisMCP("shaped-trips")


@app.workflow()
async def plan_trip(ctx: AegisContext, budget_cents: int, car_declined: bool = False) -> AegisContext:
    """Book the flight; within budget, the hotel and the car together; else undo the flight."""
    async with app.workflow_engine.saga(ctx) as saga:
        ctx = await saga.step(Booking("flight", 42_000))
        if ctx.metadata["flight"]["price_cents"] > budget_cents:
            await saga.rollback("the flight is over budget")
        else:
            ctx = await saga.parallel(*hotel_and_car(car_declined=car_declined))
    return saga.run.unwrap()


@app.workflow()
async def book_trip(ctx: AegisContext, car_declined: bool = False) -> AegisContext:
    """The flight, then the hotel and the car together, then the card: a list with a group."""
    hotel, car = hotel_and_car(car_declined=car_declined)
    return await app.workflow_engine.execute_saga(
        [Booking("flight", 42_000), parallel(hotel, car), Booking("card", 0)], ctx
    )
