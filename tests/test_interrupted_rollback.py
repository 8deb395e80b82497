"""A rollback stopped by an interrupt, and a compensation cut off by the engine's backstop.

An interrupt (Ctrl-C) inside a compensation reaches the caller unchanged, but first the stopped
attempt is recorded as a failed attempt that is still owed, and the run is handed back to the
journal, so `recover()` in the same process (a notebook after Ctrl-C) finishes the rollback.
A compensation that hangs is reported with the budget it was given and when it was cut off.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from aegis_nb import AegisContext, RetryPolicy, SagaCompensationFailed, WorkflowEngine
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga import CompensationFailed
from aegis_nb.saga.durable import SqliteJournal, read_run
from aegis_nb.testing import EventCapture

pytestmark = pytest.mark.anyio

undone: list[str] = []


class Booking:
    """Books `name`; its undo records itself in `undone`."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({self.name: "booked"})

    async def compensate(self, ctx: AegisContext) -> None:
        undone.append(self.name)


class CtrlCOnce:
    """Books; its first undo is interrupted by Ctrl-C, a later one succeeds."""

    pressed = False

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"hotel": "booked"})

    async def compensate(self, ctx: AegisContext) -> None:
        await anyio.lowlevel.checkpoint()
        if not CtrlCOnce.pressed:
            CtrlCOnce.pressed = True
            raise KeyboardInterrupt
        undone.append("hotel")


class Declined:
    async def execute(self, ctx: AegisContext) -> AegisContext:
        raise ValueError("card declined")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


async def test_an_interrupt_mid_rollback_is_recorded_and_recover_in_the_same_process_finishes_it(
    tmp_path: Path,
) -> None:
    undone.clear()
    CtrlCOnce.pressed = False
    capture = EventCapture()
    journal = SqliteJournal(tmp_path / "runs.db")
    engine = WorkflowEngine(journal=journal, sinks=[capture], compensation_retry=RetryPolicy.never())
    async with journal:
        with pytest.raises(KeyboardInterrupt):
            await engine.run_saga([Booking("flight"), CtrlCOnce(), Declined()])
        interrupted = capture.events[-1]
        assert isinstance(interrupted, CompensationFailed)
        assert (interrupted.step, interrupted.attempt, interrupted.will_retry) == ("CtrlCOnce", 1, True)
        assert (interrupted.error.type, interrupted.error.message) == (
            "KeyboardInterrupt",
            "interrupted: the rest of the rollback is left for recovery",
        )
        assert undone == []
        (recovered,) = await engine.recover()
    assert recovered.status is SagaStatus.ROLLED_BACK
    assert undone == ["hotel", "flight"]
    stored = await anyio.to_thread.run_sync(read_run, tmp_path / "runs.db", recovered.run_id)
    assert stored.status is SagaStatus.ROLLED_BACK
    assert [(type(event).__name__, getattr(event, "step", None)) for event in stored.events] == [
        ("SagaStarted", None),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "CtrlCOnce"),
        ("StepSucceeded", "CtrlCOnce"),
        ("StepStarted", "Declined"),
        ("StepFailed", "Declined"),
        ("CompensationStarted", "CtrlCOnce"),
        ("CompensationFailed", "CtrlCOnce"),  # the interrupt, still owed
        ("CompensationStarted", "CtrlCOnce"),  # recovery, in the same process
        ("CompensationSucceeded", "CtrlCOnce"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent", None),
    ]


class Hangs:
    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"hotel": "booked"})

    async def compensate(self, ctx: AegisContext) -> None:
        with anyio.CancelScope():
            await anyio.sleep_forever()


async def test_a_hanging_compensation_is_reported_with_its_budget_and_its_cut_off() -> None:
    engine = WorkflowEngine(compensation_budget=0.02, compensation_retry=RetryPolicy.never())
    with pytest.raises(SagaCompensationFailed) as raised:
        await engine.execute_saga([Hangs(), Declined()])
    (failure,) = raised.value.report.compensation_failures
    message = failure.error.message
    budget, _, cut_off = message.partition("; cut off ")
    assert budget == "step 'Hangs' exceeded its deadline (budget 20.0 ms)"
    # Cut off between one and two budgets after it started, never before its budget was spent.
    milliseconds = float(cut_off.removesuffix(" ms after it started"))
    assert 20.0 <= milliseconds <= 40.0
