"""The rollback finishes whatever lands on it: a native asyncio cancellation, an overrun backstop.

Also: a step the deadline stopped before it started is not the failed step and owes no undo.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from contextvars import ContextVar

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    CompensationFailed,
    ErrorInfo,
    FailureKind,
    InMemoryJournal,
    RetryPolicy,
    SagaCompensationFailed,
    SagaEvent,
    SagaRolledBack,
    SagaRun,
    SagaStatus,
    ToolTimeoutError,
    WorkflowEngine,
)
from aegis_nb.saga import CompensationStarted, fold_report
from aegis_nb.testing import EventCapture
from tests.steps import NO_WAIT, ROLLED_BACK_TRAIL, Boom, Calls, CheckpointingJournal, Recorded

pytestmark = pytest.mark.anyio

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # Task.cancel() is asyncio's own
BUDGET = 0.05  # seconds; the backstop tests wait out twice this, and have it as their margin


class CancelsMidUndo(Recorded):
    """Its compensation calls `cancel` (the caller's cancellation landing mid-rollback), then awaits on."""

    def __init__(self, name: str, calls: Calls, cancel: Callable[[], object]) -> None:
        super().__init__(name, calls)
        self.cancel = cancel

    async def compensate(self, ctx: AegisContext) -> None:
        self.cancel()
        await super().compensate(ctx)  # awaits: the cancellation would land here
        await anyio.lowlevel.checkpoint()


def travel(calls: Calls, hotel: Recorded, **card: object) -> list[Recorded]:
    return [Recorded("flight", calls), hotel, Recorded("card", calls, **card)]  # type: ignore[arg-type]


# -- the caller resumes first -----------------------------------------------------------------------


@ASYNCIO_ONLY
async def test_the_caller_resumes_before_timers_the_rollbacks_last_event_armed() -> None:
    # The rollback runs in a task of its own; had the caller waited for that task's done callbacks,
    # a timer armed by the final event (a live view's last redraw) would have run first, on its time.
    order: list[str] = []
    fired = asyncio.Event()
    loop = asyncio.get_running_loop()

    def timer() -> None:
        order.append("timer")
        fired.set()

    def arm_on_the_end(event: object) -> None:
        if type(event).__name__ == "SagaRolledBackEvent":
            loop.call_later(0, timer)

    calls = Calls()
    await WorkflowEngine(sinks=[arm_on_the_end]).run_saga(travel(calls, Recorded("hotel", calls), fail="no"))
    order.append("caller")
    await fired.wait()
    assert order == ["caller", "timer"]


# -- a native asyncio cancellation waits for the rollback ------------------------------------------


@ASYNCIO_ONLY
async def test_a_task_cancel_mid_rollback_waits_for_every_compensation_then_cancels_the_task() -> None:
    calls, capture = Calls(), EventCapture()
    tasks: list[asyncio.Task[SagaRun]] = []
    hotel = CancelsMidUndo("hotel", calls, lambda: tasks[0].cancel())
    tasks.append(
        asyncio.create_task(WorkflowEngine(sinks=[capture]).run_saga(travel(calls, hotel, fail="no")))
    )
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert tasks[0].cancelled()
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert calls.trail()[-2:] == [("compensate", "hotel"), ("compensate", "flight")]


@ASYNCIO_ONLY
async def test_an_asyncio_timeout_expiring_mid_rollback_waits_for_it_then_times_out() -> None:
    calls, capture = Calls(), EventCapture()
    loop = asyncio.get_running_loop()

    async def saga_under_a_timeout() -> None:
        async with asyncio.timeout(None) as timeout:
            hotel = CancelsMidUndo("hotel", calls, lambda: timeout.reschedule(loop.time()))
            await WorkflowEngine(sinks=[capture]).run_saga(travel(calls, hotel, fail="no"))

    with pytest.raises(TimeoutError) as raised:
        await saga_under_a_timeout()
    assert type(raised.value) is TimeoutError  # asyncio.timeout's own: it got its CancelledError back
    assert capture.trail() == ROLLED_BACK_TRAIL
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # the request was counted once, and taken back


@ASYNCIO_ONLY
async def test_a_task_cancel_mid_rollback_is_not_swallowed_by_a_cancelled_anyio_scope_around_it() -> None:
    # The anyio scope was cancelled first (during the card) and would swallow its own cancellation;
    # the native one must still get out, as asyncio counts it.
    calls, capture = Calls(), EventCapture()
    tasks: list[asyncio.Task[None]] = []

    async def saga_in_a_scope() -> None:
        with anyio.CancelScope() as scope:
            hotel = CancelsMidUndo("hotel", calls, lambda: tasks[0].cancel())
            await WorkflowEngine(sinks=[capture]).run_saga(
                travel(calls, hotel, hang=True, on_execute=scope.cancel)
            )

    tasks.append(asyncio.create_task(saga_in_a_scope()))
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert tasks[0].cancelled()
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert capture.events[-1].report.failure_kind is FailureKind.CANCELLED  # type: ignore[union-attr]


async def test_an_interrupt_raised_by_a_compensation_reaches_the_caller_unchanged() -> None:
    # On asyncio the rollback runs in a task of its own, out of which a KeyboardInterrupt would be
    # thrown out of the event loop rather than to the caller.
    calls, interrupt = Calls(), KeyboardInterrupt("Ctrl-C during the rollback")

    def press_ctrl_c() -> None:
        raise interrupt

    hotel = CancelsMidUndo("hotel", calls, press_ctrl_c)
    with pytest.raises(KeyboardInterrupt) as raised:
        await WorkflowEngine().run_saga(travel(calls, hotel, fail="no"))
    assert raised.value is interrupt


request_id: ContextVar[str] = ContextVar("request_id", default="none")


async def test_compensations_and_sinks_see_the_callers_context_variables() -> None:
    calls, seen = Calls(), set()

    def note(_: object = None) -> None:
        seen.add(request_id.get())

    token = request_id.set("request-7")
    try:
        run = await WorkflowEngine(sinks=[note]).run_saga(
            travel(calls, CancelsMidUndo("hotel", calls, note), fail="no")
        )
    finally:
        request_id.reset(token)
    assert run.status is SagaStatus.ROLLED_BACK
    assert seen == {"request-7"}


# -- a compensation that outlives the backstop in a shield -----------------------------------------


class OutlivesTheBackstop(Recorded):
    """Its first compensation holds a shield of its own (a commit not to be cut in half) past the
    engine's backstop, then returns, or raises if `then_fail`."""

    def __init__(self, name: str, calls: Calls, *, then_fail: bool = False) -> None:
        super().__init__(name, calls)
        self.then_fail = then_fail
        self.overran = False

    async def compensate(self, ctx: AegisContext) -> None:
        if self.overran:
            await super().compensate(ctx)
            return
        self.calls.log.append(("compensate", self.name, ctx))
        self.overran = True
        backstop = anyio.current_effective_deadline()  # the only scope around a compensation
        assert backstop <= ctx.deadline + BUDGET  # at most twice the budget away
        with anyio.CancelScope(shield=True):
            # Running this long is the scenario itself, not a wait for something to happen.
            await anyio.sleep_until(backstop + BUDGET / 2)
        if self.then_fail:
            raise Boom("hotel cannot be undone yet")


async def test_a_compensation_that_outlives_the_backstop_leaves_the_next_its_full_budget() -> None:
    calls, capture = Calls(), EventCapture()
    engine = WorkflowEngine(
        compensation_budget=BUDGET, compensation_retry=RetryPolicy.never(), sinks=[capture]
    )
    run = await engine.run_saga(travel(calls, OutlivesTheBackstop("hotel", calls), fail="no"))
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert run.status is SagaStatus.ROLLED_BACK
    assert calls.trail()[-2:] == [("compensate", "hotel"), ("compensate", "flight")]


async def test_the_success_of_a_compensation_that_outlived_the_backstop_is_journaled() -> None:
    calls, capture, journal = Calls(), EventCapture(), CheckpointingJournal()
    engine = WorkflowEngine(
        compensation_budget=BUDGET, compensation_retry=RetryPolicy.never(), journal=journal, sinks=[capture]
    )
    run = await engine.run_saga(travel(calls, OutlivesTheBackstop("hotel", calls), fail="no"))
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert journal.events(run.run_id) == tuple(capture.events)


async def test_a_compensation_that_outlives_the_backstop_then_fails_is_retried_with_a_fresh_budget() -> None:
    calls, capture = Calls(), EventCapture()
    engine = WorkflowEngine(compensation_budget=BUDGET, compensation_retry=NO_WAIT, sinks=[capture])
    run = await engine.run_saga(travel(calls, OutlivesTheBackstop("hotel", calls, then_fail=True), fail="no"))
    assert capture.trail()[6:] == [
        ("StepFailed", "card"),
        ("CompensationStarted", "hotel"),
        ("CompensationFailed", "hotel"),
        ("CompensationStarted", "hotel"),
        ("CompensationSucceeded", "hotel"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    failures = [e.error.message for e in capture.events if isinstance(e, CompensationFailed)]
    assert failures == ["hotel cannot be undone yet"]
    assert run.status is SagaStatus.ROLLED_BACK


# -- a step the deadline stopped before it started -------------------------------------------------


class SpendsTheDeadline(Recorded):
    """Succeeds, handing on a context whose deadline is now: the next step has no time left."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return (await super().execute(ctx)).with_timeout(0)


async def test_a_step_stopped_before_it_started_is_not_the_failed_step_and_owes_no_undo_even_in_doubt() -> (
    None
):
    calls, capture = Calls(), EventCapture()
    steps = [SpendsTheDeadline("seat", calls), Recorded("card", calls, in_doubt=True)]
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga(steps)
    assert calls.trail() == [("execute", "seat"), ("compensate", "seat")]
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "seat"),
        ("StepSucceeded", "seat"),
        ("CompensationStarted", "seat"),
        ("CompensationSucceeded", "seat"),
        ("SagaRolledBackEvent",),
    ]
    report = raised.value.report
    assert (report.failed_step, report.failure_kind, report.succeeded, report.compensated) == (
        None,
        FailureKind.TIMEOUT,
        ("seat",),
        ("seat",),
    )
    assert re.fullmatch(
        r"step 'card' had no time left: the deadline passed \d+\.\d ms before it started; it was not run"
        r" — rolled back: seat",
        report.summary(),
    )
    assert report == fold_report(capture.events)
    assert isinstance(raised.value.__cause__, ToolTimeoutError)


class LosesASuccess(InMemoryJournal):
    """Fails the write of the first step's StepSucceeded with an error, or (`stall`) writes it only
    after the saga's deadline has passed: a write is never cut off, so the next step is not run."""

    def __init__(self, stall: bool) -> None:
        super().__init__()
        self.stall = stall

    async def append(self, event: SagaEvent) -> None:
        if type(event).__name__ == "StepSucceeded" and event.seq == 2:
            if not self.stall:
                raise OSError("disk full")
            await anyio.sleep(0.1)  # the fault injected: a disk slower than the saga's 50 ms deadline
        await super().append(event)


@pytest.mark.parametrize("stall", [False, True], ids=["write fails", "write outlasts the deadline"])
async def test_a_success_the_journal_did_not_record_is_still_in_the_run_and_undone(stall: bool) -> None:
    calls, capture = Calls(), EventCapture()
    engine = WorkflowEngine(compensation_retry=RetryPolicy.never(), journal=LosesASuccess(stall))
    ctx = AegisContext().with_timeout(0.05) if stall else AegisContext()
    run = await engine.run_saga([Recorded("flight", calls), Recorded("hotel", calls)], ctx, sinks=[capture])
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    assert tuple(capture) == run.events
    assert (run.report.succeeded, run.report.compensated, run.report.failed_step) == (
        ("flight",),
        ("flight",),
        None,
    )
    assert fold_report(run.events) == run.report


# -- compensations past their budget: the backstop -------------------------------------------------


async def test_a_compensation_past_twice_its_budget_is_stopped_and_retried() -> None:
    # A compensation that ignores its deadline is cut off by the engine's backstop (at most twice
    # the budget), counted as a failed attempt, and retried; the rest of the rollback goes on.
    calls, capture = Calls(), EventCapture()
    steps = [
        Recorded("flight", calls),
        Recorded("hotel", calls, compensation_hangs=1),
        Recorded("card", calls, fail="declined"),
    ]
    engine = WorkflowEngine(compensation_budget=0.02, compensation_retry=NO_WAIT, sinks=[capture])
    with pytest.raises(SagaRolledBack) as raised:
        await engine.execute_saga(steps)
    assert capture.trail()[-8:] == [
        ("StepFailed", "card"),
        ("CompensationStarted", "hotel"),
        ("CompensationFailed", "hotel"),
        ("CompensationStarted", "hotel"),
        ("CompensationSucceeded", "hotel"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    failed = capture.events[-6]
    assert isinstance(failed, CompensationFailed)
    assert (failed.attempt, failed.will_retry, failed.error.type) == (1, True, "ToolTimeoutError")
    assert 0.02 <= failed.duration < 1.0  # cut off by the backstop, not left hanging
    assert [getattr(e, "attempt", None) for e in capture.events[-7:-1]] == [1, 1, 2, 2, 1, 1]
    assert list(raised.value.report.compensated) == ["hotel", "flight"]


async def test_a_journal_write_slower_than_the_backstop_is_waited_for_and_the_undo_runs_once() -> None:
    # A journal write is never cut off (the engine must know whether the journal holds an event),
    # and its time does not count against the compensation's budget: the attempt after a write that
    # outlasted the backstop gets its whole budget, rather than being cut off at its first await.
    class SlowOnce(InMemoryJournal):
        """Takes three budgets over the first journal write of the hotel's compensation."""

        slowed = False

        async def append(self, event: SagaEvent) -> None:
            if isinstance(event, CompensationStarted) and event.step == "hotel" and not self.slowed:
                self.slowed = True
                await anyio.sleep(0.06)  # the fault injected: a slow disk, not a wait for something
            await super().append(event)

    calls, capture, journal = Calls(), EventCapture(), SlowOnce()
    steps = [Recorded("flight", calls), Recorded("hotel", calls), Recorded("card", calls, fail="declined")]
    engine = WorkflowEngine(
        compensation_budget=0.02, compensation_retry=NO_WAIT, journal=journal, sinks=[capture]
    )
    with pytest.raises(SagaRolledBack) as raised:
        await engine.execute_saga(steps)
    assert capture.trail()[-6:] == [
        ("StepFailed", "card"),
        ("CompensationStarted", "hotel"),
        ("CompensationSucceeded", "hotel"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    assert journal.events(raised.value.report.run_id) == tuple(capture.events)
    assert calls.trail()[-2:] == [("compensate", "hotel"), ("compensate", "flight")]
    assert list(raised.value.report.compensated) == ["hotel", "flight"]


async def test_a_compensation_past_its_budget_on_its_last_attempt_is_left_standing() -> None:
    calls, capture = Calls(), EventCapture()
    steps = [
        Recorded("flight", calls),
        Recorded("hotel", calls, compensation_hangs=1),
        Recorded("card", calls, fail="declined"),
    ]
    engine = WorkflowEngine(compensation_budget=0.02, compensation_retry=RetryPolicy.never(), sinks=[capture])
    with pytest.raises(SagaCompensationFailed) as raised:
        await engine.execute_saga(steps)
    assert capture.trail()[-6:] == [
        ("StepFailed", "card"),
        ("CompensationStarted", "hotel"),
        ("CompensationFailed", "hotel"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaStuck",),
    ]
    report = raised.value.report
    assert list(report.left_standing) == ["hotel"]
    assert list(report.compensated) == ["flight"]


# -- errors that break the usual handling: an unprintable error, a stray CancelledError ------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


class UnprintableUndo(Recorded):
    """Its execute raises an `Unprintable` when told to; its first compensation always does."""

    def __init__(self, name: str, calls: Calls, *, fail: bool = False) -> None:
        super().__init__(name, calls, retry=NO_WAIT)
        self.raise_in_execute, self.undo_failures = fail, 1

    async def execute(self, ctx: AegisContext) -> AegisContext:
        if self.raise_in_execute:
            raise Unprintable("card")
        return await super().execute(ctx)

    async def compensate(self, ctx: AegisContext) -> None:
        await super().compensate(ctx)
        if self.undo_failures:
            self.undo_failures -= 1
            raise Unprintable("hotel")


# Regression guard: an error whose __str__ raises, in a step or an undo, does not abort the rollback.
async def test_errors_whose_str_raises_are_still_rolled_back_and_reported() -> None:
    calls, capture = Calls(), EventCapture()
    saga = [
        Recorded("flight", calls),
        UnprintableUndo("hotel", calls),
        UnprintableUndo("card", calls, fail=True),
    ]
    run = await WorkflowEngine(sinks=[capture]).run_saga(saga)
    assert capture.trail() == [
        *ROLLED_BACK_TRAIL[:6],
        ("StepFailed", "card"),
        ("CompensationStarted", "hotel"),
        ("CompensationFailed", "hotel"),
        *ROLLED_BACK_TRAIL[7:],
    ]
    unprintable = ErrorInfo("Unprintable", "<Unprintable: str() failed>")
    assert run.report.cause == unprintable
    assert capture.events[8].error == unprintable  # type: ignore[union-attr]
    assert isinstance(run.error, SagaRolledBack)
    assert str(run.error) == "saga 'saga': <Unprintable: str() failed> — rolled back: hotel, flight"
    assert fold_report(run.events) == run.report


def declined_travel(calls: Calls, hotel: Recorded) -> list[Recorded]:
    return [Recorded("flight", calls), hotel, Recorded("card", calls, fail="Card Declined!")]


class AwaitsACancelledFuture(Recorded):
    """Its first compensation awaits a future cancelled elsewhere, so it raises CancelledError."""

    def __init__(self, name: str, calls: Calls) -> None:
        super().__init__(name, calls, retry=NO_WAIT)
        self.stray = 1

    async def compensate(self, ctx: AegisContext) -> None:
        await super().compensate(ctx)
        if self.stray:
            self.stray -= 1
            future = asyncio.get_running_loop().create_future()
            future.cancel()
            await future


# Regression guard: a CancelledError raised by an undo is a failed attempt, not a cancelled caller.
@ASYNCIO_ONLY
async def test_a_stray_cancelled_error_from_a_compensation_is_retried_and_the_rest_still_undone() -> None:
    calls, capture = Calls(), EventCapture()
    run = await WorkflowEngine(sinks=[capture]).run_saga(
        declined_travel(calls, AwaitsACancelledFuture("hotel", calls))
    )
    assert capture.trail() == [
        *ROLLED_BACK_TRAIL[:8],
        ("CompensationFailed", "hotel"),
        *ROLLED_BACK_TRAIL[7:],
    ]
    assert capture.events[8].error == ErrorInfo("CancelledError", "")  # type: ignore[union-attr]
    assert run.status is SagaStatus.ROLLED_BACK
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # nothing cancelled the caller
