"""WorkflowEngine: forward threading, rollback with each step's own snapshot, deadlines, retries."""

from __future__ import annotations

import gc
import weakref

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    CompensationFailed,
    FailureKind,
    InMemoryJournal,
    RetryPolicy,
    SagaCompensationFailed,
    SagaRolledBack,
    SagaStatus,
    StepResultError,
    StepTimedOut,
    ToolError,
    ToolTimeoutError,
    WorkflowEngine,
)
from aegis_nb.saga import CompensationStarted, SagaEvent, fold_report
from aegis_nb.testing import EventCapture
from tests.steps import ROLLED_BACK_TRAIL, Boom, Calls, Recorded

pytestmark = pytest.mark.anyio

NO_WAIT = RetryPolicy(attempts=3, initial_delay=0)


def travel(calls: Calls, **card: object) -> list[Recorded]:
    return [Recorded("flight", calls), Recorded("hotel", calls), Recorded("card", calls, **card)]  # type: ignore[arg-type]


async def test_success_threads_each_returned_context_into_the_next_step() -> None:
    calls, capture = Calls(), EventCapture()
    final = await WorkflowEngine(sinks=[capture]).execute_saga(travel(calls), AegisContext({"user": "ada"}))

    assert final.to_json() == {
        "user": "ada",
        "flight_id": "FLIGHT-0",
        "hotel_id": "HOTEL-1",
        "card_id": "CARD-2",
    }
    assert calls.contexts("execute", "card")[0].to_json() == {
        "user": "ada",
        "flight_id": "FLIGHT-0",
        "hotel_id": "HOTEL-1",
    }
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "hotel"),
        ("StepSucceeded", "hotel"),
        ("StepStarted", "card"),
        ("StepSucceeded", "card"),
        ("SagaCommitted",),
    ]
    assert [e.seq for e in capture] == list(range(8))


async def test_rollback_gives_each_compensation_its_own_steps_context() -> None:
    calls, capture = Calls(), EventCapture()
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga(travel(calls, fail="Insufficient Funds"))

    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "hotel"),
        ("execute", "card"),
        ("compensate", "hotel"),
        ("compensate", "flight"),
    ]
    (hotel_ctx,) = calls.contexts("compensate", "hotel")
    (flight_ctx,) = calls.contexts("compensate", "flight")
    assert hotel_ctx.to_json() == {"flight_id": "FLIGHT-0", "hotel_id": "HOTEL-1"}
    assert flight_ctx.to_json() == {"flight_id": "FLIGHT-0"}
    assert capture.trail() == ROLLED_BACK_TRAIL
    error = raised.value
    assert isinstance(error.__cause__, Boom)
    report = error.report
    assert (report.status, report.failure_kind, report.failed_step) == (
        SagaStatus.ROLLED_BACK,
        FailureKind.ERROR,
        "card",
    )
    assert list(report.compensated) == ["hotel", "flight"]
    assert str(error) == "saga 'saga': Insufficient Funds — rolled back: hotel, flight"


async def test_idempotency_key_is_the_same_in_execute_and_compensate() -> None:
    calls = Calls()
    engine = WorkflowEngine()
    run = await engine.run_saga(travel(calls, fail="no"), run_id="run-1")
    assert run.status is SagaStatus.ROLLED_BACK
    for name, position in (("flight", 0), ("hotel", 1)):
        (executed,) = calls.contexts("execute", name)
        (compensated,) = calls.contexts("compensate", name)
        assert executed.idempotency_key == compensated.idempotency_key == f"run-1/{position}"


