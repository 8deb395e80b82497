"""Cancelling the caller mid-saga still undoes every completed step, then the cancellation propagates.

The rollback runs in a task of its own that the caller hands off to and waits for: a native
cancellation landing at any moment of it (before the task first runs, during it, between its wake-up
of the caller and its end), repeated, or from `asyncio.timeout` or an anyio scope, waits for every
compensation and then propagates unchanged.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

import anyio
import pytest

from aegis_nb import AegisContext, FailureKind, SagaStatus, WorkflowEngine
from aegis_nb.kernel.shielding import Handoff, outlast
from aegis_nb.testing import EventCapture
from tests.steps import ASYNCIO_ONLY, ROLLED_BACK_TRAIL, Calls, Recorded

pytestmark = pytest.mark.anyio


def hanging_travel(calls: Calls, on_card: object = None) -> list[Recorded]:
    return [
        Recorded("flight", calls),
        Recorded("hotel", calls),
        Recorded("card", calls, hang=True, on_execute=on_card),  # type: ignore[arg-type]
    ]


async def test_cancelling_an_enclosing_scope_rolls_back_then_propagates() -> None:
    calls, capture = Calls(), EventCapture()
    with anyio.CancelScope() as scope:
        await WorkflowEngine(sinks=[capture]).run_saga(hanging_travel(calls, on_card=scope.cancel))
        pytest.fail("the cancellation should have propagated")
    assert scope.cancelled_caught
    assert capture.trail() == ROLLED_BACK_TRAIL
    report = capture.events[-1].report  # type: ignore[union-attr]
    assert (report.status, report.failure_kind) == (SagaStatus.ROLLED_BACK, FailureKind.CANCELLED)


def expire_when_called(scope: anyio.CancelScope) -> Callable[[], None]:
    """Move `scope`'s deadline to now: it expires once the hanging card step is under way, not before.

    A short fixed deadline would race the forward steps: on a loaded machine it could land in flight
    or hotel instead, and the saga would roll back less than the test expects.
    """

    def expire() -> None:
        scope.deadline = anyio.current_time()

    return expire


async def test_move_on_after_around_the_saga_still_rolls_back() -> None:
    calls, capture = Calls(), EventCapture()
    with anyio.move_on_after(60) as scope:
        await WorkflowEngine(sinks=[capture]).run_saga(hanging_travel(calls, expire_when_called(scope)))
    assert scope.cancelled_caught
    assert capture.trail() == ROLLED_BACK_TRAIL


async def test_cancelling_a_task_group_rolls_back_the_saga_in_it() -> None:
    calls, capture = Calls(), EventCapture()
    card_started = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(WorkflowEngine(sinks=[capture]).run_saga, hanging_travel(calls, card_started.set))
        await card_started.wait()
        tg.cancel_scope.cancel()
    assert capture.trail() == ROLLED_BACK_TRAIL


async def test_compensations_are_shielded_from_the_cancellation() -> None:
    """The compensation itself awaits after the cancel: it must still run to completion."""
    calls, capture = Calls(), EventCapture()
    finished = []

    class SlowUndo(Recorded):
        async def compensate(self, ctx: object) -> None:
            await anyio.sleep(0.01)  # would raise at once if the cancellation reached it
            finished.append(self.name)

    with anyio.move_on_after(60) as scope:
        steps = [
            SlowUndo("flight", calls),
            SlowUndo("hotel", calls),
            Recorded("card", calls, hang=True, on_execute=expire_when_called(scope)),
        ]
        await WorkflowEngine(sinks=[capture]).run_saga(steps)
    assert scope.cancelled_caught
    assert finished == ["hotel", "flight"]
    assert capture.trail() == ROLLED_BACK_TRAIL


async def test_keyboard_interrupt_in_a_step_rolls_back_then_propagates_unchanged() -> None:
    calls, capture = Calls(), EventCapture()
    interrupt = KeyboardInterrupt("Ctrl-C in the cell")

    def press_ctrl_c() -> None:
        raise interrupt

    steps = [
        Recorded("flight", calls),
        Recorded("hotel", calls),
        Recorded("card", calls, on_execute=press_ctrl_c),
    ]
    with pytest.raises(KeyboardInterrupt) as raised:
        await WorkflowEngine(sinks=[capture]).run_saga(steps)
    assert raised.value is interrupt
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert capture.events[-1].report.failure_kind is FailureKind.INTERRUPTED  # type: ignore[union-attr]


# -- the handoff: a native cancellation at any moment of the rollback ------------------------------


def travel(calls: Calls) -> list[Recorded]:
    return [Recorded("flight", calls), Recorded("hotel", calls), Recorded("card", calls, fail="no")]


ROLLBACK_EVENTS = range(ROLLED_BACK_TRAIL.index(("StepFailed", "card")), len(ROLLED_BACK_TRAIL))
"""Indexes of the events the rollback's own task emits, its last (SagaRolledBackEvent) included."""


