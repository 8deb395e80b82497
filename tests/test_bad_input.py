"""Bad saga definitions fail before anything runs, with a message that names the culprit."""

from __future__ import annotations

import logging

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    SagaDefinitionError,
    SagaRolledBack,
    ToolTimeoutError,
    WorkflowEngine,
    step,
)
from aegis_nb.testing import EventCapture
from tests.steps import Calls, Recorded

pytestmark = pytest.mark.anyio


class NoCompensate:
    async def execute(self, ctx: AegisContext) -> None:
        return None


class SyncExecute:
    def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class SyncCompensate:
    async def execute(self, ctx: AegisContext) -> None:
        return None

    def compensate(self, ctx: AegisContext) -> None:
        return None


def flight(calls: Calls) -> Recorded:
    return Recorded("flight", calls)


class Plain:
    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        return None


def replacing(step: object, method: str) -> object:
    """`step` with one of its methods replaced, on the instance only, by a sync function."""
    setattr(step, method, lambda ctx: None)
    return step


@pytest.mark.parametrize(
    ("make_saga", "message"),
    [
        (
            lambda c: [flight(c), object()],
            "saga entry 1 (object): a step needs async execute(ctx, ...) and has no execute",
        ),
        (
            lambda c: [flight(c), NoCompensate()],
            "saga entry 1 (NoCompensate): a step needs async compensate(ctx, ...) and has no compensate",
        ),
        (
            lambda c: [flight(c), SyncExecute()],
            "saga entry 1 (SyncExecute): execute must be `async def` "
            "(a sync function cannot be cancelled at its deadline)",
        ),
        (
            lambda c: [flight(c), SyncCompensate()],
            "saga entry 1 (SyncCompensate): compensate must be `async def` "
            "(a sync function cannot be cancelled at its deadline)",
        ),
        (
            lambda c: [flight(c), (flight(c), ())],
            "saga entry 1: expected (step, args, kwargs), got a tuple of 2 item(s)",
        ),
        (lambda c: [(flight(c), "LIS", {})], "saga entry 0 (flight): args must be a tuple or list, got str"),
        (
            lambda c: [(flight(c), (), [("k", 1)])],
            "saga entry 0 (flight): kwargs must be a mapping, got list",
        ),
        (lambda c: [(flight(c), (), {1: "x"})], "saga entry 0 (flight): kwargs keys must be str"),
        # Classes are checked once per saga; an instance replacing a method is still caught.
        (
            lambda c: [Plain(), replacing(Plain(), "execute")],
            "saga entry 1 (Plain): execute must be `async def` "
            "(a sync function cannot be cancelled at its deadline)",
        ),
        (
            lambda c: [flight(c), (replacing(flight(c), "compensate"), (), {})],
            "saga entry 1 (flight): compensate must be `async def` "
            "(a sync function cannot be cancelled at its deadline)",
        ),
        (lambda c: [], "the saga has no steps: there is nothing to run or undo"),
        (lambda c: flight(c), "a saga is a list of steps or (step, args, kwargs) tuples, got Recorded"),
    ],
)
async def test_malformed_sagas_are_rejected_before_any_step_runs(make_saga: object, message: str) -> None:
    calls, capture = Calls(), EventCapture()
    with pytest.raises(SagaDefinitionError) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga(make_saga(calls))  # type: ignore[operator]
    assert str(raised.value) == message
    assert calls.log == []
    assert capture.events == []


async def test_bad_step_options_are_rejected() -> None:
    calls = Calls()
    bad_timeout = Recorded("flight", calls)
    bad_timeout.timeout = -1
    with pytest.raises(SagaDefinitionError, match=r"saga entry 0 \(flight\): timeout must be a positive"):
        await WorkflowEngine().execute_saga([bad_timeout])
    bad_retry = Recorded("flight", calls, retry=3)  # type: ignore[arg-type]
    with pytest.raises(SagaDefinitionError, match="compensation_retry must be a RetryPolicy, got int"):
        await WorkflowEngine().execute_saga([bad_retry])
    assert calls.log == []


