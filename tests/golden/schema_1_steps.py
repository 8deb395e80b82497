"""The steps named by ``journal-schema-1.db``: one of each locator kind a schema-1 journal holds.

`Pay` holds a client (so it is found again by the name it is registered under), `reserve_seat` is a
module-level ``@step`` function (found by object) and `BookHotel` a module-level class with JSON
attributes (found by class, rebuilt as ``BookHotel(city=..., nights=...)``). Nothing here has effects:
the golden file's test checks what is read back and what recovery does with it, not the steps.
"""

from __future__ import annotations

from aegis_nb import AegisContext, RetryPolicy, step


class PaymentClient:
    """Stands for a connection: not JSON, so `Pay` cannot be rebuilt from its attributes."""


class Pay:
    """Charges a card; registered with the journal as ``"payments"``."""

    timeout = 5.0
    compensation_retry = RetryPolicy(attempts=2, initial_delay=0.0)

    def __init__(self, client: PaymentClient) -> None:
        self.client = client

    async def execute(self, ctx: AegisContext, card: str, *, amount: int) -> AegisContext:
        return ctx.with_metadata({"charge": f"{card}:{amount}"})

    async def compensate(self, ctx: AegisContext, card: str, *, amount: int) -> None:
        return None


@step(name="reserve_seat")
async def reserve_seat(ctx: AegisContext, seat: str) -> AegisContext:
    return ctx.with_metadata({"seat": seat})


@reserve_seat.compensation
async def release_seat(ctx: AegisContext, seat: str) -> None:
    return None


class BookHotel:
    """Books a room; in doubt, since a timed-out booking may have been made."""

    in_doubt = True

    def __init__(self, city: str, nights: int) -> None:
        self.city = city
        self.nights = nights

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"hotel": f"{self.city}/{self.nights}"})

    async def compensate(self, ctx: AegisContext) -> None:
        return None
