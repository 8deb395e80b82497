"""Engine edge cases found in review: what a demanding user feeds the engine, and how it must answer.

Errors whose ``__str__`` raises, stray asyncio cancellations and odd retry policies must not abort a
rollback; secrets passed as arguments are scrubbed like those in the context; malformed steps (a
class, an attribute that raises, an overflowing timeout) fail before anything runs; a step that
outlives its timeout in a shield does not time out the next one; leaving an event stream logs no error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    ErrorInfo,
    RetryPolicy,
    SagaDefinitionError,
    SagaRolledBack,
    SagaStatus,
    Secret,
    StepSucceeded,
    WorkflowEngine,
)
from aegis_nb.kernel.values import argument_secrets
from aegis_nb.saga import fold_report
from aegis_nb.saga.definition import normalize_saga
from aegis_nb.saga.trace import describe
from aegis_nb.testing import EventCapture
from tests.steps import ROLLED_BACK_TRAIL, Calls, Recorded

pytestmark = pytest.mark.anyio

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
NO_WAIT = RetryPolicy(attempts=3, initial_delay=0)


def travel(calls: Calls, hotel: Recorded) -> list[Recorded]:
    return [Recorded("flight", calls), hotel, Recorded("card", calls, fail="Card Declined!")]


# -- an exception whose __str__ raises ---------------------------------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


class UnprintableUndo(Recorded):
    """Its execute raises an `Unprintable` when told to; its first compensation always does."""

    def __init__(self, name: str, calls: Calls, *, fail: bool = False) -> None:
        super().__init__(name, calls, retry=NO_WAIT)
        self.raise_in_execute, self.undo_failures = fail, 1

    async def execute(self, ctx: AegisContext) -> AegisContext:
        if self.raise_in_execute:
            raise Unprintable("card")
        return await super().execute(ctx)

    async def compensate(self, ctx: AegisContext) -> None:
        await super().compensate(ctx)
        if self.undo_failures:
            self.undo_failures -= 1
            raise Unprintable("hotel")


async def test_errors_whose_str_raises_are_still_rolled_back_and_reported() -> None:
    calls, capture = Calls(), EventCapture()
    saga = [
        Recorded("flight", calls),
        UnprintableUndo("hotel", calls),
        UnprintableUndo("card", calls, fail=True),
    ]
    run = await WorkflowEngine(sinks=[capture]).run_saga(saga)
    assert capture.trail() == [
        *ROLLED_BACK_TRAIL[:6],
        ("StepFailed", "card"),
        ("CompensationStarted", "hotel"),
        ("CompensationFailed", "hotel"),
        *ROLLED_BACK_TRAIL[7:],
    ]
    unprintable = ErrorInfo("Unprintable", "<Unprintable: str() failed>")
    assert run.report.cause == unprintable
    assert capture.events[8].error == unprintable  # type: ignore[union-attr]
    assert isinstance(run.error, SagaRolledBack)
    assert str(run.error) == "saga 'saga': <Unprintable: str() failed> — rolled back: hotel, flight"
    assert fold_report(run.events) == run.report


# -- a compensation that raises a CancelledError nobody sent ---------------------------------------


class AwaitsACancelledFuture(Recorded):
    """Its first compensation awaits a future cancelled elsewhere, so it raises CancelledError."""

    def __init__(self, name: str, calls: Calls) -> None:
        super().__init__(name, calls, retry=NO_WAIT)
        self.stray = 1

    async def compensate(self, ctx: AegisContext) -> None:
        await super().compensate(ctx)
        if self.stray:
            self.stray -= 1
            future = asyncio.get_running_loop().create_future()
            future.cancel()
            await future


@ASYNCIO_ONLY
async def test_a_stray_cancelled_error_from_a_compensation_is_retried_and_the_rest_still_undone() -> None:
    calls, capture = Calls(), EventCapture()
    run = await WorkflowEngine(sinks=[capture]).run_saga(
        travel(calls, AwaitsACancelledFuture("hotel", calls))
    )
    assert capture.trail() == [
        *ROLLED_BACK_TRAIL[:8],
        ("CompensationFailed", "hotel"),
        *ROLLED_BACK_TRAIL[7:],
    ]
    assert capture.events[8].error == ErrorInfo("CancelledError", "")  # type: ignore[union-attr]
    assert run.status is SagaStatus.ROLLED_BACK
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # nothing cancelled the caller


# -- retry policies that would break the backoff mid-rollback --------------------------------------


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


def test_backoff_delays_are_capped_as_they_grow() -> None:
    assert list(RetryPolicy(attempts=4, initial_delay=3, multiplier=10**300, max_delay=7).delays()) == [
        3,
        7,
        7,
    ]
    assert list(RetryPolicy(attempts=4, initial_delay=0.5, multiplier=1e300, max_delay=2).delays()) == [
        0.5,
        2,
        2,
    ]
    assert list(RetryPolicy(attempts=3, initial_delay=0.1).delays()) == [0.1, 0.2]


# -- secrets passed as step arguments ----------------------------------------------------------------


class ChargeCard:
    async def execute(self, ctx: AegisContext, card: Secret, *, billing: dict[str, list[Secret]]) -> None:
        raise ValueError(f"card {card.reveal()!r} declined, pin {billing['pin'][0].reveal()}")

    async def compensate(
        self, ctx: AegisContext, card: Secret, *, billing: dict[str, list[Secret]]
    ) -> None: ...


class HoldFunds:
    async def execute(self, ctx: AegisContext, card: Secret) -> None:
        return None

    async def compensate(self, ctx: AegisContext, card: Secret) -> None:
        raise RuntimeError(f"could not release the hold on {card.reveal()}")


async def test_secrets_passed_as_step_arguments_never_reach_events_reports_or_errors() -> None:
    # Letters no run id (hex) or timestamp can hold: digits alone turn up in those by chance.
    card, pin, capture = Secret("CARD 4242 'x'"), Secret("PIN1234"), EventCapture()
    saga = [
        (HoldFunds(), (card,), {}),
        (ChargeCard(), (card,), {"billing": {"pin": [pin]}}),
    ]
    run = await WorkflowEngine(sinks=[capture], compensation_retry=RetryPolicy.never()).run_saga(saga)
    assert str(run.error) == (
        "saga 'saga': card \"***\" declined, pin *** — could not undo: "
        "HoldFunds (could not release the hold on ***, after 1 attempt) — rolled back: nothing to undo"
    )
    shown = [repr(capture.events), json.dumps(run.report.to_json()), *map(describe, capture.events)]
    assert not [text for text in shown if "CARD" in text or "PIN1234" in text]


def test_argument_secrets_walks_nested_and_self_containing_arguments() -> None:
    looped: list[object] = [Secret("a")]
    looped.append(looped)
    found = argument_secrets((looped, (Secret("b"),)), {"k": {"x": {Secret("c")}}, "plain": "d"})
    assert sorted(found) == ["a", "b", "c"]


# -- malformed steps fail before anything runs -------------------------------------------------------


class Book(Recorded):
    def __init__(self, calls: Calls) -> None:
        super().__init__("book", calls)


class Charge:
    async def execute(self, ctx: AegisContext) -> None: ...

    async def compensate(self, ctx: AegisContext) -> None: ...


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


async def test_a_class_whose_methods_need_no_instance_runs_under_its_own_name() -> None:
    run = await WorkflowEngine().run_saga([ClassLevelStep])
    assert run.report.steps == ("ClassLevelStep",)
    assert run.status is SagaStatus.COMMITTED


def _raises(self: object) -> object:
    raise RuntimeError("the attribute is broken")


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


def test_a_step_timeout_too_large_for_a_float_is_a_definition_error() -> None:
    step = Charge()
    step.timeout = 10**400  # type: ignore[attr-defined]
    with pytest.raises(
        SagaDefinitionError, match=r"^saga entry 0 \(Charge\): timeout must be a positive number"
    ):
        normalize_saga([step])


def test_a_compensation_budget_too_large_for_a_float_is_endless_and_a_bool_is_refused() -> None:
    assert WorkflowEngine(compensation_budget=10**400).compensation_budget == math.inf
    with pytest.raises(ValueError, match="compensation_budget must be positive seconds, got True"):
        WorkflowEngine(compensation_budget=True)


# -- a step that outlives its own timeout in a shield ------------------------------------------------


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


# -- leaving an event stream mid-run -----------------------------------------------------------------


class WaitsFor(Recorded):
    def __init__(self, name: str, calls: Calls, event: anyio.Event) -> None:
        super().__init__(name, calls)
        self.event = event

    async def execute(self, ctx: AegisContext) -> AegisContext:
        await self.event.wait()
        return await super().execute(ctx)


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
