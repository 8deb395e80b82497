"""A compensation that found nothing to undo says so: it returns `NOTHING_TO_UNDO`, its
`CompensationSucceeded` carries ``nothing_to_undo``, and the trace says "nothing to undo" where it
would say "undone". Any other return value still means undone; the report still lists the step as
compensated (its MCP shape is unchanged), since the rollback owes it nothing more.
"""

from __future__ import annotations

import re

import pytest

from aegis_nb import (
    NOTHING_TO_UNDO,
    AegisContext,
    CompensationSucceeded,
    SagaEvent,
    SagaRolledBack,
    WorkflowEngine,
)
from aegis_nb.kernel.undo import Undo
from aegis_nb.saga.trace import describe
from aegis_nb.testing import EventCapture, outline
from tests.steps import NO_WAIT, Calls, Recorded

pytestmark = pytest.mark.anyio


class NeverBooked(Recorded):
    """An in-doubt booking whose call never got through: its undo finds nothing and says so."""

    async def compensate(self, ctx: AegisContext) -> Undo:  # type: ignore[override]
        await super().compensate(ctx)  # records the call, fails while told to
        return NOTHING_TO_UNDO


def flagged(events: list[SagaEvent]) -> list[tuple[object, ...]]:
    """Each event's outline, a compensation's success with its attempt and flag."""
    return [
        (*outline(e), e.attempt, e.nothing_to_undo) if isinstance(e, CompensationSucceeded) else outline(e)
        for e in events
    ]


async def test_an_in_doubt_step_that_never_acted_is_recorded_as_nothing_to_undo() -> None:
    calls, capture = Calls(), EventCapture()
    steps = [Recorded("flight", calls), NeverBooked("hotel", calls, fail="no answer", in_doubt=True)]
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga(steps)

    assert flagged(capture) == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "hotel"),
        ("StepFailed", "hotel"),
        ("CompensationStarted", "hotel"),
        ("CompensationSucceeded", "hotel", 1, True),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight", 1, False),
        ("SagaRolledBackEvent",),
    ]
    trace = [re.sub(r"\d+\.\d+ ms", "N ms", describe(e)) for e in capture]  # timings vary
    assert trace == [
        "saga started: flight -> hotel (no deadline)",
        "  -> flight.execute()",
        "  <- flight ok (N ms)",
        "  -> hotel.execute()",
        "  x  hotel error: no answer (N ms)",
        "  <~ hotel.compensate()",
        "  ~> hotel nothing to undo (N ms)",
        "  <~ flight.compensate()",
        "  ~> flight undone (N ms)",
        "saga rolled back in N ms: no answer — rolled back: flight; nothing to undo: hotel",
    ]
    report = raised.value.report
    assert report.compensated == ("hotel", "flight")
    assert report.found_nothing == ("hotel",)
    assert str(raised.value) == "saga 'saga': no answer — rolled back: flight; nothing to undo: hotel"


async def test_the_flag_is_set_on_the_attempt_that_found_nothing_after_a_failed_one() -> None:
    calls, capture = Calls(), EventCapture()
    hotel = NeverBooked("hotel", calls, hang=True, in_doubt=True, compensation_failures=1, retry=NO_WAIT)
    with pytest.raises(SagaRolledBack):
        await WorkflowEngine(sinks=[capture]).execute_saga([hotel], AegisContext().with_timeout(0.01))

    assert flagged(capture) == [
        ("SagaStarted",),
        ("StepStarted", "hotel"),
        ("StepTimedOut", "hotel"),
        ("CompensationStarted", "hotel"),
        ("CompensationFailed", "hotel"),
        ("CompensationStarted", "hotel"),
        ("CompensationSucceeded", "hotel", 2, True),
        ("SagaRolledBackEvent",),
    ]


async def test_any_other_return_value_still_means_undone() -> None:
    class ReturnsSomething(Recorded):
        async def compensate(self, ctx: AegisContext) -> str:  # type: ignore[override]
            await super().compensate(ctx)
            return "nothing to undo"  # the words, not the sentinel

    calls, capture = Calls(), EventCapture()
    steps = [ReturnsSomething("flight", calls), Recorded("card", calls, fail="declined")]
    with pytest.raises(SagaRolledBack):
        await WorkflowEngine(sinks=[capture]).execute_saga(steps)
    assert [e.nothing_to_undo for e in capture if isinstance(e, CompensationSucceeded)] == [False]
