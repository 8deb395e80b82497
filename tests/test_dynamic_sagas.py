"""Dynamic sagas: `engine.saga(ctx)` runs each step as the caller adds it, and ends as a list saga does.

Leaving the block commits; leaving it by an exception compensates newest first, each step with its
own output, then raises `SagaRolledBack` chained to the cause (a cancellation or an interrupt
propagates unchanged); `saga.rollback(reason)` ends it rolled back and the block leaves cleanly. A
failed step raises its own exception from `saga.step`, and code that catches it may go on. The same
steps as a list produce the same events, but for the plan `SagaStarted` names.
"""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    FailureKind,
    SagaDefinitionError,
    SagaEvent,
    SagaRolledBack,
    SagaStarted,
    SagaStatus,
    ToolTimeoutError,
    WorkflowEngine,
)
from aegis_nb.testing import EventCapture
from tests.steps import Boom, Calls, Recorded, travel

pytestmark = pytest.mark.anyio


class PricedFlight:
    """Books a flight whose price the caller reads before deciding the next step."""

    name = "flight"

    def __init__(self, calls: Calls, price_cents: int) -> None:
        self.calls, self.price_cents = calls, price_cents

    async def execute(self, ctx: AegisContext, city: str) -> AegisContext:
        self.calls.log.append(("execute", "flight", ctx))
        return ctx.with_metadata({"flight": {"city": city, "price_cents": self.price_cents}})

    async def compensate(self, ctx: AegisContext, city: str) -> None:
        self.calls.log.append(("compensate", "flight", ctx))


async def book_trip(engine: WorkflowEngine, calls: Calls, price_cents: int) -> tuple[object, AegisContext]:
    """The documentation's example: the hotel is booked only if the flight is cheap enough."""
    async with engine.saga(AegisContext({"user": "ada"}), name="trip") as saga:
        ctx = await saga.step(PricedFlight(calls, price_cents), "LIS")
        if ctx.metadata["flight"]["price_cents"] > 50_000:
            await saga.rollback("too expensive")
        else:
            ctx = await saga.step(Recorded("hotel", calls))
    return saga, saga.context


async def test_the_caller_decides_the_next_step_from_the_last_result() -> None:
    calls, capture = Calls(), EventCapture()
    saga, final = await book_trip(WorkflowEngine(sinks=[capture]), calls, price_cents=30_000)

    assert calls.trail() == [("execute", "flight"), ("execute", "hotel")]
    assert final.to_json() == {
        "user": "ada",
        "flight": {"city": "LIS", "price_cents": 30_000},
        "hotel_id": "HOTEL-1",
    }
    assert saga.run.status is SagaStatus.COMMITTED  # type: ignore[attr-defined]
    assert saga.run.context == final  # type: ignore[attr-defined]
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "hotel"),
        ("StepSucceeded", "hotel"),
        ("SagaCommitted",),
    ]
    started = capture[0]
    assert isinstance(started, SagaStarted)
    assert (started.saga, started.steps) == ("trip", ())


async def test_rollback_undoes_what_was_done_and_ends_the_saga_with_its_reason() -> None:
    calls, capture = Calls(), EventCapture()
    saga, _ = await book_trip(WorkflowEngine(sinks=[capture]), calls, price_cents=90_000)

    assert calls.trail() == [("execute", "flight"), ("compensate", "flight")]
    flight_output = calls.log[0][2].with_metadata({"flight": {"city": "LIS", "price_cents": 90_000}})
    assert calls.contexts("compensate", "flight")[0].metadata == flight_output.metadata
    run = saga.run  # type: ignore[attr-defined]
    assert run.status is SagaStatus.ROLLED_BACK
    assert (run.report.failure_kind, run.report.cause.type, run.report.cause.message) == (
        FailureKind.REQUESTED,
        "RollbackRequested",
        "too expensive",
    )
    assert run.report.compensated == ("flight",)
    assert isinstance(run.error, SagaRolledBack)
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]


async def test_after_the_saga_ended_no_step_runs_and_the_error_says_why() -> None:
    calls = Calls()
    engine = WorkflowEngine()
    async with engine.saga(name="trip") as saga:
        await saga.step(Recorded("flight", calls))
        await saga.rollback("changed my mind")
        with pytest.raises(RuntimeError) as raised:
            await saga.step(Recorded("hotel", calls))
    assert str(raised.value) == "saga 'trip' has ended (rolled_back): saga.step() cannot change it"
    with pytest.raises(RuntimeError) as raised:
        await saga.commit()
    assert str(raised.value) == "saga 'trip' has ended (rolled_back): saga.commit() cannot change it"
    assert calls.trail() == [("execute", "flight"), ("compensate", "flight")]


