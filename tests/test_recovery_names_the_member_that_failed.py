"""After a crash, the recovered run's cause is the group member that failed, not a sibling it cut off.

A group member cancelled because its sibling failed is journaled as a failure too (its `StepFailed`
comes after the sibling's). Recovery must read it as the rules do (`rules.cancelled_by_sibling`) and
keep the sibling's failure as the run's cause, as the live engine reports it.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from aegis_nb import AegisContext, WorkflowEngine, parallel
from aegis_nb.kernel.report import ErrorInfo, FailureKind
from aegis_nb.saga.durable import SqliteJournal, plan_recovery, read_run
from aegis_nb.saga.events import CompensationStarted, StepFailed
from aegis_nb.testing import Crash, CrashingJournal

pytestmark = pytest.mark.anyio

RUN = "run1"


class Book:
    """Starts, tells its sibling so, then waits to be cut off; its undo does nothing."""

    def __init__(self, started: anyio.Event) -> None:
        self.started = started
        self.in_doubt = True

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.started.set()
        await anyio.Event().wait()
        return ctx

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Charge:
    """Fails once its sibling is running, so the sibling is cancelled by this failure."""

    def __init__(self, started: anyio.Event) -> None:
        self.started = started

    async def execute(self, ctx: AegisContext) -> AegisContext:
        await self.started.wait()
        raise RuntimeError("Card Declined!")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


async def run_group(path: Path, crash_at: int | None) -> None:
    started = anyio.Event()
    steps = [Book(started), Charge(started)]
    inner = SqliteJournal(path, steps=steps)
    if crash_at is None:
        async with inner as journal:
            run = await WorkflowEngine(journal=journal).run_saga([parallel(*steps)], run_id=RUN)
        assert run.report.cause == ErrorInfo("RuntimeError", "Card Declined!")
        return
    with pytest.raises(Crash):
        await WorkflowEngine(journal=CrashingJournal(inner, crash_at)).run_saga(
            [parallel(*steps)], run_id=RUN
        )


async def test_a_crash_during_the_rollback_recovers_with_the_failed_members_cause(tmp_path: Path) -> None:
    whole = tmp_path / "whole.db"
    await run_group(whole, None)
    events = read_run(whole, RUN).events
    failures = [e for e in events if isinstance(e, StepFailed)]
    # The failing member first, then the sibling it cut off: the order that misled recovery.
    assert [(e.step, e.kind) for e in failures] == [
        ("Charge", FailureKind.ERROR),
        ("Book", FailureKind.CANCELLED),
    ]
    first_undo = next(e.seq for e in events if isinstance(e, CompensationStarted))

    crashed = tmp_path / "crashed.db"
    await run_group(crashed, first_undo)
    plan = plan_recovery(read_run(crashed, RUN))
    assert (plan.kind, plan.cause, plan.failed) == (
        FailureKind.ERROR,
        ErrorInfo("RuntimeError", "Card Declined!"),
        "Charge",
    )
