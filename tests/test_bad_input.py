"""Bad saga definitions fail before anything runs, with a message that names the culprit.

A step class for an instance, an attribute that raises, a timeout or budget out of float range, a
retry policy whose backoff would be nan, a step function with no name to take: each is refused when
the saga (or the option) is built. What is no mistake still runs: a class whose methods need no
instance, a step made of a `functools.partial`.
"""

from __future__ import annotations

import functools
import logging
import math
import re

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    RetryPolicy,
    SagaDefinitionError,
    SagaRolledBack,
    SagaStatus,
    ToolTimeoutError,
    WorkflowEngine,
    step,
)
from aegis_nb.saga.definition import normalize_saga
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


# -- malformed steps and options, found in review --------------------------------------------------


# Regression guard: a retry policy whose backoff would be nan or overflow is refused when built.
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"multiplier": math.nan}, "multiplier must be a finite number >= 1, got nan"),
        ({"multiplier": math.inf}, "multiplier must be a finite number >= 1, got inf"),
        ({"multiplier": 10**400}, "multiplier must be a finite number >= 1, got 1000"),
        ({"initial_delay": 10**400}, "initial_delay must be a finite number >= 0, got 1000"),
        ({"max_delay": 10**400}, "max_delay must be a finite number >= 0, got 1000"),
        ({"initial_delay": True}, "initial_delay must be a finite number >= 0, got True"),
    ],
)
def test_retry_policies_whose_delays_would_be_nan_or_overflow_are_refused(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        RetryPolicy(**options)  # type: ignore[arg-type]


class Book(Recorded):
    def __init__(self, calls: Calls) -> None:
        super().__init__("book", calls)


class Charge:
    async def execute(self, ctx: AegisContext) -> None: ...

    async def compensate(self, ctx: AegisContext) -> None: ...


# Regression guard: a step class passed for an instance is refused before any step runs.
@pytest.mark.parametrize("entry", [Charge, (Charge, (), {})], ids=["bare", "tuple"])
async def test_a_step_class_instead_of_an_instance_fails_before_the_first_step_runs(entry: object) -> None:
    calls = Calls()
    with pytest.raises(SagaDefinitionError) as raised:
        await WorkflowEngine().run_saga([Book(calls), entry])
    assert str(raised.value) == "saga entry 1 (Charge): Charge is a step class; pass an instance, Charge(...)"
    assert calls.trail() == []


class ClassLevelStep:
    """A class whose methods are class and static methods is a step as it is."""

    @classmethod
    async def execute(cls, ctx: AegisContext) -> None: ...

    @staticmethod
    async def compensate(ctx: AegisContext) -> None: ...


# Regression guard: the class check above still accepts a class whose methods need no instance.
async def test_a_class_whose_methods_need_no_instance_runs_under_its_own_name() -> None:
    run = await WorkflowEngine().run_saga([ClassLevelStep])
    assert run.report.steps == ("ClassLevelStep",)
    assert run.status is SagaStatus.COMMITTED


def _raises(self: object) -> object:
    raise RuntimeError("the attribute is broken")


# Regression guard: a step attribute that raises is a definition error naming its saga entry.
@pytest.mark.parametrize("attribute", ["name", "timeout", "in_doubt", "compensation_retry", "is_complete"])
@pytest.mark.parametrize("as_tuple", [False, True])
def test_a_step_attribute_that_raises_is_a_definition_error_naming_the_entry(
    attribute: str, as_tuple: bool
) -> None:
    cls = type("Broken", (Charge,), {attribute: property(_raises)})
    entry = (cls(), (), {}) if as_tuple else cls()
    with pytest.raises(SagaDefinitionError) as raised:
        normalize_saga([Charge(), entry])
    assert str(raised.value) == (
        "saga entry 1 (Broken): reading the step's attributes raised RuntimeError (see the cause above)"
    )
    assert isinstance(raised.value.__cause__, RuntimeError)


# Regression guard: a timeout too large for a float is a definition error, not an OverflowError mid-run.
def test_a_step_timeout_too_large_for_a_float_is_a_definition_error() -> None:
    step = Charge()
    step.timeout = 10**400  # type: ignore[attr-defined]
    with pytest.raises(
        SagaDefinitionError, match=r"^saga entry 0 \(Charge\): timeout must be a positive number"
    ):
        normalize_saga([step])


# Regression guard: a compensation budget past float range means endless; True is no budget.
def test_a_compensation_budget_too_large_for_a_float_is_endless_and_a_bool_is_refused() -> None:
    assert WorkflowEngine(compensation_budget=10**400).compensation_budget == math.inf
    with pytest.raises(ValueError, match="compensation_budget must be positive seconds, got True"):
        WorkflowEngine(compensation_budget=True)


# -- @step on a functools.partial ------------------------------------------------------------------


async def book(ctx: AegisContext, destination: str) -> AegisContext:
    """Book a flight to `destination`."""
    return ctx.with_metadata({"destination": destination})


# Regression guard: @step on a functools.partial is named after the function it wraps.
@pytest.mark.anyio
async def test_a_step_of_an_async_partial_is_named_after_the_function() -> None:
    booked = step(functools.partial(book, destination="LIS"))
    assert (booked.name, booked.__doc__, repr(booked)) == ("book", book.__doc__, "<step book>")
    renamed = step(name="BookFlight")(functools.partial(functools.partial(book), "LIS"))
    assert renamed.name == "BookFlight"
    for made in (booked, renamed):
        made.compensation(_undo)
    run = await WorkflowEngine().run_saga([booked], AegisContext())
    assert run.context is not None
    assert dict(run.context.metadata) == {"destination": "LIS"}


async def _undo(ctx: AegisContext) -> None:
    pass


# Regression guard: @step on something with no name to take asks for one.
def test_a_step_with_no_name_to_take_asks_for_one() -> None:
    async def unnamed(ctx: AegisContext) -> None:
        pass

    unnamed.__name__ = ""
    with pytest.raises(
        SagaDefinitionError,
        match=r"^cannot tell the name of step functools\.partial\(<function .*unnamed at 0x[0-9a-f]+>\): "
        r"give it one with @step\(name=\.\.\.\)$",
    ):
        step(functools.partial(unnamed))