async def test_a_step_outside_the_block_is_refused() -> None:
    saga = WorkflowEngine().saga(name="trip")
    with pytest.raises(RuntimeError) as raised:
        await saga.step(Recorded("flight", Calls()))
    assert str(raised.value) == (
        "saga.step() outside its block: use `async with engine.saga(ctx) as saga:` first"
    )
    with pytest.raises(RuntimeError) as raised:
        saga.run  # noqa: B018
    assert str(raised.value) == "saga 'trip' has not ended: its run is known once the block is left"


async def test_leaving_by_an_exception_rolls_back_newest_first_and_chains_the_cause() -> None:
    calls = Calls()
    engine = WorkflowEngine()
    saga = engine.saga(name="trip")

    async def trip() -> None:
        async with saga:
            await saga.step(Recorded("flight", calls))
            await saga.step(Recorded("hotel", calls))
            raise ValueError("the user closed the tab")

    with pytest.raises(SagaRolledBack) as raised:
        await trip()
    assert str(raised.value) == "saga 'trip': the user closed the tab — rolled back: hotel, flight"
    assert isinstance(raised.value.__cause__, ValueError)
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "hotel"),
        ("compensate", "hotel"),
        ("compensate", "flight"),
    ]
    # Each compensation gets what its own execute returned.
    assert calls.contexts("compensate", "hotel")[0].to_json() == {
        "flight_id": "FLIGHT-0",
        "hotel_id": "HOTEL-1",
    }
    assert calls.contexts("compensate", "flight")[0].to_json() == {"flight_id": "FLIGHT-0"}
    assert saga.run.error is raised.value


async def test_a_failed_step_raises_its_own_error_and_code_that_catches_it_goes_on() -> None:
    calls, capture = Calls(), EventCapture()
    async with WorkflowEngine(sinks=[capture]).saga(name="trip") as saga:
        await saga.step(Recorded("flight", calls))
        with pytest.raises(Boom, match="no rooms"):
            await saga.step(Recorded("hotel", calls, fail="no rooms"))
        await saga.step(Recorded("hostel", calls))
    assert saga.run.status is SagaStatus.COMMITTED
    assert saga.context.to_json() == {"flight_id": "FLIGHT-0", "hostel_id": "HOSTEL-2"}
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "hotel"),
        ("StepFailed", "hotel"),
        ("StepStarted", "hostel"),
        ("StepSucceeded", "hostel"),
        ("SagaCommitted",),
    ]


async def test_a_caught_in_doubt_failure_is_compensated_in_its_place_if_the_saga_later_fails() -> None:
    calls = Calls()
    saga = WorkflowEngine().saga(name="trip")

    async def trip() -> None:
        async with saga:
            await saga.step(Recorded("flight", calls))
            with pytest.raises(Boom):
                await saga.step(Recorded("hotel", calls, fail="timed out after booking", in_doubt=True))
            await saga.step(Recorded("hostel", calls))
            await saga.step(Recorded("card", calls, fail="declined"))

    with pytest.raises(SagaRolledBack):
        await trip()
    assert calls.trail()[4:] == [
        ("compensate", "hostel"),
        ("compensate", "hotel"),
        ("compensate", "flight"),
    ]
    # The in-doubt step is undone with the context it was given: it returned none.
    (undo,), (given,) = calls.contexts("compensate", "hotel"), calls.contexts("execute", "hotel")
    assert (undo.metadata, undo.idempotency_key) == (given.metadata, given.idempotency_key)


async def test_commit_ends_the_saga_early_and_nothing_later_undoes_it() -> None:
    calls = Calls()
    async with WorkflowEngine().saga(name="trip") as saga:
        await saga.step(Recorded("flight", calls))
        await saga.commit()
        assert saga.run.status is SagaStatus.COMMITTED
    assert calls.trail() == [("execute", "flight")]


async def test_an_error_after_an_early_end_is_the_codes_own_and_undoes_nothing() -> None:
    calls = Calls()
    saga = WorkflowEngine().saga(name="trip")

    async def trip() -> None:
        async with saga:
            await saga.step(Recorded("flight", calls))
            await saga.commit()
            raise ValueError("later")

    with pytest.raises(ValueError, match="later"):
        await trip()
    assert calls.trail() == [("execute", "flight")]
    assert saga.run.status is SagaStatus.COMMITTED