async def test_a_step_past_its_deadline_times_out_and_earlier_steps_are_undone() -> None:
    calls, capture = Calls(), EventCapture()
    steps = [Recorded("flight", calls), Recorded("hotel", calls, hang=True)]
    ctx = AegisContext().with_timeout(0.05)
    start = anyio.current_time()
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga(steps, ctx)
    elapsed = anyio.current_time() - start

    assert isinstance(raised.value.__cause__, ToolTimeoutError)
    assert raised.value.__cause__.step == "hotel"
    assert capture.trail()[-5:] == [
        ("StepStarted", "hotel"),
        ("StepTimedOut", "hotel"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaCompensated",),
    ]
    timed_out = next(e for e in capture if isinstance(e, StepTimedOut))
    assert timed_out.time >= ctx.deadline
    assert 0.05 <= elapsed < 1.0  # loose: the deadline fires, not a hang


async def test_compensation_gets_a_fresh_budget_not_the_spent_deadline() -> None:
    calls = Calls()
    steps = [Recorded("flight", calls), Recorded("hotel", calls, hang=True)]
    ctx = AegisContext().with_timeout(0.02)
    with pytest.raises(SagaRolledBack):
        await WorkflowEngine(compensation_budget=7).execute_saga(steps, ctx)
    (flight_ctx,) = calls.contexts("compensate", "flight")
    assert flight_ctx.deadline > ctx.deadline
    assert 6 < flight_ctx.remaining() <= 7


async def test_an_in_doubt_step_is_compensated_with_its_input_context() -> None:
    calls, capture = Calls(), EventCapture()
    steps = [Recorded("flight", calls), Recorded("hotel", calls, hang=True, in_doubt=True)]
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga(steps, AegisContext().with_timeout(0.02))
    assert calls.trail()[-2:] == [("compensate", "hotel"), ("compensate", "flight")]
    (hotel_ctx,) = calls.contexts("compensate", "hotel")
    assert hotel_ctx.to_json() == {"flight_id": "FLIGHT-0"}
    assert hotel_ctx.idempotency_key == calls.contexts("execute", "hotel")[0].idempotency_key
    assert list(raised.value.report.compensated) == ["hotel", "flight"]


async def test_a_failing_compensation_is_retried_until_it_succeeds() -> None:
    calls, capture = Calls(), EventCapture()
    steps = [Recorded("flight", calls, compensation_failures=2), Recorded("card", calls, fail="declined")]
    with pytest.raises(SagaRolledBack):
        await WorkflowEngine(compensation_retry=NO_WAIT, sinks=[capture]).execute_saga(steps)
    assert capture.trail()[-8:] == [
        ("StepFailed", "card"),
        ("CompensationStarted", "flight"),
        ("CompensationFailed", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationFailed", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaCompensated",),
    ]
    attempts = [getattr(e, "attempt", None) for e in capture.events[-7:-1]]
    assert attempts == [1, 1, 2, 2, 3, 3]


async def test_a_compensation_that_never_succeeds_is_reported_and_the_rest_still_run() -> None:
    calls, capture = Calls(), EventCapture()
    steps = [
        Recorded("flight", calls),
        Recorded("hotel", calls, compensation_failures=99, retry=RetryPolicy(attempts=2, initial_delay=0)),
        Recorded("card", calls, fail="declined"),
    ]
    with pytest.raises(SagaCompensationFailed) as raised:
        await WorkflowEngine(compensation_retry=NO_WAIT, sinks=[capture]).execute_saga(steps)

    assert calls.trail()[3:] == [("compensate", "hotel"), ("compensate", "hotel"), ("compensate", "flight")]
    report = raised.value.report
    assert report.status is SagaStatus.STUCK
    assert list(report.compensated) == ["flight"]
    assert list(report.left_standing) == ["hotel"]
    assert report.compensation_failures[0].attempts == 2
    assert str(raised.value) == (
        "saga 'saga': declined — could not undo: hotel (hotel cannot be undone yet, after 2 attempts)"
        " — rolled back: flight"
    )
    assert capture.trail()[-1] == ("SagaStuck",)


async def test_a_bad_return_value_fails_that_step_and_undoes_the_earlier_ones() -> None:
    calls = Calls()

    class ReturnsDict:
        async def execute(self, ctx: AegisContext) -> dict[str, str]:
            return {"oops": "a dict"}

        async def compensate(self, ctx: AegisContext) -> None:
            calls.log.append(("compensate", "ReturnsDict", ctx))

    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine().execute_saga([Recorded("flight", calls), ReturnsDict()])
    assert isinstance(raised.value.__cause__, StepResultError)
    assert str(raised.value.__cause__) == (
        "step 'ReturnsDict': execute() must return an AegisContext or None, got dict"
    )
    assert calls.trail() == [("execute", "flight"), ("compensate", "flight")]


async def test_execute_returning_none_passes_the_context_on_unchanged() -> None:
    class Nothing:
        async def execute(self, ctx: AegisContext) -> None:
            return None

        async def compensate(self, ctx: AegisContext) -> None:
            return None

    final = await WorkflowEngine().execute_saga([Nothing()], AegisContext({"k": 1}))
    assert final.to_json() == {"k": 1}


async def test_a_step_cannot_lengthen_the_deadline() -> None:
    class Lengthens:
        async def execute(self, ctx: AegisContext) -> AegisContext:
            return AegisContext({"fresh": True})  # no deadline at all

        async def compensate(self, ctx: AegisContext) -> None:
            return None

    ctx = AegisContext().with_timeout(30)
    final = await WorkflowEngine().execute_saga([Lengthens()], ctx)
    assert final.deadline == ctx.deadline


async def test_the_same_step_object_twice_runs_twice_with_its_own_snapshots() -> None:
    calls = Calls()
    hotel = Recorded("hotel", calls)
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine().execute_saga([hotel, hotel, Recorded("card", calls, fail="no")])
    assert raised.value.report.steps == ("hotel#1", "hotel#2", "card")
    first, second = calls.contexts("compensate", "hotel")
    assert first.to_json() == {"hotel_id": "HOTEL-1"}  # position 1 was undone first
    assert second.to_json() == {"hotel_id": "HOTEL-0"}


async def test_the_in_memory_journal_records_each_run_and_rebuilds_its_report() -> None:
    journal = InMemoryJournal()
    engine = WorkflowEngine(journal=journal)
    ok = await engine.run_saga(travel(Calls()), name="ok")
    bad = await engine.run_saga(travel(Calls(), fail="declined"), name="bad")

    assert journal.run_ids() == (ok.run_id, bad.run_id)
    assert journal.events(bad.run_id) == bad.events
    assert journal.report(bad.run_id) == bad.report
    assert journal.report(ok.run_id) == ok.report == fold_report(ok.events)
    assert ok.report.status is SagaStatus.COMMITTED
    assert list(journal.unfinished()) == []


async def test_an_in_doubt_step_whose_tool_refused_is_not_compensated() -> None:
    calls = Calls()

    class DeclinedCharge(Recorded):
        async def execute(self, ctx: AegisContext) -> AegisContext:
            calls.log.append(("execute", self.name, ctx))
            raise ToolError("charge_card", "Card Declined!")

    steps = [Recorded("flight", calls), DeclinedCharge("card", calls, in_doubt=True)]
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine().execute_saga(steps)
    assert calls.trail() == [("execute", "flight"), ("execute", "card"), ("compensate", "flight")]
    assert raised.value.report.summary() == "Card Declined! — rolled back: flight"


async def test_recover_needs_a_durable_journal() -> None:
    for journal in (None, InMemoryJournal()):
        with pytest.raises(TypeError, match="recover\\(\\) needs a durable journal, such as SqliteJournal"):
            await WorkflowEngine(journal=journal).recover()


async def test_a_rolled_back_run_is_freed_with_its_error_not_left_to_the_garbage_collector() -> None:
    # A failed run's error, traceback and events must not form a reference cycle: a long-lived
    # agent would otherwise hold every failed run's history until the next full collection.
    calls = Calls()
    freed: weakref.ref[SagaRolledBack] | None = None
    gc.disable()
    try:
        try:
            await WorkflowEngine(compensation_retry=NO_WAIT).execute_saga(
                travel(calls, fail=Boom("declined")), AegisContext()
            )
        except SagaRolledBack as error:
            freed = weakref.ref(error)
        assert freed is not None, "the saga did not roll back"
        assert freed() is None
    finally:
        gc.enable()


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
        ("SagaCompensated",),
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
        ("SagaCompensated",),
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
