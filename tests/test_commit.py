"""Committing: a run is committed once, and only once, the journal holds its commit.

A commit the journal could not write is rolled back like any run that failed between steps; a
cancellation landing while the commit is written waits for the write, and then nothing is undone
(the outcome the journal holds is the outcome).
"""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel
import pytest

from aegis_nb import SagaRolledBack, SagaStatus, WorkflowEngine
from aegis_nb.kernel.report import FailureKind
from aegis_nb.saga import InMemoryJournal, SagaCommitted, SagaEvent, fold_report
from aegis_nb.testing import EventCapture
from tests.steps import Calls, Recorded

pytestmark = pytest.mark.anyio


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
    ("SagaRolledBackEvent",),
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


# Regression guard: a commit the journal failed to write is not reported committed.
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


# Regression guard: a commit the journal holds is never undone by a cancellation landing on its write.
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


# Regression guard: the same for a native Task.cancel(), which goes through shields.
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
