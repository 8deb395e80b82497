"""Real engine runs for the diagram tests, on a virtual clock: every time and id is known.

`run_on_virtual_clock` runs a coroutine on an asyncio loop whose clock only moves when every task is
waiting (it jumps to the next timer), so ``anyio.sleep(0.010)`` takes exactly 10 ms of loop time and
no real time. asyncio runs ready tasks first in, first out, so the events come in one order every
time. The scenarios (`GROUP_SCENARIOS`) are the parallel-group and dynamic-saga cases of issue 18.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.parallel import CompensationOrder, parallel

RUN_ID = "5ca1ab1e0ddba11c0ffeefacade0b0e5"


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that never blocks: a wait of `timeout` seconds moves the loop's clock instead."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if not ready and timeout is not None and timeout > 0:
            self._loop.now += timeout
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time, starting at 100 s (as the hand-written scripts do)."""

    def __init__(self) -> None:
        self.now = 100.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run_on_virtual_clock(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `main()` to completion on a fresh `VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        runner.run(main())


class Booking:
    """A travel step that takes `ms` of loop time, then succeeds or raises `fail`; its undo, `undo_ms`."""

    def __init__(
        self,
        name: str,
        ms: float,
        *,
        fail: str | None = None,
        undo_ms: float = 5.0,
        in_doubt: bool = False,
    ) -> None:
        self.name = name
        self.ms = ms
        self.fail = fail
        self.undo_ms = undo_ms
        self.in_doubt = in_doubt

    async def execute(self, ctx: AegisContext) -> AegisContext:
        await anyio.sleep(self.ms / 1000)
        if self.fail is not None:
            raise ValueError(self.fail)
        return ctx.with_metadata({self.name: ctx.idempotency_key})

    async def compensate(self, ctx: AegisContext) -> None:
        await anyio.sleep(self.undo_ms / 1000)


def _events(body: Callable[[WorkflowEngine], Coroutine[Any, Any, None]]) -> tuple[SagaEvent, ...]:
    events: list[SagaEvent] = []

    async def main() -> None:
        await body(WorkflowEngine(sinks=[events.append]))

    run_on_virtual_clock(main)
    return tuple(events)


def _list_saga(entries: list[Any]) -> tuple[SagaEvent, ...]:
    async def body(engine: WorkflowEngine) -> None:
        await engine.run_saga(entries, AegisContext({"traveller": "ada"}), name="trip", run_id=RUN_ID)

    return _events(body)


def group_commits() -> tuple[SagaEvent, ...]:
    """Flight, then hotel and car together (the car done first), then the card: committed."""
    return _list_saga(
        [
            Booking("BookFlight", 10),
            parallel(Booking("ReserveHotel", 30), Booking("RentCar", 20)),
            Booking("ChargeCard", 10),
        ]
    )


def member_fails_while_others_run() -> tuple[SagaEvent, ...]:
    """The car fails while the taxi still runs: the taxi is cancelled (in doubt, so undone), the
    hotel (done) undone, then the flight."""
    return _list_saga(
        [
            Booking("BookFlight", 10),
            parallel(
                Booking("ReserveHotel", 5),
                Booking("RentCar", 15, fail="No cars left"),
                Booking("BookTaxi", 50, in_doubt=True),
            ),
            Booking("ChargeCard", 10),
        ]
    )


def _card_declined(compensation: CompensationOrder) -> tuple[SagaEvent, ...]:
    return _list_saga(
        [
            Booking("BookFlight", 10),
            parallel(
                Booking("ReserveHotel", 30, undo_ms=8),
                Booking("RentCar", 20, undo_ms=4),
                compensation=compensation,
            ),
            Booking("ChargeCard", 10, fail="Card Declined!"),
        ]
    )


def group_undone_concurrently() -> tuple[SagaEvent, ...]:
    """The card is declined: hotel and car are undone at the same time, then the flight."""
    return _card_declined(CompensationOrder.CONCURRENT)


def group_undone_in_reverse_start_order() -> tuple[SagaEvent, ...]:
    """The card is declined: the car (started last) is undone first, then the hotel, then the flight."""
    return _card_declined(CompensationOrder.REVERSE_START)


def dynamic_saga_rolled_back() -> tuple[SagaEvent, ...]:
    """A dynamic saga: a flight, then hotel and car together, then `saga.rollback("too expensive")`."""

    async def body(engine: WorkflowEngine) -> None:
        async with engine.saga(AegisContext({"traveller": "ada"}), name="trip", run_id=RUN_ID) as saga:
            await saga.step(Booking("BookFlight", 10))
            await saga.parallel(Booking("ReserveHotel", 30), Booking("RentCar", 20))
            await saga.rollback("too expensive")

    return _events(body)


GROUP_SCENARIOS: dict[str, Callable[[], tuple[SagaEvent, ...]]] = {
    "group_commits": group_commits,
    "group_member_fails_while_others_run": member_fails_while_others_run,
    "group_undone_concurrently": group_undone_concurrently,
    "group_undone_in_reverse_start_order": group_undone_in_reverse_start_order,
    "dynamic_saga_rolled_back": dynamic_saga_rolled_back,
}
