"""Folding a run's events back into what happened: the report."""

from __future__ import annotations

from collections.abc import Iterable

from aegis_nb.kernel.report import (
    CompensationFailure,
    ErrorInfo,
    FailureKind,
    SagaReport,
    SagaStatus,
)
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationSucceeded,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)


def fold_report(events: Iterable[SagaEvent]) -> SagaReport:
    """Rebuild the `SagaReport` of one run from its events, finished or not.

    Steps that succeeded are listed in index order (a group's members finish in any order), those
    compensated in the order they were undone. Its `steps` are the plan the run began with, then any
    step that started outside it (every step of a dynamic saga), in index order: each step the
    report names has its place there.
    """
    run_id, saga = "", ""
    steps: tuple[str, ...] = ()
    started: dict[int, str] = {}  # every step that started, by index: a dynamic saga plans none
    status = SagaStatus.RUNNING
    succeeded: dict[int, str] = {}  # by index: a group's members succeed in whatever order they finish
    failed: str | None = None
    failed_group: int | None = None
    kind: FailureKind | None = None
    cause: ErrorInfo | None = None
    compensated: list[str] = []
    found_nothing: list[str] = []
    failures: list[CompensationFailure] = []
    for event in events:
        match event:
            case SagaStarted():
                run_id, saga, steps = event.run_id, event.saga, event.steps
            case StepStarted():
                started[event.index] = event.step
            case StepSucceeded():
                succeeded[event.index] = event.step
            case StepFailed(kind=FailureKind.CANCELLED) if (
                failed_group is not None and event.group == failed_group
            ):
                pass  # a member cancelled because a sibling failed: the sibling's failure is the group's
            case StepFailed():
                failed, kind, cause = event.step, event.kind, event.error
                failed_group = event.group
                status = SagaStatus.COMPENSATING
            case StepTimedOut():
                failed, kind, cause = event.step, FailureKind.TIMEOUT, event.error
                failed_group = event.group
                status = SagaStatus.COMPENSATING
            case CompensationSucceeded():
                compensated.append(event.step)
                if event.nothing_to_undo:
                    found_nothing.append(event.step)
                status = SagaStatus.COMPENSATING
            case CompensationFailed(will_retry=False):
                failures.append(CompensationFailure(event.step, event.attempt, event.error))
            case SagaCommitted():
                status = event.status
            case SagaRolledBackEvent() | SagaStuck():
                status = event.status
                if failed is None:
                    # Failed between steps (a sink or journal error): only the final report knows why.
                    kind, cause = event.report.failure_kind, event.report.cause
    planned = set(steps)
    steps += tuple(started[i] for i in sorted(started) if started[i] not in planned)
    return SagaReport(
        run_id=run_id,
        saga=saga,
        status=status,
        steps=steps,
        succeeded=tuple(succeeded[i] for i in sorted(succeeded)),
        failed_step=failed,
        failure_kind=kind,
        cause=cause,
        compensated=tuple(compensated),
        compensation_failures=tuple(failures),
        found_nothing=tuple(found_nothing),
    )