async def test_a_context_that_is_not_an_aegis_context_is_rejected() -> None:
    with pytest.raises(SagaDefinitionError, match="ctx must be an AegisContext, got dict"):
        await WorkflowEngine().execute_saga([flight(Calls())], {"k": 1})  # type: ignore[arg-type]


async def test_a_deadline_already_past_runs_nothing_and_raises_tool_timeout() -> None:
    calls, capture = Calls(), EventCapture()
    ctx = AegisContext(deadline=anyio.current_time() - 0.5)
    with pytest.raises(ToolTimeoutError) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga([flight(calls)], ctx, name="late")
    assert str(raised.value).endswith("saga 'late' did not start, no step ran and nothing needs undoing")
    assert calls.log == []
    assert capture.events == []


async def test_a_function_step_without_compensation_is_rejected_up_front() -> None:
    @step
    async def book_flight(ctx: AegisContext) -> None:
        raise AssertionError("must not run")

    with pytest.raises(SagaDefinitionError) as raised:
        await WorkflowEngine().execute_saga([book_flight])
    assert str(raised.value) == (
        "saga entry 0 (book_flight): the step has no compensation; attach one with "
        "@book_flight.compensation, or declare it @step(read_only=True) if it changes nothing"
    )


def test_function_steps_must_be_async() -> None:
    with pytest.raises(SagaDefinitionError, match="execute must be an `async def` function"):
        step(lambda ctx: None)  # type: ignore[arg-type, return-value]


async def test_a_sink_that_raises_is_detached_and_logged_and_the_saga_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    def broken(event: object) -> None:
        seen.append(type(event).__name__)
        raise RuntimeError("sink bug")

    capture = EventCapture()
    engine = WorkflowEngine(sinks=[broken, capture])
    with caplog.at_level(logging.ERROR, logger="aegis_nb.saga"):
        await engine.execute_saga([flight(Calls())])
        await engine.execute_saga([flight(Calls())])
    assert seen == ["SagaStarted"]  # detached after its first failure, for good
    assert len(capture) == 8
    assert [r.getMessage() for r in caplog.records] == [
        f"event sink {broken!r} raised on SagaStarted and was detached; the saga goes on"
    ]


async def test_a_sink_object_that_raises_is_detached_from_everywhere_it_was_subscribed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        """A sink object: the engine calls its class's __call__, bound once per run."""

        def __init__(self) -> None:
            self.seen: list[str] = []

        def __call__(self, event: object) -> None:
            self.seen.append(type(event).__name__)
            if len(self.seen) == 2:
                raise RuntimeError("sink bug")

        def __repr__(self) -> str:
            return "<Broken sink>"

    broken, capture = Broken(), EventCapture()
    engine = WorkflowEngine(sinks=[broken])
    with caplog.at_level(logging.ERROR, logger="aegis_nb.saga"):
        await engine.execute_saga([flight(Calls())], sinks=[broken, capture])
        await engine.execute_saga([flight(Calls())], sinks=[capture])
    # Subscribed twice, called twice for SagaStarted; the second call raised and both went.
    assert broken.seen == ["SagaStarted", "SagaStarted"]
    assert len(capture) == 8
    assert [r.getMessage() for r in caplog.records] == [
        "event sink <Broken sink> raised on SagaStarted and was detached; the saga goes on"
    ]


async def test_non_json_metadata_from_a_step_fails_that_step() -> None:
    calls = Calls()

    class SetsAnObject:
        async def execute(self, ctx: AegisContext) -> AegisContext:
            return ctx.with_metadata({"when": object()})

        async def compensate(self, ctx: AegisContext) -> None:
            return None

    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine().execute_saga([flight(calls), SetsAnObject()])
    assert isinstance(raised.value.__cause__, TypeError)
    assert str(raised.value.__cause__) == (
        "metadata['when']: value of type object is not JSON-compatible "
        "(use None, bool, int, float, str, list, dict with str keys, or Secret)"
    )
    assert calls.trail() == [("execute", "flight"), ("compensate", "flight")]
