"""Statements of the spec that no other test pinned down, and the combinations around them.

Sinks that raise on a step's or a compensation's event; a step handing back another run's context;
the rollback's journal writes under a cancelled caller; event durations; a native task cancel during
a step; step timeouts under a saga deadline; compensations that time out, or back off while the
caller is cancelled; nested sagas; one step in two sagas at once; huge sagas. (The drawn error tree
is tests/test_error_tree.py's.)
"""

from __future__ import annotations

import asyncio
import logging

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    RetryPolicy,
    SagaEvent,
    SagaRolledBack,
    SagaRolledBackEvent,
    SagaStarted,
    StepFailed,
    StepStarted,
    StepSucceeded,
    ToolExecutor,
    ToolTimeoutError,
    WorkflowEngine,
)
from aegis_nb.testing import EventCapture
from tests.steps import ROLLED_BACK_TRAIL, Calls, CheckpointingJournal, Recorded

pytestmark = pytest.mark.anyio


def travel(calls: Calls, **card: object) -> list[Recorded]:
    return [Recorded("flight", calls), Recorded("hotel", calls), Recorded("card", calls, **card)]  # type: ignore[arg-type]


# -- sinks -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("raises_on", ["StepStarted", "StepSucceeded", "CompensationStarted"])
async def test_a_sink_raising_on_a_step_or_compensation_event_is_called_no_more_in_that_run(
    raises_on: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The engine publishes these events inline, each loop holding the sinks in a local.
    seen: list[str] = []

    def broken(event: SagaEvent) -> None:
        seen.append(type(event).__name__)
        if seen[-1] == raises_on:
            raise RuntimeError("sink bug")

    capture = EventCapture()
    with caplog.at_level(logging.ERROR, logger="aegis_nb.saga"):
        run = await WorkflowEngine(sinks=[broken, capture]).run_saga(travel(Calls(), fail="no"))
    trail = [name for name, *_ in ROLLED_BACK_TRAIL]
    assert seen == trail[: trail.index(raises_on) + 1]
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert list(run.events) == list(capture)
    assert [r.getMessage() for r in caplog.records] == [
        f"event sink {broken!r} raised on {raises_on} and was detached; the saga goes on"
    ]


# -- contexts and idempotency keys -------------------------------------------------------------------


async def test_a_step_returning_another_runs_context_gets_this_runs_key_and_its_own_snapshot() -> None:
    other = (await WorkflowEngine().run_saga([Recorded("elsewhere", Calls())], run_id="other-run")).context
    assert other is not None
    adopted: AegisContext = other
    assert adopted.idempotency_key == "other-run/0"
    calls = Calls()

    class Adopts(Recorded):
        async def execute(self, ctx: AegisContext) -> AegisContext:
            await super().execute(ctx)
            return adopted

    steps = [Recorded("flight", calls), Adopts("hotel", calls), Recorded("card", calls, fail="no")]
    run = await WorkflowEngine().run_saga(steps, AegisContext({"user": "ada"}), run_id="run-1")
    assert run.report.compensated == ("hotel", "flight")
    (hotel_undo,) = calls.contexts("compensate", "hotel")
    assert (hotel_undo.idempotency_key, hotel_undo.to_json()) == ("run-1/1", {"elsewhere_id": "ELSEWHERE-0"})
    (card_input,) = calls.contexts("execute", "card")
    assert card_input.idempotency_key == "run-1/2"
    succeeded = [e.context.idempotency_key for e in run.events if isinstance(e, StepSucceeded)]
    assert succeeded == ["run-1/0", "run-1/1"]


async def test_without_a_context_the_saga_starts_from_an_empty_one_keyed_by_the_run() -> None:
    calls = Calls()
    final = await WorkflowEngine().execute_saga([Recorded("flight", calls)], None)
    (given,) = calls.contexts("execute", "flight")
    assert (given.to_json(), given.deadline, given.idempotency_key) == ({}, float("inf"), f"{given.run_id}/0")
    assert final.to_json() == {"flight_id": "FLIGHT-0"}


# -- journal writes under a cancelled caller ---------------------------------------------------------


async def test_the_failure_and_the_rollback_are_journaled_in_full_when_the_caller_is_cancelled() -> None:
    journal, calls = CheckpointingJournal(), Calls()
    with anyio.CancelScope() as scope:
        await WorkflowEngine(journal=journal).run_saga(travel(calls, hang=True, on_execute=scope.cancel))
    assert scope.cancelled_caught
    (run_id,) = journal.run_ids()
    assert [type(e).__name__ for e in journal.events(run_id)] == [name for name, *_ in ROLLED_BACK_TRAIL]


# -- event fields ------------------------------------------------------------------------------------


class Slow(Recorded):
    """Its execute and compensate each take a clock tick (no sleep: they wait for the clock to move)."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        await tick()
        return await super().execute(ctx)

    async def compensate(self, ctx: AegisContext) -> None:
        await tick()
        await super().compensate(ctx)


async def tick() -> None:
    start = anyio.current_time()
    while anyio.current_time() == start:
        await anyio.lowlevel.checkpoint()


async def test_event_durations_are_the_clock_time_each_call_took() -> None:
    capture, calls = EventCapture(), Calls()
    steps = [
        Slow("flight", calls),
        Slow("hotel", calls, compensation_failures=1),
        Slow("card", calls, fail="no"),
    ]
    with pytest.raises(SagaRolledBack):
        await WorkflowEngine(sinks=[capture], compensation_retry=RetryPolicy(2, 0)).execute_saga(steps)
    began: dict[tuple[str, str], float] = {}
    checked = []
    for event in capture:
        match event:
            case StepStarted() | CompensationStarted():
                began[event.step, "step" if isinstance(event, StepStarted) else "undo"] = event.time
            case StepSucceeded() | CompensationSucceeded():
                kind = "step" if isinstance(event, StepSucceeded) else "undo"
                assert event.duration == pytest.approx(event.time - began[event.step, kind], abs=1e-9)
                assert event.duration > 0
                checked.append(type(event).__name__)
            case StepFailed() | CompensationFailed():
                kind = "step" if isinstance(event, StepFailed) else "undo"
                assert 0 < event.duration <= event.time - began[event.step, kind] + 1e-9
                checked.append(type(event).__name__)
    assert checked == [
        "StepSucceeded",
        "StepSucceeded",
        "StepFailed",
        "CompensationFailed",
        "CompensationSucceeded",
        "CompensationSucceeded",
    ]


# -- cancellation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # Task.cancel() is asyncio's own
async def test_a_native_task_cancel_during_a_step_rolls_back_then_cancels_the_task_with_its_message() -> None:
    calls, capture, card_started = Calls(), EventCapture(), asyncio.Event()
    saga = WorkflowEngine(sinks=[capture]).run_saga(travel(calls, hang=True, on_execute=card_started.set))
    task = asyncio.create_task(saga)
    await card_started.wait()
    task.cancel("the client went away")
    with pytest.raises(asyncio.CancelledError) as raised:
        await task
    assert task.cancelled()
    assert raised.value.args == ("the client went away",)
    assert capture.trail() == ROLLED_BACK_TRAIL


async def test_a_caller_cancelled_during_a_compensations_backoff_still_gets_the_retry_and_the_rest() -> None:
    calls, capture = Calls(), EventCapture()
    scope = anyio.CancelScope()

    def cancel_on_failed_undo(event: SagaEvent) -> None:
        capture(event)
        if isinstance(event, CompensationFailed):
            scope.cancel()  # lands on the backoff sleep that follows

    steps = travel(calls, fail="no")
    steps[1].compensation_failures = 1
    engine = WorkflowEngine(sinks=[cancel_on_failed_undo], compensation_retry=RetryPolicy(3, 0.01))
    with scope:
        run = await engine.run_saga(steps)
        await anyio.lowlevel.checkpoint()  # the cancellation is still there for the caller
        pytest.fail("the cancellation should have reached the caller")
    assert scope.cancelled_caught
    assert run.report.compensated == ("hotel", "flight")
    assert capture.trail() == [
        *ROLLED_BACK_TRAIL[:7],
        ("CompensationStarted", "hotel"),
        ("CompensationFailed", "hotel"),
        *ROLLED_BACK_TRAIL[7:],
    ]


# -- deadlines ---------------------------------------------------------------------------------------


async def test_a_step_timeout_under_a_saga_deadline_fails_that_step_and_the_next_gets_the_saga_deadline() -> (
    None
):
    calls, capture = Calls(), EventCapture()
    ctx = AegisContext().with_timeout(60)
    steps = [Recorded("flight", calls, timeout=30), Recorded("hotel", calls, hang=True, timeout=0.02)]
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga(steps, ctx)
    error = raised.value.__cause__
    assert isinstance(error, ToolTimeoutError)
    assert error.step == "hotel"
    assert error.budget == pytest.approx(0.02)
    assert capture.trail()[-4:] == [
        ("StepTimedOut", "hotel"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    # The flight's own timeout ended with it: the hotel was cut off by its own, not the flight's.
    (hotel_input,) = calls.contexts("execute", "hotel")
    assert hotel_input.deadline == ctx.deadline


async def test_a_compensation_that_honours_its_deadline_times_out_and_is_retried_with_a_fresh_one() -> None:
    calls, capture, budgets = Calls(), EventCapture(), []

    class HangsOnce(Recorded):
        async def compensate(self, ctx: AegisContext) -> None:
            budgets.append(ctx.deadline)
            await super().compensate(ctx)
            if len(budgets) == 1:
                await ToolExecutor().run(ctx, anyio.sleep_forever)

    steps = [HangsOnce("flight", calls), Recorded("card", calls, fail="no")]
    engine = WorkflowEngine(sinks=[capture], compensation_budget=0.02, compensation_retry=RetryPolicy(2, 0))
    with pytest.raises(SagaRolledBack):
        await engine.execute_saga(steps)
    assert capture.trail()[-5:] == [
        ("CompensationStarted", "flight"),
        ("CompensationFailed", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    failed = next(e for e in capture if isinstance(e, CompensationFailed))
    assert failed.error.type == "ToolTimeoutError"
    assert budgets[1] > budgets[0]  # a fresh deadline, not the one that ran out


# -- sagas in sagas, steps in two sagas, size ---------------------------------------------------------


async def test_a_step_that_runs_a_saga_is_undone_with_what_the_inner_saga_produced() -> None:
    calls, inner = Calls(), WorkflowEngine()

    class Package(Recorded):
        async def execute(self, ctx: AegisContext) -> AegisContext:
            self.calls.log.append(("execute", self.name, ctx))
            return await inner.execute_saga([Recorded("flight", calls), Recorded("hotel", calls)], ctx)

    steps = [Recorded("insurance", calls), Package("package", calls), Recorded("card", calls, fail="no")]
    run = await WorkflowEngine().run_saga(steps, run_id="outer")
    assert run.report.compensated == ("package", "insurance")
    (undo,) = calls.contexts("compensate", "package")
    assert undo.idempotency_key == "outer/1"
    assert undo.to_json() == {"insurance_id": "INSURANCE-0", "flight_id": "FLIGHT-0", "hotel_id": "HOTEL-1"}


async def test_an_inner_saga_that_rolls_back_fails_its_step_and_the_outer_saga_rolls_back() -> None:
    calls, inner = Calls(), WorkflowEngine()

    class Package(Recorded):
        async def execute(self, ctx: AegisContext) -> AegisContext:
            return await inner.execute_saga(
                [Recorded("flight", calls), Recorded("hotel", calls, fail="full")], ctx
            )

    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine().execute_saga([Recorded("insurance", calls), Package("package", calls)])
    assert raised.value.report.compensated == ("insurance",)
    inner_error = raised.value.__cause__
    assert isinstance(inner_error, SagaRolledBack)
    assert inner_error.report.compensated == ("flight",)
    assert calls.trail() == [
        ("execute", "insurance"),
        ("execute", "flight"),
        ("execute", "hotel"),
        ("compensate", "flight"),
        ("compensate", "insurance"),
    ]


async def test_one_step_object_in_two_concurrent_sagas_keeps_each_runs_keys_and_snapshots() -> None:
    calls = Calls()
    shared = Recorded("flight", calls)
    both_started = [anyio.Event(), anyio.Event()]

    class Waits(Recorded):
        def __init__(self, name: str, mine: anyio.Event, theirs: anyio.Event, fail: str | None) -> None:
            super().__init__(name, calls, fail=fail)
            self.mine, self.theirs = mine, theirs

        async def execute(self, ctx: AegisContext) -> AegisContext:
            self.mine.set()
            await self.theirs.wait()  # both runs are past the shared step before either goes on
            return await super().execute(ctx)

    runs = {}

    async def run(run_id: str, mine: int, fail: str | None) -> None:
        steps = [shared, Waits("card", both_started[mine], both_started[1 - mine], fail)]
        runs[run_id] = await WorkflowEngine().run_saga(steps, AegisContext({"who": run_id}), run_id=run_id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "a", 0, "no")
        tg.start_soon(run, "b", 1, None)
    assert (runs["a"].ok, runs["b"].ok) == (False, True)
    (undo,) = calls.contexts("compensate", "flight")
    assert (undo.idempotency_key, undo.to_json()) == ("a/0", {"who": "a", "flight_id": "FLIGHT-0"})
    assert runs["b"].context is not None
    assert runs["b"].context.to_json() == {"who": "b", "flight_id": "FLIGHT-0", "card_id": "CARD-1"}


async def test_a_huge_saga_is_undone_in_full_newest_first() -> None:
    calls, capture = Calls(), EventCapture()
    steps = [Recorded(f"s{i}", calls) for i in range(3000)]
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga([*steps, Recorded("last", calls, fail="no")])
    assert raised.value.report.compensated == tuple(f"s{i}" for i in reversed(range(3000)))
    assert [e.seq for e in capture] == list(range(len(capture)))
    assert isinstance(capture[0], SagaStarted)
    assert isinstance(capture[-1], SagaRolledBackEvent)
    undone = [(ctx.step_index, len(ctx.metadata)) for what, _, ctx in calls.log if what == "compensate"]
    assert undone == [(i, i + 1) for i in reversed(range(3000))]
