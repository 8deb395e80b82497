"""A step's span is the current span while it runs, and none of it stays current after, whichever
task its end arrives in and even when its end never does; no context is ever detached in error."""

from __future__ import annotations

import asyncio
import math

import anyio
import pytest
from opentelemetry import trace

from aegis_nb import AegisContext, InMemoryJournal, SagaEvent, SagaReport, SagaStatus, WorkflowEngine
from aegis_nb.kernel.report import ErrorInfo, FailureKind
from aegis_nb.saga.events import SagaRolledBackEvent, SagaStarted, StepStarted, StepSucceeded
from aegis_nb.testing import CallLog
from aegis_nb.tracing import SagaTracer
from tests.steps import ASYNCIO_ONLY, Recorded
from tests.tracing_support import Spans

pytestmark = pytest.mark.anyio

RUN = "r1"
STARTED = SagaStarted(RUN, 0, 0.0, saga="trip", steps=("flight",), deadline=math.inf, context=AegisContext())
FLIGHT_STARTED = StepStarted(RUN, 1, 0.0, index=0, step="flight")
FLIGHT_SUCCEEDED = StepSucceeded(RUN, 2, 0.0, index=0, step="flight", duration=0.0, context=AegisContext())
CANCELLED = ErrorInfo("CancelledError", "")
ROLLED_BACK = SagaRolledBackEvent(
    RUN,
    2,
    0.0,
    saga="trip",
    duration=0.0,
    report=SagaReport(
        RUN, "trip", SagaStatus.ROLLED_BACK, ("flight",), failure_kind=FailureKind.CANCELLED, cause=CANCELLED
    ),
)


def detach_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if "detach" in record.getMessage()]


def outcomes(spans: Spans) -> dict[str, object]:
    return {span.name: (span.attributes or {}).get("aegis.outcome") for span in spans.finished()}


async def test_a_start_whose_end_never_came_is_released_when_the_run_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans = Spans()
    tracer = SagaTracer(spans.provider)
    with spans.tracer.start_as_current_span("request") as outer:
        tracer(STARTED)
        tracer(FLIGHT_STARTED)
        assert trace.get_current_span().get_span_context().span_id != outer.get_span_context().span_id
        tracer(ROLLED_BACK)  # no StepSucceeded or StepFailed: a cancellation during the start's write
        assert trace.get_current_span() is outer
    assert outcomes(spans) == {
        "execute_tool flight": "unrecorded",
        "invoke_workflow trip": "rolled_back",
        "request": None,
    }
    assert detach_errors(caplog) == []


async def test_an_end_published_in_another_task_leaves_the_step_task_reading_as_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans = Spans()
    tracer = SagaTracer(spans.provider)
    with spans.tracer.start_as_current_span("request") as outer:
        tracer(STARTED)
        tracer(FLIGHT_STARTED)
        during = trace.get_current_span().get_span_context()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_publish, tracer, FLIGHT_SUCCEEDED)  # as the rollback's task publishes
        # This task still holds what it attached, which now reads as the span current before.
        assert trace.get_current_span().get_span_context() == outer.get_span_context()
        with spans.tracer.start_as_current_span("after"):
            pass
        tracer(ROLLED_BACK)
    parents = {span.name: span.parent.span_id if span.parent else None for span in spans.finished()}
    ids = {span.name: span.context.span_id for span in spans.finished() if span.context}
    assert during.span_id == ids["execute_tool flight"]
    assert parents == {
        "execute_tool flight": ids["invoke_workflow trip"],
        "after": ids["request"],
        "invoke_workflow trip": ids["request"],
        "request": None,
    }
    assert outcomes(spans)["execute_tool flight"] == "succeeded"
    assert detach_errors(caplog) == []


async def _publish(tracer: SagaTracer, event: SagaEvent) -> None:
    tracer(event)


class CancelledInTheWrite(InMemoryJournal):
    """Cancels its caller natively while writing the hotel's start, and records it before raising."""

    async def append(self, event: SagaEvent) -> None:
        if isinstance(event, StepStarted) and event.step == "hotel":
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            try:
                await anyio.lowlevel.checkpoint()
            finally:
                await super().append(event)
        await super().append(event)


@ASYNCIO_ONLY
async def test_a_native_cancellation_during_a_steps_start_leaves_no_span_current(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans = Spans()
    engine = WorkflowEngine(journal=CancelledInTheWrite(), sinks=[SagaTracer(spans.provider)])
    calls = CallLog()
    with spans.tracer.start_as_current_span("request") as outer:
        with pytest.raises(asyncio.CancelledError):
            await engine.run_saga([Recorded("flight", calls), Recorded("hotel", calls)], name="trip")
        assert trace.get_current_span().get_span_context() == outer.get_span_context()
    assert calls.trail() == [("execute", "flight"), ("compensate", "flight")]
    assert outcomes(spans) == {
        "execute_tool flight": "succeeded",
        "compensate flight": "succeeded",
        "execute_tool hotel": "unrecorded",
        "invoke_workflow trip": "rolled_back",
        "request": None,
    }
    assert detach_errors(caplog) == []
