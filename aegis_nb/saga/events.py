"""Saga events: a closed set of frozen dataclasses, one per transition of a run.

Every event carries the run id, a per-run sequence number (0, 1, 2, ...) and the loop-clock time.
Consumers match on the classes (`match event: case StepFailed(...)`), never on strings; the journal,
the live view and the MCP progress reporter are all sinks of these. A run ends with one final event
(`FinalEvent`), which says the status it leaves the run in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, TypeAlias, TypeGuard

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaReport, SagaStatus


@dataclass(frozen=True, slots=True)
class EventBase:
    """Fields every event has."""

    run_id: str
    seq: int
    time: float


@dataclass(frozen=True, slots=True)
class SagaStarted(EventBase):
    """A run began; `steps` are the display names in order, `deadline` is absolute (inf: none).

    `steps` is the plan known when the run began: every step of a list saga (a group's members in
    declaration order), none of a dynamic saga, whose steps are named by their events as they run.

    `context` is the initial context: what step 0 receives (and, if in doubt, compensates with).
    """

    saga: str
    steps: tuple[str, ...]
    deadline: float
    context: AegisContext


@dataclass(frozen=True, slots=True)
class StepEvent(EventBase):
    """Fields every step-level event has: the step's index in the run and its unique name.

    `group` is set for a member of a parallel group: the index of the group's first member (members
    have consecutive indexes from it, so the member number is ``index - group``). Events of a
    group's members interleave; each names its own step.
    """

    index: int
    step: str
    group: int | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class StepStarted(StepEvent):
    """A step's execute() was called."""


@dataclass(frozen=True, slots=True)
class StepSucceeded(StepEvent):
    """A step's execute() returned; `context` is the snapshot its compensation will receive."""

    duration: float
    context: AegisContext


@dataclass(frozen=True, slots=True)
class StepFailed(StepEvent):
    """A step's execute() raised, returned a bad value, or was cancelled/interrupted."""

    duration: float
    kind: FailureKind
    error: ErrorInfo


@dataclass(frozen=True, slots=True)
class StepTimedOut(StepEvent):
    """A step ran past its deadline; `budget` is the time it was given."""

    duration: float
    budget: float
    error: ErrorInfo


@dataclass(frozen=True, slots=True)
class CompensationStarted(StepEvent):
    """Attempt number `attempt` (from 1) of a step's compensate() began."""

    attempt: int


@dataclass(frozen=True, slots=True)
class CompensationSucceeded(StepEvent):
    """A step's compensate() returned: its effect is undone.

    `nothing_to_undo` when it returned `NOTHING_TO_UNDO`: it found its step had done nothing (an
    in-doubt step that never acted), so there was nothing to undo.
    """

    attempt: int
    duration: float
    nothing_to_undo: bool = False


@dataclass(frozen=True, slots=True)
class CompensationFailed(StepEvent):
    """A compensate() attempt failed; `will_retry` says whether another attempt follows."""

    attempt: int
    duration: float
    error: ErrorInfo
    will_retry: bool


@dataclass(frozen=True, slots=True)
class SagaCommitted(EventBase):
    """Every step succeeded; `context` is the final one."""

    status: ClassVar[SagaStatus] = SagaStatus.COMMITTED

    saga: str
    duration: float
    context: AegisContext


@dataclass(frozen=True, slots=True)
class SagaRolledBackEvent(EventBase):
    """The run failed and every completed step was compensated: it ended rolled back.

    Named for the status it leaves (`SagaStatus.ROLLED_BACK`); `SagaRolledBack` is the error the caller
    gets. Called ``SagaCompensated`` in 0.1.0: journals hold that name, and decode it as this.
    """

    status: ClassVar[SagaStatus] = SagaStatus.ROLLED_BACK

    saga: str
    duration: float
    report: SagaReport


@dataclass(frozen=True, slots=True)
class SagaStuck(EventBase):
    """The run failed and some compensation could not be completed: see `report.left_standing`."""

    status: ClassVar[SagaStatus] = SagaStatus.STUCK

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

FinalEvent: TypeAlias = SagaCommitted | SagaRolledBackEvent | SagaStuck
"""The events that end a run, each with the `status` it leaves the run in (`SagaStatus.is_final`)."""

FINAL_EVENT_TYPES: tuple[type[SagaCommitted], type[SagaRolledBackEvent], type[SagaStuck]] = (
    SagaCommitted,
    SagaRolledBackEvent,
    SagaStuck,
)
"""The classes of `FinalEvent`, for ``isinstance``."""


def is_final(event: SagaEvent) -> TypeGuard[FinalEvent]:
    """Whether `event` ends its run: nothing follows it, and `event.status` is where the run stands."""
    return isinstance(event, FINAL_EVENT_TYPES)
