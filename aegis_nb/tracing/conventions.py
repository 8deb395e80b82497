"""What the spans are called and what they carry: one table of names, pure functions of the events.

Names follow the OpenTelemetry GenAI semantic conventions where they have one (``invoke_workflow
{gen_ai.workflow.name}`` for a run, ``execute_tool {gen_ai.tool.name}`` for a step, ``gen_ai.*`` and
``error.type`` attributes); the conventions have nothing for compensation or saga state, so those are
``aegis.*``. Attributes hold names, positions and outcomes only: never a context's metadata, never a
step's arguments (either may hold a secret), and error text only as the events carry it, scrubbed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from opentelemetry.util.types import AttributeValue

from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaReport
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    EventBase,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepEvent,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)

Attributes = Mapping[str, AttributeValue]

# GenAI semantic conventions (development status: pinned here, in one place).
OPERATION: Final = "gen_ai.operation.name"
WORKFLOW_NAME: Final = "gen_ai.workflow.name"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
ERROR_TYPE: Final = "error.type"
EXCEPTION_TYPE: Final = "exception.type"
EXCEPTION_MESSAGE: Final = "exception.message"

# Ours: what the conventions do not cover.
RUN_ID: Final = "aegis.run.id"
SAGA_STEPS: Final = "aegis.saga.steps"
RECOVERED: Final = "aegis.saga.recovered"
FAILURE_KIND: Final = "aegis.saga.failure_kind"
FAILED_STEP: Final = "aegis.saga.failed_step"
LEFT_STANDING: Final = "aegis.saga.left_standing"
STEP_INDEX: Final = "aegis.step.index"
STEP_GROUP: Final = "aegis.step.group"
PHASE: Final = "aegis.saga.phase"
OUTCOME: Final = "aegis.outcome"
ATTEMPT: Final = "aegis.compensation.attempt"
WILL_RETRY: Final = "aegis.compensation.will_retry"
BUDGET: Final = "aegis.step.budget_s"
SEQ: Final = "aegis.event.seq"


class Operation(enum.Enum):
    """`gen_ai.operation.name` values: a run is a workflow; a step and its undo each execute a tool."""

    INVOKE_WORKFLOW = "invoke_workflow"
    EXECUTE_TOOL = "execute_tool"


class Phase(enum.Enum):
    """Which half of the saga a step's span belongs to."""

    FORWARD = "forward"
    COMPENSATE = "compensate"


class Outcome(enum.Enum):
    """How a span's work ended (`aegis.outcome`): a step's, a compensation attempt's, or a run's."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    NOTHING_TO_UNDO = "nothing_to_undo"
    UNRECORDED = "unrecorded"
    """The run ended before this span's own end was recorded (a cancellation during its start's write)."""
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    STUCK = "stuck"


EVENT_NAMES: Final[Mapping[type[EventBase], str]] = MappingProxyType(
    {
        SagaStarted: "aegis.saga.started",
        StepStarted: "aegis.step.started",
        StepSucceeded: "aegis.step.succeeded",
        StepFailed: "aegis.step.failed",
        StepTimedOut: "aegis.step.timed_out",
        CompensationStarted: "aegis.compensation.started",
        CompensationSucceeded: "aegis.compensation.succeeded",
        CompensationFailed: "aegis.compensation.failed",
        SagaCommitted: "aegis.saga.committed",
        SagaRolledBackEvent: "aegis.saga.rolled_back",
        SagaStuck: "aegis.saga.stuck",
    }
)
"""The span event each journal transition is recorded as."""


def saga_span_name(saga: str | None) -> str:
    """``invoke_workflow {saga}``; a run recovered after a crash is named once its end says its saga."""
    operation = Operation.INVOKE_WORKFLOW.value
    return operation if saga is None else f"{operation} {saga}"


def step_span_name(step: str) -> str:
    return f"{Operation.EXECUTE_TOOL.value} {step}"


def compensation_span_name(step: str) -> str:
    return f"{Phase.COMPENSATE.value} {step}"


def saga_attributes(run_id: str, started: SagaStarted | None) -> dict[str, AttributeValue]:
    """A run's span at its start; `started` is None for a run recovery finishes (begun elsewhere)."""
    attributes: dict[str, AttributeValue] = {OPERATION: Operation.INVOKE_WORKFLOW.value, RUN_ID: run_id}
    if started is None:
        attributes[RECOVERED] = True
        return attributes
    attributes[WORKFLOW_NAME] = started.saga
    if started.steps:  # a dynamic saga names its steps as they run
        attributes[SAGA_STEPS] = started.steps
    return attributes


