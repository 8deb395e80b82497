"""The sequence model: one saga run as lanes, messages and a rollback region, folded from its events.

Every view (SVG, Mermaid, DOT, text, the live widget) draws from this model, never from the raw
events, so they agree on what happened. `SequenceBuilder` folds events one at a time (the live view
feeds it from an engine sink); `SequenceModel` is the immutable snapshot the renderers take.

A dynamic saga announces no steps when it starts: its lanes are learned from `StepStarted` events
as they come, so a live view grows a lifeline per step. Parallel groups (`Group`) are learned from
the events' `group` field; their members' events interleave, each on its own lane.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaReport, SagaStatus
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
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


class LaneState(enum.Enum):
    """Where one step stands, shown on its lifeline head."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed out"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    NOTHING_TO_UNDO = "nothing to undo"
    """Compensated, and its compensation found nothing the step had done."""
    STUCK = "not undone"


class MessageKind(enum.Enum):
    """An arrow of the diagram: a call from the engine to a step, or a step's reply."""

    EXECUTE = "execute"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed out"
    COMPENSATE = "compensate"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation failed"

    @property
    def is_call(self) -> bool:
        """Engine to step (a solid arrow); the others are replies, step to engine."""
        return self in (MessageKind.EXECUTE, MessageKind.COMPENSATE)


@dataclass(frozen=True, slots=True)
class Group:
    """A parallel group as drawn: its members are the consecutive steps `start` .. `last`."""

    start: int
    size: int

    @property
    def last(self) -> int:
        return self.start + self.size - 1

    def __contains__(self, step: object) -> bool:
        return isinstance(step, int) and self.start <= step <= self.last


class Message(NamedTuple):
    """One arrow, with what its label needs: timing, attempt and (secret-scrubbed) error.

    A named tuple rather than a dataclass: the live view folds one per event, and this is 4x cheaper.
    """

    seq: int
    time: float
    kind: MessageKind
    step: int
    attempt: int = 1
    duration: float | None = None
    error: ErrorInfo | None = None
    budget: float | None = None
    will_retry: bool = False
    failure: FailureKind | None = None
    nothing_to_undo: bool = False


@dataclass(frozen=True, slots=True)
class SequenceModel:
    """A run as a sequence diagram: who (lanes), what in order (messages), and where rollback began.

    `rollback_at` is the number of messages drawn before the rollback box (``None`` while the run
    has not failed). Times are on the engine's loop clock; `elapsed` is from start to last event.
    `report` is the run's report once it finished (``None`` before). `groups` are the parallel
    groups seen so far, in step order; `dynamic` says the run announced no steps when it started.
    """

    run_id: str
    saga: str
    steps: tuple[str, ...]
    status: SagaStatus
    lanes: tuple[LaneState, ...]
    messages: tuple[Message, ...]
    rollback_at: int | None
    started: float
    elapsed: float
    deadline: float
    event_count: int
    failed_step: int | None = None
    failure: FailureKind | None = None
    cause: ErrorInfo | None = None
    report: SagaReport | None = None
    groups: tuple[Group, ...] = ()
    dynamic: bool = False

    @property
    def finished(self) -> bool:
        return self.status.is_final

    @property
    def requested(self) -> bool:
        """The saga's own code asked for its rollback (`Saga.rollback(reason)`): nothing failed."""
        return self.failure is FailureKind.REQUESTED

    def group_of(self, step: int) -> Group | None:
        """The parallel group `step` is a member of, if any."""
        for group in self.groups:
            if step in group:
                return group
        return None

    @property
    def has_deadline(self) -> bool:
        return self.deadline != math.inf


EMPTY = SequenceModel(
    run_id="",
    saga="",
    steps=(),
    status=SagaStatus.RUNNING,
    lanes=(),
    messages=(),
    rollback_at=None,
    started=0.0,
    elapsed=0.0,
    deadline=math.inf,
    event_count=0,
)
"""The model before any event: nothing to draw yet."""


