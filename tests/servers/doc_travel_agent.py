# ruff: noqa
# fmt: off
# The AegisMCP documentation page's example, verbatim (shared/reference/aegismcp-workflows-and-sagas.md),
# plus the two lines that serve it: `python doc_travel_agent.py` serves it over stdio with app.run().
import asyncio
from aegismcp.server.app import AegisMCP
from aegismcp.kernel.context import AegisContext

app = AegisMCP("TravelAgent")

class BookFlightStep:
    async def execute(self, ctx: AegisContext):
        print("Booking flight...")
        booking_id = "FLIGHT_999"

        # We mutate the baggage to pass state to future steps,
        # AND to remember what to compensate!
        ctx = ctx.with_metadata({"flight_id": booking_id})
        return ctx

    async def compensate(self, ctx: AegisContext):
        flight_id = ctx.metadata.get("flight_id")
        print(f"Canceling flight {flight_id}...")

class ChargeCardStep:
    async def execute(self, ctx: AegisContext):
        flight_id = ctx.metadata.get("flight_id")
        print(f"Attempting to charge card for {flight_id}...")
        raise ValueError("Card Declined!")

    async def compensate(self, ctx: AegisContext):
        pass

@app.workflow("book_vacation")
async def book_vacation_saga(ctx: AegisContext):
    # Pass the initial context. The engine automatically threads 
    # the returned, mutated context forward to the next steps!
    return await app.workflow_engine.execute_saga([
        (BookFlightStep(), (), {}),
        (ChargeCardStep(), (), {})
    ], ctx)


if __name__ == "__main__":
    app.run()
