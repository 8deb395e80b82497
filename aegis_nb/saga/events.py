"""Saga events: a closed set of frozen dataclasses, one per transition of a run.

Every event carries the run id, a per-run sequence number (0, 1, 2, ...) and the loop-clock time.
Consumers match on the classes (`match event: case StepFailed(...)`), never on strings; the journal,
the live view and the MCP progress reporter are all sinks of these.
"""

from __future__ import annotations

from typing import TypeAlias

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.records import record
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaReport


@record
class EventBase:
    """Fields every event has."""

    run_id: str
    seq: int
    time: float


@record
class SagaStarted(EventBase):
    """A run began; `steps` are the display names in order, `deadline` is absolute (inf: none).

    `context` is the initial context: what step 0 receives (and, if in doubt, compensates with).
    """

    saga: str
    steps: tuple[str, ...]
    deadline: float
    context: AegisContext


@record
class StepEvent(EventBase):
    """Fields every step-level event has."""

    index: int
    step: str


@record
class StepStarted(StepEvent):
    """A step's execute() was called."""


@record
class StepSucceeded(StepEvent):
    """A step's execute() returned; `context` is the snapshot its compensation will receive."""

    duration: float
    context: AegisContext


@record
class StepFailed(StepEvent):
    """A step's execute() raised, returned a bad value, or was cancelled/interrupted."""

    duration: float
    kind: FailureKind
    error: ErrorInfo


@record
class StepTimedOut(StepEvent):
    """A step ran past its deadline; `budget` is the time it was given."""

    duration: float
    budget: float
    error: ErrorInfo


@record
class CompensationStarted(StepEvent):
    """Attempt number `attempt` (from 1) of a step's compensate() began."""

    attempt: int


@record
class CompensationSucceeded(StepEvent):
    """A step's compensate() returned: its effect is undone."""

    attempt: int
    duration: float


@record
class CompensationFailed(StepEvent):
    """A compensate() attempt failed; `will_retry` says whether another attempt follows."""

    attempt: int
    duration: float
    error: ErrorInfo
    will_retry: bool


@record
class SagaCommitted(EventBase):
    """Every step succeeded; `context` is the final one."""

    saga: str
    duration: float
    context: AegisContext


@record
class SagaRolledBackEvent(EventBase):
    """The run failed and every completed step was compensated: it ended rolled back.

    Named for the status it leaves (`SagaStatus.ROLLED_BACK`); `SagaRolledBack` is the error the caller
    gets. Called ``SagaCompensated`` in 0.1.0: journals hold that name, and decode it as this.
    """

    saga: str
    duration: float
    report: SagaReport


@record
class SagaStuck(EventBase):
    """The run failed and some compensation could not be completed: see `report.left_standing`."""

    saga: str
    duration: float
    report: SagaReport


SagaEvent: TypeAlias = (
    SagaStarted
    | StepStarted
    | StepSucceeded
    | StepFailed
    | StepTimedOut
    | CompensationStarted
    | CompensationSucceeded
    | CompensationFailed
    | SagaCommitted
    | SagaRolledBackEvent
    | SagaStuck
)
"""Every event a run can emit."""

EVENT_TYPES: tuple[type[EventBase], ...] = (
    SagaStarted,
    StepStarted,
    StepSucceeded,
    StepFailed,
    StepTimedOut,
    CompensationStarted,
    CompensationSucceeded,
    CompensationFailed,
    SagaCommitted,
    SagaRolledBackEvent,
    SagaStuck,
)

FINAL_EVENT_TYPES: tuple[type[EventBase], ...] = (SagaCommitted, SagaRolledBackEvent, SagaStuck)
