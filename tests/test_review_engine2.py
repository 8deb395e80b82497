"""Engine edge cases found in a second review, on asyncio and trio.

A `ToolError` subclass whose ``refused`` raises is no refusal: the failure it reports, in an execute
or a compensation, is rolled back and reported like any other, never left to abort the rollback.
A run whose commit the journal did not record (the write failed or was cancelled) is not committed:
it is rolled back like any other run that failed between steps.
"""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel
import pytest

from aegis_nb import (
    AegisContext,
    ErrorInfo,
    RetryPolicy,
    SagaCompensationFailed,
    SagaRolledBack,
    SagaStatus,
    ToolError,
    WorkflowEngine,
)
from aegis_nb.kernel.errors import is_refusal
from aegis_nb.kernel.report import FailureKind
from aegis_nb.saga import InMemoryJournal, SagaCommitted, SagaEvent, fold_report
from aegis_nb.testing import EventCapture
from tests.steps import ROLLED_BACK_TRAIL, Calls, Recorded

pytestmark = pytest.mark.anyio


class UnsureError(ToolError):
    """A tool error that cannot say whether the tool acted: reading `refused` raises."""

    @property
    def refused(self) -> bool:
        raise RuntimeError("refused is unknown")

    @refused.setter
    def refused(self, value: bool) -> None:
        pass