def asyncio_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What asyncio logged (a task destroyed while pending, an exception never retrieved)."""
    gc.collect()
    return [r.getMessage() for r in caplog.records if r.name == "asyncio"]


# Regression guard: a Task.cancel() at any rollback event, once or repeated, waits for every undo.
@ASYNCIO_ONLY
@pytest.mark.parametrize("at", ROLLBACK_EVENTS)
@pytest.mark.parametrize("how", ["now", "next-callback"])
@pytest.mark.parametrize("times", [1, 3])
async def test_a_task_cancel_at_any_rollback_event_waits_for_every_compensation_then_propagates(
    at: int, how: str, times: int, caplog: pytest.LogCaptureFixture
) -> None:
    # "next-callback" at SagaRolledBackEvent lands after the rollback task woke its caller (Handoff) and
    # ended, before the caller resumed.
    loop = asyncio.get_running_loop()
    calls, capture, tasks = Calls(), EventCapture(), list[asyncio.Task[None]]()
    cancelling: list[int] = []

    def cancel() -> None:
        for _ in range(times):
            tasks[0].cancel()

    def arm(event: object) -> None:
        if len(capture.events) - 1 == at:
            cancel() if how == "now" else loop.call_soon(cancel)

    async def caller() -> None:
        try:
            await WorkflowEngine(sinks=[capture, arm]).run_saga(travel(calls))
        finally:
            task = asyncio.current_task()
            assert task is not None
            cancelling.append(task.cancelling())

    tasks.append(loop.create_task(caller()))
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert tasks[0].cancelled()
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert calls.trail()[-2:] == [("compensate", "hotel"), ("compensate", "flight")]
    assert cancelling == [times]
    assert asyncio_errors(caplog) == []


class CancelsAsItFails(Recorded):
    """Fails, having scheduled `cancel` to run before the rollback task (created just after) first steps."""

    def __init__(self, name: str, calls: Calls, cancel: Callable[[], object]) -> None:
        super().__init__(name, calls)
        self.cancel = cancel

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.log.append(("execute", self.name, ctx))
        await anyio.lowlevel.checkpoint()
        asyncio.get_running_loop().call_soon(self.cancel)
        raise ValueError("Card Declined!")


# Regression guard: a Task.cancel() before the rollback's task first runs still waits for it.
@ASYNCIO_ONLY
async def test_a_task_cancel_before_the_rollback_task_first_runs_waits_for_it() -> None:
    calls, capture, tasks = Calls(), EventCapture(), list[asyncio.Task[None]]()
    card = CancelsAsItFails("card", calls, lambda: tasks[0].cancel())

    async def caller() -> None:
        await WorkflowEngine(sinks=[capture]).run_saga(
            [Recorded("flight", calls), Recorded("hotel", calls), card]
        )

    tasks.append(asyncio.get_running_loop().create_task(caller()))
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert capture.events[-1].report.failure_kind is FailureKind.ERROR  # type: ignore[union-attr]
    assert calls.trail()[-2:] == [("compensate", "hotel"), ("compensate", "flight")]


# Regression guard: asyncio.timeout expiring mid-rollback raises TimeoutError only after it.
@ASYNCIO_ONLY
@pytest.mark.parametrize("at", ROLLBACK_EVENTS)
async def test_an_asyncio_timeout_expiring_at_any_rollback_event_times_out_after_it(at: int) -> None:
    loop = asyncio.get_running_loop()
    calls, capture = Calls(), EventCapture()

    async def saga_under_a_timeout() -> None:
        async with asyncio.timeout(None) as timeout:

            def arm(event: object) -> None:
                if len(capture.events) - 1 == at:
                    timeout.reschedule(loop.time())

            await WorkflowEngine(sinks=[capture, arm]).run_saga(travel(calls))

    with pytest.raises(TimeoutError) as raised:
        await saga_under_a_timeout()
    assert type(raised.value) is TimeoutError
    assert capture.trail() == ROLLED_BACK_TRAIL
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


# Regression guard: an anyio scope cancelled mid-rollback catches its cancellation after it.
@pytest.mark.parametrize("at", ROLLBACK_EVENTS)
async def test_an_anyio_scope_cancelled_at_any_rollback_event_is_caught_by_it_after_the_rollback(
    at: int,
) -> None:
    calls, capture = Calls(), EventCapture()
    with anyio.CancelScope() as scope:

        def arm(event: object) -> None:
            if len(capture.events) - 1 == at:
                scope.cancel()

        await WorkflowEngine(sinks=[capture, arm]).run_saga(travel(calls))
        await anyio.lowlevel.checkpoint()  # the cancellation lands here if the saga had returned
        raise AssertionError("the scope's cancellation was lost")
    assert scope.cancelled_caught
    assert capture.trail() == ROLLED_BACK_TRAIL


class SpawnsUndo(Recorded):
    """Its compensation runs its work in child tasks, and the caller's cancellation lands meanwhile."""

    def __init__(self, name: str, calls: Calls, cancel: Callable[[], object]) -> None:
        super().__init__(name, calls)
        self.cancel = cancel
        self.children: list[str] = []

    async def compensate(self, ctx: AegisContext) -> None:
        async def child(n: int) -> None:
            await anyio.lowlevel.checkpoint()
            self.children.append(f"{self.name}-{n}")

        self.cancel()
        async with anyio.create_task_group() as group:
            for n in range(2):
                group.start_soon(child, n)
        await super().compensate(ctx)