class SequenceBuilder:
    """Folds one run's events into a `SequenceModel`, incrementally; `snapshot()` copies it out.

    Feeding is O(1) per event so a sink stays cheap on the engine's hot path; the copy happens only
    when a view actually redraws. Events of other runs are ignored once a run has started.
    """

    __slots__ = (
        "_cause",
        "_count",
        "_deadline",
        "_dynamic",
        "_failed_step",
        "_failure",
        "_groups",
        "_lanes",
        "_last",
        "_messages",
        "_report",
        "_rollback_at",
        "_run_id",
        "_saga",
        "_started",
        "_status",
        "_steps",
    )

    def __init__(self) -> None:
        self._run_id = ""
        self._saga = ""
        self._steps: list[str] = []
        self._groups: list[Group] = []
        self._dynamic = False
        self._status = SagaStatus.RUNNING
        self._lanes: list[LaneState] = []
        self._messages: list[Message] = []
        self._rollback_at: int | None = None
        self._started = 0.0
        self._last = 0.0
        self._deadline = math.inf
        self._count = 0
        self._failed_step: int | None = None
        self._failure: FailureKind | None = None
        self._cause: ErrorInfo | None = None
        self._report: SagaReport | None = None

    @property
    def run_id(self) -> str:
        """The run being folded ('' before its `SagaStarted`)."""
        return self._run_id

    @property
    def event_count(self) -> int:
        return self._count

    @property
    def finished(self) -> bool:
        return self._status.is_final

    def feed(self, event: SagaEvent) -> bool:
        """Fold `event` in; return whether it belonged to this run (and so changed the model)."""
        if isinstance(event, SagaStarted):
            if self._run_id:
                return False
            self._run_id, self._saga, self._steps = event.run_id, event.saga, list(event.steps)
            self._dynamic = not event.steps
            self._lanes = [LaneState.PENDING] * len(event.steps)
            self._started = self._last = event.time
            self._deadline = event.deadline
            self._count = 1
            return True
        if event.run_id != self._run_id:
            return False
        self._count += 1
        self._last = event.time
        self._fold(event)
        return True

    def _fold(self, event: SagaEvent) -> None:
        _FOLDERS[type(event)](self, event)

    def _learn(self, event: StepEvent) -> None:
        """Give `event`'s step a lane if it has none yet (a dynamic saga's), and note its group."""
        index = event.index
        if index >= len(self._steps):
            missing = index + 1 - len(self._steps)
            self._steps += [""] * missing
            self._lanes += [LaneState.PENDING] * missing
        if not self._steps[index]:
            self._steps[index] = event.step
        start = event.group
        if start is None:
            return
        size = index - start + 1
        last = self._groups[-1] if self._groups else None
        if last is not None and last.start == start:
            if size > last.size:
                self._groups[-1] = Group(start, size)
        else:
            self._groups.append(Group(start, size))

    def _step_started(self, event: StepStarted) -> None:
        self._learn(event)
        if self._status is SagaStatus.COMPENSATING and self._rollback_at is None:
            failed = self._failed_step
            group = self._group_of(failed) if failed is not None else None
            if group is None or event.index not in group:
                # The saga's code caught the failure and went on: it was no rollback after all.
                self._status = SagaStatus.RUNNING
                self._failed_step, self._failure, self._cause = None, None, None
        self._lanes[event.index] = LaneState.RUNNING
        self._messages.append(Message(event.seq, event.time, MessageKind.EXECUTE, event.index))

    def _step_succeeded(self, event: StepSucceeded) -> None:
        self._lanes[event.index] = LaneState.SUCCEEDED
        self._messages.append(
            Message(event.seq, event.time, MessageKind.SUCCEEDED, event.index, duration=event.duration)
        )

    def _step_failed(self, event: StepFailed) -> None:
        self._lanes[event.index] = LaneState.FAILED
        self._messages.append(
            Message(
                event.seq,
                event.time,
                MessageKind.FAILED,
                event.index,
                duration=event.duration,
                error=event.error,
                failure=event.kind,
            )
        )
        self._fail(event.index, event.kind, event.error)

    def _step_timed_out(self, event: StepTimedOut) -> None:
        self._lanes[event.index] = LaneState.TIMED_OUT
        self._messages.append(
            Message(
                event.seq,
                event.time,
                MessageKind.TIMED_OUT,
                event.index,
                duration=event.duration,
                error=event.error,
                budget=event.budget,
                failure=FailureKind.TIMEOUT,
            )
        )
        self._fail(event.index, FailureKind.TIMEOUT, event.error)

    def _compensation_started(self, event: CompensationStarted) -> None:
        self._learn(event)
        self._enter_rollback()
        self._lanes[event.index] = LaneState.COMPENSATING
        self._messages.append(
            Message(event.seq, event.time, MessageKind.COMPENSATE, event.index, attempt=event.attempt)
        )

    def _compensation_succeeded(self, event: CompensationSucceeded) -> None:
        nothing = event.nothing_to_undo
        self._lanes[event.index] = LaneState.NOTHING_TO_UNDO if nothing else LaneState.COMPENSATED
        self._messages.append(
            Message(
                event.seq,
                event.time,
                MessageKind.COMPENSATED,
                event.index,
                attempt=event.attempt,
                duration=event.duration,
                nothing_to_undo=nothing,
            )
        )

    def _compensation_failed(self, event: CompensationFailed) -> None:
        if not event.will_retry:
            self._lanes[event.index] = LaneState.STUCK
        self._messages.append(
            Message(
                event.seq,
                event.time,
                MessageKind.COMPENSATION_FAILED,
                event.index,
                attempt=event.attempt,
                duration=event.duration,
                error=event.error,
                will_retry=event.will_retry,
            )
        )

    def _committed(self, event: SagaCommitted) -> None:
        self._status = event.status
        # The event carries no report: a committed run's is every step that succeeded (all of a
        # list saga's; a dynamic saga may have caught a failure and gone on).
        steps = tuple(self._steps)
        succeeded = tuple(
            name for name, lane in zip(steps, self._lanes, strict=True) if lane is LaneState.SUCCEEDED
        )
        self._report = SagaReport(self._run_id, self._saga, event.status, steps, succeeded=succeeded)
        self._failed_step, self._failure, self._cause = None, None, None

    def _rolled_back(self, event: SagaRolledBackEvent | SagaStuck) -> None:
        self._enter_rollback()
        report = self._report = event.report
        self._status = event.status
        # The report says why, whatever the events suggested: a group's first failure, not the
        # siblings it cancelled; a failure between steps (a sink or journal error); a requested rollback.
        if report.failure_kind is not None or report.cause is not None:
            self._failure, self._cause = report.failure_kind, report.cause
            named, index = report.failed_step, self._failed_step
            if index is None or self._steps[index] != named:
                self._failed_step = self._steps.index(named) if named in self._steps else None

    def _fail(self, index: int, kind: FailureKind, error: ErrorInfo) -> None:
        if self._status is SagaStatus.COMPENSATING:
            return  # a sibling cancelled by the group's first failure, which stays the cause
        self._failed_step, self._failure, self._cause = index, kind, error
        # Rolling back from here on, unless the saga's code goes on (`_step_started`); the rollback
        # box opens at the first compensation, after the failed group's members have all settled.
        self._status = SagaStatus.COMPENSATING

    def _group_of(self, step: int) -> Group | None:
        for group in self._groups:
            if step in group:
                return group
        return None

    def _enter_rollback(self) -> None:
        if self._rollback_at is None:
            self._rollback_at = len(self._messages)
            self._status = SagaStatus.COMPENSATING

    def snapshot(self) -> SequenceModel:
        """The model as it stands, as an immutable value."""
        if not self._run_id:
            return EMPTY
        return SequenceModel(
            run_id=self._run_id,
            saga=self._saga,
            steps=tuple(self._steps),
            status=self._status,
            lanes=tuple(self._lanes),
            messages=tuple(self._messages),
            rollback_at=self._rollback_at,
            started=self._started,
            elapsed=self._last - self._started,
            deadline=self._deadline,
            event_count=self._count,
            failed_step=self._failed_step,
            failure=self._failure,
            cause=self._cause,
            report=self._report,
            groups=tuple(self._groups),
            dynamic=self._dynamic,
        )


_FOLDERS: dict[type, Callable[[SequenceBuilder, Any], None]] = {
    StepStarted: SequenceBuilder._step_started,
    StepSucceeded: SequenceBuilder._step_succeeded,
    StepFailed: SequenceBuilder._step_failed,
    StepTimedOut: SequenceBuilder._step_timed_out,
    CompensationStarted: SequenceBuilder._compensation_started,
    CompensationSucceeded: SequenceBuilder._compensation_succeeded,
    CompensationFailed: SequenceBuilder._compensation_failed,
    SagaCommitted: SequenceBuilder._committed,
    SagaRolledBackEvent: SequenceBuilder._rolled_back,
    SagaStuck: SequenceBuilder._rolled_back,
}
"""How each event type after `SagaStarted` is folded (a dict lookup beats a chain of isinstance)."""


def fold(events: Iterable[SagaEvent]) -> SequenceModel:
    """The model of the first run in `events` (a finished run's events, or a prefix of them)."""
    builder = SequenceBuilder()
    for event in events:
        builder.feed(event)
    return builder.snapshot()
