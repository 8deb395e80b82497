"""Forward: steps run in order, each given the context the previous one returned, under its deadline.

A step returns a new context or None (unchanged), and anything else fails it; its idempotency key is
the run's and its position's, in execute and compensate alike; it cannot lengthen the deadline, and
past the deadline it times out and the steps before it are undone; a step that overran its timeout
in a shield leaves the next step its own time.
"""

from __future__ import annotations

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    SagaRolledBack,
    SagaStatus,
    StepResultError,
    StepTimedOut,
    ToolTimeoutError,
    WorkflowEngine,
)
from aegis_nb.testing import EventCapture
from tests.steps import Calls, Recorded, travel

pytestmark = pytest.mark.anyio


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


async def test_execute_returning_none_passes_the_context_on_unchanged() -> None:
    class Nothing:
        async def execute(self, ctx: AegisContext) -> None:
            return None

        async def compensate(self, ctx: AegisContext) -> None:
            return None

    final = await WorkflowEngine().execute_saga([Nothing()], AegisContext({"k": 1}))
    assert final.to_json() == {"k": 1}


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


async def test_idempotency_key_is_the_same_in_execute_and_compensate() -> None:
    calls = Calls()
    engine = WorkflowEngine()
    run = await engine.run_saga(travel(calls, fail="no"), run_id="run-1")
    assert run.status is SagaStatus.ROLLED_BACK
    for name, position in (("flight", 0), ("hotel", 1)):
        (executed,) = calls.contexts("execute", name)
        (compensated,) = calls.contexts("compensate", name)
        assert executed.idempotency_key == compensated.idempotency_key == f"run-1/{position}"


async def test_a_step_cannot_lengthen_the_deadline() -> None:
    class Lengthens:
        async def execute(self, ctx: AegisContext) -> AegisContext:
            return AegisContext({"fresh": True})  # no deadline at all

        async def compensate(self, ctx: AegisContext) -> None:
            return None

    ctx = AegisContext().with_timeout(30)
    final = await WorkflowEngine().execute_saga([Lengthens()], ctx)
    assert final.deadline == ctx.deadline


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
        ("SagaRolledBackEvent",),
    ]
    timed_out = next(e for e in capture if isinstance(e, StepTimedOut))
    assert timed_out.time >= ctx.deadline
    assert 0.05 <= elapsed < 1.0  # loose: the deadline fires, not a hang


class FinishesInAShield(Recorded):
    """Finishes its work shielded, past its own timeout (a commit it must not abandon halfway).

    It awaits nothing after the shield, so nothing of its own notices the deadline.
    """

    async def execute(self, ctx: AegisContext) -> AegisContext:
        assert self.timeout is not None
        with anyio.CancelScope(shield=True):
            with anyio.CancelScope(deadline=anyio.current_time() + 2 * self.timeout):
                await anyio.sleep_forever()
            return await super().execute(ctx)
        raise AssertionError("unreachable: nothing cancels the shielded scope, so it swallows nothing")


# Regression guard: a step that overran its timeout in a shield does not time out the next step.
async def test_a_step_finishing_past_its_timeout_in_a_shield_leaves_the_next_step_its_time() -> None:
    calls, capture = Calls(), EventCapture()
    saga = [FinishesInAShield("flight", calls, timeout=0.01), Recorded("hotel", calls)]
    run = await WorkflowEngine(sinks=[capture]).run_saga(saga, AegisContext().with_timeout(60))
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "hotel"),
        ("StepSucceeded", "hotel"),
        ("SagaCommitted",),
    ]
    assert run.context is not None
    assert run.context.metadata == {
        "flight_id": "FLIGHT-0",
        "hotel_id": "HOTEL-1",
    }
