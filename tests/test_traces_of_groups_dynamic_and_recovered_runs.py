"""The other shapes a run takes, traced: a parallel group's members each under their own span in
their own task, a saga built as it runs, and a run that recovery finishes (begun in another process)."""

from __future__ import annotations

import anyio
import pytest
from opentelemetry import trace

from aegis_nb import AegisContext, SagaReport, SagaStatus, WorkflowEngine, parallel
from aegis_nb.kernel.report import ErrorInfo, FailureKind
from aegis_nb.saga.events import CompensationStarted, CompensationSucceeded, SagaRolledBackEvent, StepFailed
from aegis_nb.tracing import SagaTracer
from tests.tracing_support import Spans

pytestmark = pytest.mark.anyio


class Member:
    """Waits until every member has started, then reports the span current in its own task."""

    def __init__(self, name: str, started: list[str], everyone: anyio.Event, size: int) -> None:
        self.name = name
        self.started = started
        self.everyone = everyone
        self.size = size
        self.seen: int | None = None

    async def execute(self, ctx: AegisContext) -> None:
        self.started.append(self.name)
        if len(self.started) == self.size:
            self.everyone.set()
        await self.everyone.wait()  # all members are running at once, each in its task
        self.seen = trace.get_current_span().get_span_context().span_id

    async def compensate(self, ctx: AegisContext) -> None: ...


async def test_each_member_of_a_parallel_group_runs_under_its_own_span() -> None:
    spans = Spans()
    started: list[str] = []
    everyone = anyio.Event()
    members = [Member(name, started, everyone, 2) for name in ("flight", "hotel")]
    engine = WorkflowEngine(sinks=[SagaTracer(spans.provider)])
    await engine.run_saga([parallel(*members)], name="trip")
    by_name = {span.name: span for span in spans.finished()}
    saga = by_name["invoke_workflow trip"]
    for member in members:
        span = by_name[f"execute_tool {member.name}"]
        assert span.context is not None
        assert saga.context is not None
        assert span.parent is not None
        assert (member.seen, span.parent.span_id) == (span.context.span_id, saga.context.span_id)
    assert {name: dict(span.attributes or {}).get("aegis.step.group") for name, span in by_name.items()} == {
        "execute_tool flight": 0,
        "execute_tool hotel": 0,
        "invoke_workflow trip": None,
    }


class Noting:
    async def execute(self, ctx: AegisContext) -> None: ...

    async def compensate(self, ctx: AegisContext) -> None: ...


async def test_a_saga_built_as_it_runs_names_no_plan_and_traces_each_step_as_it_is_added() -> None:
    spans = Spans()
    engine = WorkflowEngine(sinks=[SagaTracer(spans.provider)])
    async with engine.saga(name="agent") as saga:
        await saga.step(Noting())
        await saga.rollback("the user changed their mind")
    by_name = {span.name: span for span in spans.finished()}
    assert sorted(by_name) == ["compensate Noting", "execute_tool Noting", "invoke_workflow agent"]
    run = by_name["invoke_workflow agent"]
    assert dict(run.attributes or {}) == {
        "gen_ai.operation.name": "invoke_workflow",
        "aegis.run.id": saga.run_id,
        "gen_ai.workflow.name": "agent",
        "aegis.outcome": "rolled_back",
        "aegis.saga.failure_kind": "requested",
    }
    # Asked for by the saga's own code: nothing failed.
    assert run.status.status_code is trace.StatusCode.UNSET


async def test_a_run_recovery_finishes_is_a_workflow_span_of_its_own_named_by_its_end() -> None:
    spans = Spans()
    tracer = SagaTracer(spans.provider)
    # What recovery publishes for a run whose forward phase ran in a process that is gone.
    report = SagaReport(
        "r1",
        "trip",
        SagaStatus.ROLLED_BACK,
        ("flight",),
        succeeded=("flight",),
        failure_kind=FailureKind.INTERRUPTED,
        cause=ErrorInfo("Crash", "the process stopped"),
        compensated=("flight",),
    )
    interrupted = ErrorInfo("Crash", "the process stopped")
    for event in (
        StepFailed(
            "r1", 2, 0.0, index=1, step="hotel", duration=0.0, kind=FailureKind.INTERRUPTED, error=interrupted
        ),
        CompensationStarted("r1", 3, 0.0, index=0, step="flight", attempt=1),
        CompensationSucceeded("r1", 4, 0.0, index=0, step="flight", attempt=1, duration=0.0),
        SagaRolledBackEvent("r1", 5, 0.0, saga="trip", duration=0.0, report=report),
    ):
        tracer(event)
    (undo, run) = spans.finished()
    assert (undo.name, run.name) == ("compensate flight", "invoke_workflow trip")
    assert list(undo.links) == []  # its step's span is in the other process's trace
    assert undo.parent is not None
    assert run.context is not None
    assert undo.parent.span_id == run.context.span_id
    assert dict(run.attributes or {}) == {
        "gen_ai.operation.name": "invoke_workflow",
        "aegis.run.id": "r1",
        "aegis.saga.recovered": True,
        "gen_ai.workflow.name": "trip",
        "aegis.outcome": "rolled_back",
        "error.type": "Crash",
        "aegis.saga.failure_kind": "interrupted",
    }
    # The interrupted step's end, whose span is in the other process's trace, is told on the run's.
    assert [(event.name, dict(event.attributes or {})) for event in run.events] == [
        (
            "aegis.step.failed",
            {
                "aegis.event.seq": 2,
                "aegis.saga.failure_kind": "interrupted",
                "exception.type": "Crash",
                "exception.message": "the process stopped",
            },
        ),
        ("aegis.saga.rolled_back", {"aegis.event.seq": 5}),
    ]
    assert (run.status.status_code, run.status.description) == (
        trace.StatusCode.ERROR,
        "the process stopped — rolled back: flight",
    )
