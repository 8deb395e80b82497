"""Steps and a clock for the agent-saga tests: a fake clock, and a booking step that holds its call
open until the test lets it go (or forever), on a ledger of real effects keyed by idempotency key."""

from __future__ import annotations

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.sinks import Sink


class FakeClock:
    """A clock the test moves by hand: idleness and deadlines are judged against it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def engine(*sinks: Sink) -> WorkflowEngine:
    return WorkflowEngine(compensation_retry=RetryPolicy.never(), sinks=sinks)


class HeldBooking:
    """Books `what` under the step's key, then holds its call open until `release` is set.

    In doubt (`in_doubt`): a call cut off mid-way may have acted, so its undo runs even then.
    `shielded`: the call does not stop when cancelled (an upstream that ignores it), only when released.
    """

    in_doubt = True

    def __init__(self, ledger: dict[str, str], what: str, *, shielded: bool = False) -> None:
        self.ledger, self.what, self.name, self.shielded = ledger, what, what, shielded
        self.started = anyio.Event()
        self.cancelled = anyio.Event()
        self.release = anyio.Event()

    async def execute(self, ctx: AegisContext) -> None:
        assert ctx.idempotency_key is not None
        self.ledger[ctx.idempotency_key] = self.what
        self.started.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            if not self.shielded:
                raise
            with anyio.CancelScope(shield=True):
                await self.release.wait()

    async def compensate(self, ctx: AegisContext) -> None:
        assert ctx.idempotency_key is not None
        self.ledger.pop(ctx.idempotency_key, None)


class Booking:
    """Books `what` under the step's key at once; its undo cancels exactly that booking."""

    def __init__(self, ledger: dict[str, str], what: str) -> None:
        self.ledger, self.what, self.name = ledger, what, what

    async def execute(self, ctx: AegisContext) -> None:
        assert ctx.idempotency_key is not None
        self.ledger[ctx.idempotency_key] = self.what

    async def compensate(self, ctx: AegisContext) -> None:
        assert ctx.idempotency_key is not None
        del self.ledger[ctx.idempotency_key]