def step_attributes(event: StepEvent, phase: Phase) -> dict[str, AttributeValue]:
    """A step's span (or a compensation attempt's) at its start."""
    attributes: dict[str, AttributeValue] = {
        OPERATION: Operation.EXECUTE_TOOL.value,
        TOOL_NAME: event.step,
        RUN_ID: event.run_id,
        STEP_INDEX: event.index,
        PHASE: phase.value,
    }
    if phase is Phase.FORWARD:
        attributes[TOOL_CALL_ID] = f"{event.run_id}/{event.index}"  # the step's idempotency key
    if event.group is not None:
        attributes[STEP_GROUP] = event.group
    if isinstance(event, CompensationStarted):
        attributes[ATTEMPT] = event.attempt
    return attributes


def outcome_of(event: SagaEvent) -> Outcome:
    """The outcome an ending event records on its span."""
    match event:
        case StepSucceeded() | CompensationSucceeded(nothing_to_undo=False):
            return Outcome.SUCCEEDED
        case CompensationSucceeded():
            return Outcome.NOTHING_TO_UNDO
        case StepTimedOut():
            return Outcome.TIMED_OUT
        case SagaCommitted():
            return Outcome.COMMITTED
        case SagaRolledBackEvent():
            return Outcome.ROLLED_BACK
        case SagaStuck():
            return Outcome.STUCK
        case _:
            return Outcome.FAILED


def end_attributes(event: SagaEvent) -> dict[str, AttributeValue]:
    """What an ending event adds to its span: the outcome and, on failure, what went wrong."""
    attributes: dict[str, AttributeValue] = {OUTCOME: outcome_of(event).value}
    match event:
        case StepFailed(error=error) | StepTimedOut(error=error):
            attributes[ERROR_TYPE] = error.type
        case CompensationFailed(error=error, will_retry=will_retry):
            attributes[ERROR_TYPE] = error.type
            attributes[WILL_RETRY] = will_retry
        case SagaRolledBackEvent(report=report) | SagaStuck(report=report):
            attributes.update(_report_attributes(report))
    return attributes


def _report_attributes(report: SagaReport) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {}
    if report.cause is not None and report.failure_kind is not FailureKind.REQUESTED:
        attributes[ERROR_TYPE] = report.cause.type
    if report.failure_kind is not None:
        attributes[FAILURE_KIND] = report.failure_kind.value
    if report.failed_step is not None:
        attributes[FAILED_STEP] = report.failed_step
    if report.left_standing:
        attributes[LEFT_STANDING] = report.left_standing
    return attributes


def event_attributes(event: SagaEvent) -> dict[str, AttributeValue]:
    """The span event's attributes: its place in the run and, for a failure, the scrubbed error."""
    attributes: dict[str, AttributeValue] = {SEQ: event.seq}
    match event:
        case StepFailed(kind=kind, error=error):
            attributes[FAILURE_KIND] = kind.value
            attributes.update(_error(error))
        case StepTimedOut(budget=budget, error=error):
            attributes[BUDGET] = budget
            attributes.update(_error(error))
        case CompensationStarted(attempt=attempt) | CompensationSucceeded(attempt=attempt):
            attributes[ATTEMPT] = attempt
        case CompensationFailed(attempt=attempt, error=error, will_retry=will_retry):
            attributes[ATTEMPT] = attempt
            attributes[WILL_RETRY] = will_retry
            attributes.update(_error(error))
    return attributes


def _error(error: ErrorInfo) -> dict[str, AttributeValue]:
    # ErrorInfo's text was scrubbed of every secret the run held when the event was built.
    return {EXCEPTION_TYPE: error.type, EXCEPTION_MESSAGE: error.message}


def error_description(event: SagaEvent) -> str | None:
    """The span status's description for a failure (None: the span did not fail)."""
    match event:
        case StepFailed(error=error) | StepTimedOut(error=error) | CompensationFailed(error=error):
            return f"{error.type}: {error}"
        case SagaRolledBackEvent(report=report) if report.failure_kind is FailureKind.REQUESTED:
            return None  # the saga's own code asked for it: nothing failed
        case SagaRolledBackEvent(report=report) | SagaStuck(report=report):
            return report.summary()
    return None
