"""A travel agent whose hotel step never answers: for cancelling or timing out a call over stdio.

``python hanging_agent.py`` serves it with ``app.run()``. Its steps print what they do (to stderr:
stdout carries the protocol), which is how a test sees the rollback finish on the server after the
client has stopped waiting.
"""

from __future__ import annotations

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.server.app import AegisMCP

app = AegisMCP("HangingTravelAgent")


class BookFlightStep:
    async def execute(self, ctx: AegisContext) -> AegisContext:
        print("Booking flight...")
        return ctx.with_metadata({"flight_id": "FLIGHT_999"})

    async def compensate(self, ctx: AegisContext) -> None:
        print(f"Canceling flight {ctx.metadata['flight_id']}...")


class ReserveHotelStep:
    async def execute(self, ctx: AegisContext) -> None:
        print("Reserving hotel...")
        await anyio.sleep_forever()

    async def compensate(self, ctx: AegisContext) -> None:
        print("Canceling hotel...")


@app.workflow("book_vacation")
async def book_vacation(ctx: AegisContext) -> AegisContext:
    return await app.workflow_engine.execute_saga([BookFlightStep(), ReserveHotelStep()], ctx)


if __name__ == "__main__":
    app.run()
