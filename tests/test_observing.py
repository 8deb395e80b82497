"""Observing runs: subscribe/unsubscribe, the async event stream, secrets kept out of every event.

Leaving the event stream while a saga runs is quiet: its next event meets a closed stream, logged at debug.
"""

from __future__ import annotations

import logging

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    SagaCompensationFailed,
    SagaRolledBack,
    Secret,
    StepSucceeded,
    WorkflowEngine,
    describe,
    step,
)
from aegis_nb.saga import SagaEvent
from aegis_nb.testing import EventCapture, outline
from tests.steps import Calls, Recorded

pytestmark = pytest.mark.anyio


async def test_unsubscribed_sinks_see_nothing_more() -> None:
    capture = EventCapture()
    engine = WorkflowEngine()
    engine.subscribe(capture)
    await engine.execute_saga([Recorded("flight", Calls())])
    engine.unsubscribe(capture)
    await engine.execute_saga([Recorded("flight", Calls())])
    assert len(capture) == 4


async def test_per_run_sinks_see_only_their_run() -> None:
    engine, first = WorkflowEngine(), EventCapture()
    run = await engine.run_saga([Recorded("flight", Calls())], sinks=[first])
    await engine.run_saga([Recorded("flight", Calls())])
    assert {e.run_id for e in first} == {run.run_id}


async def test_the_event_stream_delivers_every_event_in_order() -> None:
    engine = WorkflowEngine()
    received: list[SagaEvent] = []
    async with engine.event_stream() as events:
        run = await engine.run_saga([Recorded("flight", Calls()), Recorded("hotel", Calls(), fail="x")])
        async for event in events:
            received.append(event)
            if event.seq == len(run.events) - 1:
                break
    assert tuple(received) == run.events


async def test_secrets_stay_out_of_events_errors_and_traces() -> None:
    card = "4111-1111-1111-1111"

    @step
    async def charge(ctx: AegisContext) -> AegisContext:
        raise RuntimeError(f"card {ctx.metadata['card'].reveal()} declined")

    @charge.compensation
    async def refund(ctx: AegisContext) -> None:
        return None

    @step(name="Hold")
    async def hold(ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"hold": "H1"})

    @hold.compensation
    async def release(ctx: AegisContext) -> None:
        raise RuntimeError(f"cannot release hold for {ctx.metadata['card'].reveal()}")

    capture = EventCapture()
    engine = WorkflowEngine(sinks=[capture])
    with pytest.raises(SagaCompensationFailed) as raised:
        await engine.execute_saga([hold, charge], AegisContext({"card": Secret(card)}))
    shown = [repr(e) for e in capture] + [describe(e) for e in capture] + [str(raised.value)]
    assert not [text for text in shown if card in text]
    assert "card *** declined" in str(raised.value)
    assert [outline(e) for e in capture][-3:] == [
        ("CompensationStarted", "Hold"),
        ("CompensationFailed", "Hold"),
        ("SagaStuck",),
    ]


async def test_function_steps_execute_and_compensate_with_arguments() -> None:
    log: list[tuple[str, object]] = []

    @step(name="BookFlight")
    async def book(ctx: AegisContext, destination: str, *, seats: int) -> AegisContext:
        log.append(("book", (destination, seats)))
        return ctx.with_metadata({"flight_id": f"F-{destination}"})

    @book.compensation
    async def cancel(ctx: AegisContext, destination: str, *, seats: int) -> None:
        log.append(("cancel", ctx.metadata["flight_id"]))

    @step(read_only=True)
    async def check_weather(ctx: AegisContext) -> None:
        raise RuntimeError("storm")

    with pytest.raises(SagaRolledBack):
        await WorkflowEngine().execute_saga([(book, ("LIS",), {"seats": 2}), check_weather])
    assert log == [("book", ("LIS", 2)), ("cancel", "F-LIS")]
    assert book.name == "BookFlight"
    assert repr(book) == "<step BookFlight>"


async def test_events_carry_times_on_the_loop_clock() -> None:
    capture = EventCapture()
    before = anyio.current_time()
    await WorkflowEngine(sinks=[capture]).execute_saga([Recorded("flight", Calls())])
    after = anyio.current_time()
    times = [e.time for e in capture]
    assert times == sorted(times)
    assert before <= times[0]
    assert times[-1] <= after


async def test_a_raising_sink_subscribed_twice_is_detached_and_the_saga_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: SagaEvent) -> None:
        raise RuntimeError("broken widget")

    engine, capture = WorkflowEngine(sinks=[broken]), EventCapture()
    run = await engine.run_saga([Recorded("flight", Calls())], sinks=[broken, capture])
    assert run.ok
    assert [outline(event) for event in capture] == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("SagaCommitted",),
    ]
    assert [record.getMessage() for record in caplog.records] == [
        f"event sink {broken!r} raised on SagaStarted and was detached; the saga goes on"
    ]


async def test_a_bound_method_can_be_unsubscribed(caplog: pytest.LogCaptureFixture) -> None:
    class Panel:
        def __init__(self) -> None:
            self.seen: list[SagaEvent] = []

        def show(self, event: SagaEvent) -> None:
            self.seen.append(event)

    engine, panel = WorkflowEngine(), Panel()
    engine.subscribe(panel.show)
    first = await engine.run_saga([Recorded("flight", Calls())])
    engine.unsubscribe(panel.show)
    async with engine.event_stream():
        pass
    await engine.run_saga([Recorded("flight", Calls())])  # no sink left: neither the panel nor the stream
    assert tuple(panel.seen) == first.events
    assert caplog.records == []


async def test_unsubscribing_one_sink_leaves_an_equal_one_and_a_bound_builtin_can_go() -> None:
    appended: list[SagaEvent]
    engine, audit, scratch, appended = WorkflowEngine(), EventCapture(), EventCapture(), []
    for sink in (audit, scratch, appended.append):
        engine.subscribe(sink)
    first = await engine.run_saga([Recorded("flight", Calls())])
    assert audit == scratch  # equal lists, yet two sinks
    engine.unsubscribe(scratch)
    engine.unsubscribe(appended.append)
    second = await engine.run_saga([Recorded("flight", Calls())])
    assert tuple(audit) == first.events + second.events
    assert tuple(scratch) == tuple(appended) == first.events


class WaitsFor(Recorded):
    def __init__(self, name: str, calls: Calls, event: anyio.Event) -> None:
        super().__init__(name, calls)
        self.event = event

    async def execute(self, ctx: AegisContext) -> AegisContext:
        await self.event.wait()
        return await super().execute(ctx)


# Regression guard: leaving an event stream mid-run logs no error (only a debug line).
async def test_leaving_an_event_stream_while_a_saga_runs_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls, engine, left, seen = Calls(), WorkflowEngine(), anyio.Event(), []
    runs: list[object] = []

    async def run() -> None:
        runs.append(await engine.run_saga([Recorded("flight", calls), WaitsFor("hotel", calls, left)]))

    with caplog.at_level(logging.DEBUG, logger="aegis_nb.saga"):
        async with anyio.create_task_group() as tasks:
            async with engine.event_stream() as events:
                tasks.start_soon(run)
                async for event in events:
                    seen.append(type(event).__name__)
                    if isinstance(event, StepSucceeded):
                        break
            left.set()  # the saga goes on, and its next event meets the closed stream
    assert seen == ["SagaStarted", "StepStarted", "StepSucceeded"]
    assert [record.levelno for record in caplog.records] == [logging.DEBUG]
    assert runs[0].ok  # type: ignore[attr-defined]
