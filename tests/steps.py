"""Steps for engine tests: they record what they were given, and fail or hang on request.

Also `CheckpointingJournal`, an in-memory journal whose writes await as a real one's do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import pytest

from aegis_nb import AegisContext, InMemoryJournal, RetryPolicy, SagaEvent


@dataclass
class Calls:
    """Every execute/compensate call in order, with the context it received."""

    log: list[tuple[str, str, AegisContext]] = field(default_factory=list)

    def trail(self) -> list[tuple[str, str]]:
        return [(what, name) for what, name, _ in self.log]

    def contexts(self, what: str, name: str) -> list[AegisContext]:
        return [ctx for w, n, ctx in self.log if (w, n) == (what, name)]


ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""For tests of asyncio's own machinery (`Task.cancel()`, `asyncio.timeout`): asyncio only."""

NO_WAIT = RetryPolicy(attempts=3, initial_delay=0)
"""Three attempts with no backoff: retries without waiting."""


class Boom(Exception):
    """The failure test steps raise."""


class Recorded:
    """A step that stores `{name}_id` in the metadata and records every call.

    `fail` makes execute raise; `hang` makes it wait forever (for deadlines and cancellation);
    `compensation_failures` makes the first N compensations raise; `compensation_hangs` makes
    the first N wait forever, ignoring their deadline (only the engine's backstop ends them).
    """

    def __init__(
        self,
        name: str,
        calls: Calls,
        *,
        fail: str | None = None,
        hang: bool = False,
        on_execute: Callable[[], None] | None = None,
        compensation_failures: int = 0,
        compensation_hangs: int = 0,
        in_doubt: bool = False,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> None:
        self.name = name
        self.calls = calls
        self.fail = fail
        self.hang = hang
        self.on_execute = on_execute
        self.compensation_failures = compensation_failures
        self.compensation_hangs = compensation_hangs
        self.in_doubt = in_doubt
        self.compensation_retry = retry
        self.timeout = timeout

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.log.append(("execute", self.name, ctx))
        if self.on_execute is not None:
            self.on_execute()
        await anyio.lowlevel.checkpoint()
        if self.hang:
            await anyio.sleep_forever()
        if self.fail is not None:
            raise Boom(self.fail)
        return ctx.with_metadata({f"{self.name}_id": f"{self.name.upper()}-{ctx.step_index}"})

    async def compensate(self, ctx: AegisContext) -> None:
        self.calls.log.append(("compensate", self.name, ctx))
        await anyio.lowlevel.checkpoint()
        if self.compensation_hangs > 0:
            self.compensation_hangs -= 1
            await anyio.sleep_forever()
        if self.compensation_failures > 0:
            self.compensation_failures -= 1
            raise Boom(f"{self.name} cannot be undone yet")


def travel(calls: Calls, **card: object) -> list[Recorded]:
    """The flight, hotel and card saga; `card` holds the card step's options (``fail=...``)."""
    return [Recorded("flight", calls), Recorded("hotel", calls), Recorded("card", calls, **card)]  # type: ignore[arg-type]


ROLLED_BACK_TRAIL = [
    ("SagaStarted",),
    ("StepStarted", "flight"),
    ("StepSucceeded", "flight"),
    ("StepStarted", "hotel"),
    ("StepSucceeded", "hotel"),
    ("StepStarted", "card"),
    ("StepFailed", "card"),
    ("CompensationStarted", "hotel"),
    ("CompensationSucceeded", "hotel"),
    ("CompensationStarted", "flight"),
    ("CompensationSucceeded", "flight"),
    ("SagaRolledBackEvent",),
]
"""The events of the flight, hotel, failing card saga, rolled back in full (`EventCapture.trail`)."""


class CheckpointingJournal(InMemoryJournal):
    """Awaits before each write, as a real journal does: a cancellation would land there."""

    async def append(self, event: SagaEvent) -> None:
        await anyio.lowlevel.checkpoint()
        await super().append(event)