# Regression guard: an undo's child tasks finish under the caller's cancellation.
async def test_a_compensation_that_spawns_tasks_finishes_them_under_a_cancellation() -> None:
    calls, capture = Calls(), EventCapture()
    with anyio.CancelScope() as scope:
        hotel = SpawnsUndo("hotel", calls, scope.cancel)
        await WorkflowEngine(sinks=[capture]).run_saga(
            [Recorded("flight", calls), hotel, Recorded("card", calls, fail="no")]
        )
        await anyio.lowlevel.checkpoint()  # the scope's cancellation lands here
        raise AssertionError("the scope's cancellation was lost")
    assert scope.cancelled_caught
    assert (capture.trail(), sorted(hotel.children)) == (ROLLED_BACK_TRAIL, ["hotel-0", "hotel-1"])


# Regression guard: ... and under a native Task.cancel().
@ASYNCIO_ONLY
async def test_a_compensation_that_spawns_tasks_finishes_them_under_a_task_cancel() -> None:
    calls, capture, tasks = Calls(), EventCapture(), list[asyncio.Task[None]]()
    hotel = SpawnsUndo("hotel", calls, lambda: tasks[0].cancel())

    async def caller() -> None:
        await WorkflowEngine(sinks=[capture]).run_saga(
            [Recorded("flight", calls), hotel, Recorded("card", calls, fail="no")]
        )

    tasks.append(asyncio.get_running_loop().create_task(caller()))
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert (capture.trail(), sorted(hotel.children)) == (ROLLED_BACK_TRAIL, ["hotel-0", "hotel-1"])


# Regression guard: a SystemExit from an undo wins over a held cancellation, which stays counted.
@ASYNCIO_ONLY
async def test_a_system_exit_from_a_compensation_wins_over_a_held_cancellation_which_stays_counted() -> None:
    calls, tasks, seen = Calls(), list[asyncio.Task[None]](), list[tuple[BaseException, int]]()
    leaving = SystemExit("shutting down mid-undo")

    class ExitsMidUndo(Recorded):
        async def compensate(self, ctx: AegisContext) -> None:
            tasks[0].cancel()
            await anyio.lowlevel.checkpoint()
            raise leaving

    async def caller() -> None:
        try:
            await WorkflowEngine().run_saga(
                [Recorded("flight", calls), ExitsMidUndo("hotel", calls), Recorded("card", calls, fail="no")]
            )
        except SystemExit as exc:
            task = asyncio.current_task()
            assert task is not None
            seen.append((exc, task.cancelling()))

    tasks.append(asyncio.get_running_loop().create_task(caller()))
    await tasks[0]
    assert seen == [(leaving, 1)]
    # The exit stopped the rollback (as an interrupt raised by a compensation does): flight stands.
    assert calls.trail() == [("execute", "flight"), ("execute", "hotel"), ("execute", "card")]


# Regression guard: outlast() keeps a cancellation landing just before or after the handoff's wake-up.
@ASYNCIO_ONLY
@pytest.mark.parametrize("cancel", ["before-wake", "after-wake"])
async def test_outlast_returns_a_cancellation_that_lands_around_the_handoff(cancel: str) -> None:
    loop = asyncio.get_running_loop()
    handoff, order = Handoff(), list[str]()
    waiters: list[asyncio.Task[asyncio.CancelledError | None]] = []

    async def work() -> str:
        await asyncio.sleep(0)
        if cancel == "before-wake":
            waiters[0].cancel()
        handoff.wake()
        if cancel == "after-wake":
            waiters[0].cancel()  # its waiter is already woken: the cancellation is still delivered
        order.append("work ends")
        return "done"

    task = loop.create_task(work())

    async def waiter() -> asyncio.CancelledError | None:
        cancelled = await outlast(task, handoff=handoff)
        order.append(f"waiter resumes, task done: {task.done()}")
        return cancelled

    waiters.append(loop.create_task(waiter()))
    cancelled = await waiters[0]
    assert isinstance(cancelled, asyncio.CancelledError)
    assert (order, task.result(), waiters[0].cancelling()) == (
        ["work ends", "waiter resumes, task done: True"],
        "done",
        1,
    )
