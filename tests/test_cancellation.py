"""Cancelling the caller mid-saga still undoes every completed step, then the cancellation propagates."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aegis_nb import FailureKind, SagaStatus, WorkflowEngine
from aegis_nb.testing import EventCapture
from tests.steps import ROLLED_BACK_TRAIL, Calls, Recorded

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
