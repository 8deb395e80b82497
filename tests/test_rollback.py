"""Rollback: every step that succeeded is undone, newest first, with the context its own execute returned.

A compensation gets a fresh budget rather than the spent forward deadline; an in-doubt step is undone
with its input context; a failing compensation is retried with backoff (capped as it grows), and one
that never succeeds is reported while the rest are still undone; the error a rollback raises holds no
reference cycle.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from aegis_nb import (
    AegisContext,
    FailureKind,
    RetryPolicy,
    SagaCompensationFailed,
    SagaRolledBack,
    SagaStatus,
    WorkflowEngine,
)
from aegis_nb.testing import EventCapture
from tests.steps import NO_WAIT, ROLLED_BACK_TRAIL, Boom, Calls, Recorded, travel

pytestmark = pytest.mark.anyio


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


async def test_the_same_step_object_twice_runs_twice_with_its_own_snapshots() -> None:
    calls = Calls()
    hotel = Recorded("hotel", calls)
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine().execute_saga([hotel, hotel, Recorded("card", calls, fail="no")])
    assert raised.value.report.steps == ("hotel#1", "hotel#2", "card")
    first, second = calls.contexts("compensate", "hotel")
    assert first.to_json() == {"hotel_id": "HOTEL-1"}  # position 1 was undone first
    assert second.to_json() == {"hotel_id": "HOTEL-0"}


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
        ("SagaRolledBackEvent",),
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


# Regression guard: a huge multiplier is capped at max_delay rather than overflowing the backoff.
def test_backoff_delays_are_capped_as_they_grow() -> None:
    assert list(RetryPolicy(attempts=4, initial_delay=3, multiplier=10**300, max_delay=7).delays()) == [
        3,
        7,
        7,
    ]
    assert list(RetryPolicy(attempts=4, initial_delay=0.5, multiplier=1e300, max_delay=2).delays()) == [
        0.5,
        2,
        2,
    ]
    assert list(RetryPolicy(attempts=3, initial_delay=0.1).delays()) == [0.1, 0.2]