async def test_a_cancellation_propagates_unchanged_after_the_rollback() -> None:
    calls = Calls()
    engine = WorkflowEngine()
    started = anyio.Event()
    saga_seen = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tasks:

            async def trip() -> None:
                async with engine.saga(name="trip") as saga:
                    saga_seen.append(saga)
                    await saga.step(Recorded("flight", calls))
                    await saga.step(Recorded("hotel", calls, hang=True, on_execute=started.set))

            tasks.start_soon(trip)
            await started.wait()
            scope.cancel()
    assert scope.cancelled_caught
    (saga,) = saga_seen
    assert calls.trail() == [("execute", "flight"), ("execute", "hotel"), ("compensate", "flight")]
    assert saga.run.status is SagaStatus.ROLLED_BACK
    assert saga.run.report.failure_kind is FailureKind.CANCELLED


async def test_an_interrupt_propagates_unchanged_after_the_rollback() -> None:
    calls = Calls()

    def interrupt() -> None:
        raise KeyboardInterrupt

    saga = WorkflowEngine().saga(name="trip")

    async def trip() -> None:
        async with saga:
            await saga.step(Recorded("flight", calls))
            await saga.step(Recorded("hotel", calls, on_execute=interrupt))

    with pytest.raises(KeyboardInterrupt):
        await trip()
    assert calls.trail() == [("execute", "flight"), ("execute", "hotel"), ("compensate", "flight")]
    assert saga.run.report.failure_kind is FailureKind.INTERRUPTED


class SpendsTheBudget:
    """A step whose output leaves no time: the saga's deadline is now."""

    name = "quote"

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_deadline(anyio.current_time())

    async def compensate(self, ctx: AegisContext) -> None:
        pass


async def test_a_step_past_the_deadline_is_not_run_and_the_saga_rolls_back() -> None:
    calls = Calls()
    saga = WorkflowEngine().saga(AegisContext(deadline=anyio.current_time() + 60), name="trip")

    async def trip() -> None:
        async with saga:
            await saga.step(Recorded("flight", calls))
            await saga.step(SpendsTheBudget())
            await saga.step(Recorded("hotel", calls))

    with pytest.raises(SagaRolledBack) as raised:
        await trip()
    cause = raised.value.__cause__
    assert isinstance(cause, ToolTimeoutError)
    assert cause.step == "hotel"
    assert str(cause).endswith("; it was not run")
    assert calls.trail() == [("execute", "flight"), ("compensate", "flight")]
    assert saga.run.report.failure_kind is FailureKind.TIMEOUT


async def test_a_bad_step_is_refused_before_anything_runs_and_the_saga_stays_open() -> None:
    calls = Calls()

    class Sync:
        def execute(self, ctx: AegisContext) -> None: ...

        def compensate(self, ctx: AegisContext) -> None: ...

    async with WorkflowEngine().saga(name="trip") as saga:
        with pytest.raises(SagaDefinitionError) as raised:
            await saga.step(Sync())
        await saga.step(Recorded("flight", calls))
    assert str(raised.value) == (
        "saga entry 0 (Sync): execute must be `async def` "
        "(a sync function cannot be cancelled at its deadline)"
    )
    assert saga.run.status is SagaStatus.COMMITTED
    assert calls.trail() == [("execute", "flight")]


async def test_repeated_names_keep_the_first_and_number_the_repeats() -> None:
    calls, capture = Calls(), EventCapture()
    async with WorkflowEngine(sinks=[capture]).saga(name="trip") as saga:
        for _ in range(3):
            await saga.step(Recorded("hotel", calls))
    assert [e[1] for e in capture.trail() if e[0] == "StepSucceeded"] == ["hotel", "hotel#2", "hotel#3"]


def comparable(events: list[SagaEvent]) -> list[SagaEvent]:
    """Events without what differs between two runs of the same steps: run id, times, the plan."""
    plain = []
    for event in events:
        changes: dict[str, object] = {"run_id": "", "time": 0.0}
        if isinstance(event, SagaStarted):
            changes["steps"] = ()
        for field in ("duration", "context", "report"):
            if hasattr(event, field):
                changes[field] = None
        plain.append(dataclasses.replace(event, **changes))  # type: ignore[arg-type]
    return plain


@pytest.mark.parametrize("failing", [None, "card"])
async def test_a_list_and_the_same_steps_added_one_by_one_produce_the_same_events(
    failing: str | None,
) -> None:
    listed, dynamic = EventCapture(), EventCapture()
    engine = WorkflowEngine()
    card = {"fail": "declined"} if failing else {}
    await engine.run_saga(travel(Calls(), **card), sinks=[listed], name="trip")
    try:
        async with engine.saga(name="trip", sinks=[dynamic]) as saga:
            for step in travel(Calls(), **card):
                await saga.step(step)
    except SagaRolledBack:
        pass
    assert comparable(dynamic) == comparable(listed)
    assert isinstance(listed[0], SagaStarted)
    assert listed[0].steps == ("flight", "hotel", "card")