class FailsUnsure(Recorded):
    """An in-doubt step whose execute fails with an `UnsureError`."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        await super().execute(ctx)
        raise UnsureError("card", "Card Declined!")


class UndoFailsUnsure(Recorded):
    """A step whose every compensation fails with an `UnsureError`."""

    async def compensate(self, ctx: AegisContext) -> None:
        await super().compensate(ctx)
        raise UnsureError("hotel", "hotel cannot be undone")


def test_a_refused_attribute_that_raises_is_no_refusal() -> None:
    assert is_refusal(UnsureError("t", "m")) is False
    assert is_refusal(ToolError("t", "m")) is True
    assert is_refusal(ToolError("t", "m", refused=False)) is False


async def test_a_failed_in_doubt_step_whose_error_cannot_tell_refused_is_compensated_with_the_rest() -> None:
    calls, capture = Calls(), EventCapture()
    saga = [Recorded("flight", calls), Recorded("hotel", calls), FailsUnsure("card", calls, in_doubt=True)]
    run = await WorkflowEngine(sinks=[capture]).run_saga(saga)
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "hotel"),
        ("execute", "card"),
        ("compensate", "card"),
        ("compensate", "hotel"),
        ("compensate", "flight"),
    ]
    assert capture.trail() == [
        *ROLLED_BACK_TRAIL[:7],
        ("CompensationStarted", "card"),
        ("CompensationSucceeded", "card"),
        *ROLLED_BACK_TRAIL[7:],
    ]
    assert run.report.cause == ErrorInfo("UnsureError", "Card Declined!")
    assert run.report.compensated == ("card", "hotel", "flight")
    assert isinstance(run.error, SagaRolledBack)
    assert str(run.error) == "saga 'saga': Card Declined! — rolled back: card, hotel, flight"
    assert [e.seq for e in run.events] == list(range(len(run.events)))
    assert fold_report(run.events) == run.report


async def test_a_compensation_failing_with_an_error_that_cannot_tell_refused_leaves_the_rest_undone() -> None:
    calls, capture = Calls(), EventCapture()
    saga = [
        Recorded("flight", calls),
        UndoFailsUnsure("hotel", calls, retry=RetryPolicy.never()),
        Recorded("card", calls, fail="Card Declined!"),
    ]
    run = await WorkflowEngine(sinks=[capture]).run_saga(saga)
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "hotel"),
        ("execute", "card"),
        ("compensate", "hotel"),
        ("compensate", "flight"),
    ]
    assert capture.trail() == [
        *ROLLED_BACK_TRAIL[:8],
        ("CompensationFailed", "hotel"),
        *ROLLED_BACK_TRAIL[9:11],
        ("SagaStuck",),
    ]
    assert run.status is SagaStatus.STUCK
    assert run.report.left_standing == ("hotel",)
    assert run.report.compensated == ("flight",)
    assert isinstance(run.error, SagaCompensationFailed)
    assert str(run.error) == (
        "saga 'saga': Card Declined! — could not undo: hotel (hotel cannot be undone, after 1 attempt)"
        " — rolled back: flight"
    )
    assert fold_report(run.events) == run.report


# -- the commit's journal write fails or is cancelled ---------------------------------------------

COMMIT_LOST_TRAIL = [
    ("SagaStarted",),
    ("StepStarted", "flight"),
    ("StepSucceeded", "flight"),
    ("StepStarted", "hotel"),
    ("StepSucceeded", "hotel"),
    ("CompensationStarted", "hotel"),
    ("CompensationSucceeded", "hotel"),
    ("CompensationStarted", "flight"),
    ("CompensationSucceeded", "flight"),
    ("SagaCompensated",),
]


class LosesTheCommit(InMemoryJournal):
    """Fails the write of SagaCommitted: with an error, or is cancelled while writing it, by `scope`
    (or, with no scope, natively) — and, as `Journal.append` promises, finishes the write first."""

    def __init__(self, how: str, scope: anyio.CancelScope | None = None) -> None:
        super().__init__()
        self.how, self.scope = how, scope

    async def append(self, event: SagaEvent) -> None:
        if isinstance(event, SagaCommitted):
            if self.how == "error":
                raise OSError("disk full")
            if self.scope is not None:
                self.scope.cancel()
                await anyio.lowlevel.checkpoint()  # the engine shields the write: nothing is raised
            else:
                task = asyncio.current_task()
                assert task is not None
                task.cancel()  # native: goes through shields, so the journal holds it until written
                try:
                    await anyio.lowlevel.checkpoint()
                except asyncio.CancelledError:
                    await super().append(event)
                    raise
        await super().append(event)


BOTH_DONE_THEN_UNDONE = [
    ("execute", "flight"),
    ("execute", "hotel"),
    ("compensate", "hotel"),
    ("compensate", "flight"),
]


async def test_a_commit_the_journal_could_not_write_is_rolled_back() -> None:
    calls, capture, journal = Calls(), EventCapture(), LosesTheCommit("error")
    engine = WorkflowEngine(journal=journal, sinks=[capture])
    run = await engine.run_saga([Recorded("flight", calls), Recorded("hotel", calls)])
    assert calls.trail() == BOTH_DONE_THEN_UNDONE
    assert capture.trail() == COMMIT_LOST_TRAIL
    assert journal.events(run.run_id) == run.events == tuple(capture.events)
    assert (run.report.succeeded, run.report.failed_step, run.report.failure_kind) == (
        ("flight", "hotel"),
        None,
        FailureKind.ERROR,
    )
    assert isinstance(run.error, SagaRolledBack)
    assert str(run.error) == "saga 'saga': disk full — rolled back: hotel, flight"
    assert isinstance(run.error.__cause__, OSError)
    assert fold_report(run.events) == run.report
    assert list(journal.unfinished()) == []


COMMITTED_TRAIL = [
    ("SagaStarted",),
    ("StepStarted", "flight"),
    ("StepSucceeded", "flight"),
    ("StepStarted", "hotel"),
    ("StepSucceeded", "hotel"),
    ("SagaCommitted",),
]


async def test_a_cancellation_during_the_commit_write_waits_for_it_and_nothing_is_undone() -> None:
    # Once the run's end is recorded, the run committed: the caller's cancellation propagates after
    # it (at the caller's next await), and no compensation runs (issue 16: committed trips refunded).
    calls, capture = Calls(), EventCapture()
    with anyio.CancelScope() as scope:
        journal = LosesTheCommit("cancel", scope)
        run = await WorkflowEngine(journal=journal, sinks=[capture]).run_saga(
            [Recorded("flight", calls), Recorded("hotel", calls)]
        )
        await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert run.status is SagaStatus.COMMITTED
    assert calls.trail() == [("execute", "flight"), ("execute", "hotel")]
    assert capture.trail() == COMMITTED_TRAIL
    assert journal.events(run.run_id) == run.events == tuple(capture.events)
    assert list(journal.unfinished()) == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_native_cancel_during_the_commit_write_propagates_after_it_and_nothing_is_undone() -> None:
    calls, capture, journal = Calls(), EventCapture(), LosesTheCommit("cancel")
    with pytest.raises(asyncio.CancelledError):
        await WorkflowEngine(journal=journal, sinks=[capture]).run_saga(
            [Recorded("flight", calls), Recorded("hotel", calls)]
        )
    task = asyncio.current_task()
    assert task is not None
    assert task.uncancel() == 0
    assert calls.trail() == [("execute", "flight"), ("execute", "hotel")]
    assert capture.trail() == COMMITTED_TRAIL
    assert journal.events(capture.events[0].run_id) == tuple(capture.events)
