"""Recovery: finish every run a crash left unfinished, by compensating what it did, newest first.

What recovery does with a run follows from the journal alone (`plan_recovery`, a pure function):
every step that succeeded is owed a compensation, with the context snapshot its execute returned;
so is the step that was in flight or had failed, when it opted in as in-doubt (with its input
context), unless it failed with a refusing `ToolError`: the tool said it did not act, so, as in the live
engine, nothing is in doubt (the journal keeps that as the error's ``refused`` flag). Compensations
the journal shows as finished are skipped, and ones the live run already gave up on stay given up.
A step in flight without an outcome gets a `StepFailed` (kind ``interrupted``) first, so the history
says what happened. Then the shared `roll_back` runs, with the engine's retry policy and budget,
emitting the same events as a live rollback; the run ends `SagaRolledBackEvent`, or `SagaStuck` when a
compensation still fails. Stuck stays stuck.

Compensations may run twice across crashes (at-least-once): each gets the same idempotency key as
in the live run (``run_id/position``), which is what makes that safe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Protocol, runtime_checkable

import anyio

from aegis_nb.kernel.clock import loop_clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import (
    SagaCompensationFailed,
    SagaDefinitionError,
    SagaFailed,
    SagaRolledBack,
    StepResultError,
)
from aegis_nb.kernel.report import (
    CompensationFailure,
    ErrorInfo,
    FailureKind,
    SagaReport,
)
from aegis_nb.kernel.shielding import run_shielded
from aegis_nb.saga.definition import StepSpec, normalize_saga
from aegis_nb.saga.durable.errors import JournalError, StepNotRecoverable
from aegis_nb.saga.durable.locator import StepResolver
from aegis_nb.saga.durable.runs import JournaledRun
from aegis_nb.saga.durable.steprecord import StepRecord
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationSucceeded,
    SagaStarted,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)
from aegis_nb.saga.journal import Journal
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.parallel import merge_outputs
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.rollback import Owed, OwedCompensation, OwedGroup, conclude_rollback, roll_back
from aegis_nb.saga.rules import cancelled_by_sibling
from aegis_nb.saga.sinks import SinkSet

CRASH = ErrorInfo("ProcessCrashed", "the process running the saga stopped before the run finished")
"""The cause recorded for a run that crashed before anything failed."""


@runtime_checkable
class RecoverableJournal(Journal, Protocol):
    """A journal recovery can read back: unfinished runs, and how to rebuild their steps."""

    path: Path
    resolver: StepResolver

    async def unfinished(self) -> tuple[JournaledRun, ...]:
        """The unfinished runs, returned without yielding after they are read (see `recover_unfinished`)."""
        ...

    def is_live(self, run_id: str) -> bool: ...

    async def mark_recovering(self, run_id: str) -> None:
        """Claim the run for this recovery (it is then live) before yielding."""
        ...


class RecoveryIncomplete(JournalError):
    """Some unfinished runs could not be recovered (a step could not, or may not, be rebuilt); they
    stay unfinished, for a person to look at.

    Every other run was recovered first. `refusals` maps each run id left alone to the
    `StepNotRecoverable` that refused it, `problems` to its text.
    """

    def __init__(
        self,
        path: Path | str,
        refusals: Mapping[str, StepNotRecoverable],
        runs: tuple[SagaRun, ...] = (),
    ) -> None:
        self.refusals = MappingProxyType(dict(refusals))
        self.problems = {run_id: refusal.detail for run_id, refusal in refusals.items()}
        self.runs = runs
        listed = "; ".join(f"run {run_id}: {why}" for run_id, why in sorted(self.problems.items()))
        super().__init__(path, f"{len(self.problems)} run(s) left unfinished: {listed}")

    def again(self) -> RecoveryIncomplete:
        return RecoveryIncomplete(self.path, self.refusals, self.runs)


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What recovery will do with one run, decided from its events and step records alone.

    Steps are named as in `SagaReport`; `steps` holds them in order. `in_flight` names every step a
    crash cut off (started, no outcome), oldest first: several when a group's members were running;
    `interrupted` is the newest of them when no step had failed, and `failed` the newest step that
    failed, or else `interrupted` (0.1.0's plan, which had one of each at most).
    """

    run_id: str
    saga: str
    steps: tuple[str, ...]
    succeeded: tuple[str, ...]
    interrupted: str | None
    failed: str | None
    kind: FailureKind
    cause: ErrorInfo
    compensated: tuple[str, ...]
    given_up: tuple[CompensationFailure, ...]
    owed: tuple[tuple[StepRecord, AegisContext], ...]
    in_flight: tuple[str, ...] = ()


def plan_recovery(run: JournaledRun) -> RecoveryPlan:
    """Which compensations a crashed run still owes, newest first by index, and with which contexts.

    Owed: every step that succeeded, with the context its execute returned, and every step that failed
    or was cut off in flight when it is in doubt and its tool did not refuse, with its input (the
    context after the last entry that completed before it: for the step after a parallel group, the
    group's merged outputs; for a member, the group's input). A dynamic saga whose code caught a failed
    step and went on, and a group cut off mid-way, so owe several such steps. Compensations already
    finished or given up on are left out.
    """
    run_id = run.run_id
    initial: AegisContext | None = None
    snapshots: dict[int, AegisContext] = {}
    started: set[int] = set()
    failed: dict[int, ErrorInfo] = {}  # index -> its error, in the order they failed
    kind, cause = FailureKind.INTERRUPTED, CRASH
    compensated: dict[int, str] = {}  # in the order they were undone
    given_up: dict[int, CompensationFailure] = {}
    for event in run.events:
        match event:
            case SagaStarted():
                initial = event.context
            case StepStarted():
                started.add(event.index)
            case StepSucceeded():
                snapshots[event.index] = event.context
            case StepFailed() | StepTimedOut():
                failed[event.index] = event.error
                if not _sibling_cancelled(event) or cause is CRASH:
                    kind = event.kind if isinstance(event, StepFailed) else FailureKind.TIMEOUT
                    cause = event.error
            case CompensationSucceeded():
                compensated[event.index] = event.step
            case CompensationFailed(will_retry=False):
                given_up[event.index] = CompensationFailure(event.step, event.attempt, event.error)
    in_flight = sorted(started - set(snapshots) - set(failed))
    done = set(compensated) | set(given_up)
    inputs = _inputs(run, initial, snapshots)
    owed: dict[int, AegisContext] = {index: ctx for index, ctx in snapshots.items() if index not in done}
    for index in (*failed, *in_flight):
        error = failed.get(index)
        # As in the live engine: a step whose tool answered that it did not act (a refusing ToolError,
        # journaled as a refused error) is not in doubt, so it owes nothing even when it opted in.
        refused = error is not None and error.refused
        before = inputs.get(index)
        if run.steps[index].in_doubt and not refused and index not in done and before is not None:
            owed[index] = before.for_step(run_id, index)
    names = tuple(s.name for s in run.steps)
    interrupted = in_flight[-1] if in_flight and not failed else None
    doubtful = max(failed) if failed else interrupted
    return RecoveryPlan(
        run_id=run_id,
        saga=run.saga,
        steps=names,
        succeeded=tuple(names[i] for i in sorted(snapshots)),
        interrupted=None if interrupted is None else names[interrupted],
        failed=names[doubtful] if doubtful is not None else None,
        kind=kind,
        cause=cause,
        compensated=tuple(compensated.values()),
        given_up=tuple(given_up.values()),
        owed=tuple((run.steps[index], owed[index]) for index in sorted(owed, reverse=True)),
        in_flight=tuple(names[i] for i in in_flight),
    )


def _sibling_cancelled(event: StepFailed | StepTimedOut) -> bool:
    """A group's member cancelled because a sibling failed: the sibling's failure is the run's cause."""
    return (
        isinstance(event, StepFailed)
        and event.kind is FailureKind.CANCELLED
        and cancelled_by_sibling(event.error)
    )


def _inputs(
    run: JournaledRun, initial: AegisContext | None, snapshots: Mapping[int, AegisContext]
) -> dict[int, AegisContext]:
    """Each step's input context, as the live run gave it (before its idempotency stamp).

    A step gets the output of the last entry that completed before it; an entry that failed (a dynamic
    saga's code caught it) leaves the context as it was. A group completes when every member succeeded,
    its output their metadata merged (`merge_outputs`); its members all get the group's input.
    """
    inputs: dict[int, AegisContext] = {}
    if initial is None:
        return inputs
    current, position, steps = initial, 0, run.steps
    while position < len(steps):
        group = steps[position].group
        members = range(position, min(position + (group.size if group else 1), len(steps)))
        for index in members:
            inputs[index] = current
        outputs = [snapshots[index] for index in members if index in snapshots]
        if len(outputs) == len(members):  # the entry completed: the next one gets its output
            if group is None:
                current = outputs[0]
            else:
                # Members that wrote one key with different values failed the group: context unchanged.
                with contextlib.suppress(StepResultError):
                    current = merge_outputs(current, outputs, [steps[i].name for i in members])
        position = members.stop
    return inputs


async def recover_unfinished(
    journal: RecoverableJournal,
    *,
    default_retry: RetryPolicy,
    budget: float,
    sink_sets: tuple[SinkSet, ...] = (),
) -> tuple[SagaRun, ...]:
    """Recover every unfinished run of `journal` that is not live here; return them, oldest first.

    Runs whose steps cannot be rebuilt, or name code the journal may not run (see `StepResolver`),
    are left unfinished, nothing of theirs run, and reported after all the others are done, by
    raising `RecoveryIncomplete`.
    """
    refusals: dict[str, StepNotRecoverable] = {}
    claimed: list[tuple[JournaledRun, RecoveryPlan, tuple[StepSpec, ...]]] = []
    # From the read to the last claim nothing yields: a run that is live here (or being recovered
    # by a recovery beside this one) when the journal is read is skipped, and every other run is
    # claimed before another task can start or recover it.
    for run in await journal.unfinished():
        if journal.is_live(run.run_id):
            continue
        plan = plan_recovery(run)
        try:
            specs = _rebuild(journal.resolver, plan)
        except StepNotRecoverable as exc:
            refusals[run.run_id] = exc
            continue
        await journal.mark_recovering(run.run_id)
        claimed.append((run, plan, specs))
    results: list[SagaRun | None] = [None] * len(claimed)
    failures: list[JournalError] = []

    async def recover_one(
        position: int, run: JournaledRun, plan: RecoveryPlan, specs: tuple[StepSpec, ...]
    ) -> None:
        try:
            results[position] = await _finish(journal, run, plan, specs, default_retry, budget, sink_sets)
        except JournalError as exc:  # the journal failed under this run: it stays unfinished
            failures.append(exc)

    # Concurrently, so that many runs share the journal's syncs.
    async with anyio.create_task_group() as group:
        for position, (run, plan, specs) in enumerate(claimed):
            group.start_soon(recover_one, position, run, plan, specs)
    if failures:
        raise failures[0]
    recovered = tuple(run for run in results if run is not None)
    if refusals:
        raise RecoveryIncomplete(journal.path, refusals, recovered)
    return recovered


def _rebuild(resolver: StepResolver, plan: RecoveryPlan) -> tuple[StepSpec, ...]:
    """The steps `plan` owes compensations to, all rebuilt before any runs, or `StepNotRecoverable`.

    Each is checked as a saga entry again, and runs with the options the rebuilt step has (as a live
    run reads them from the step; 0.1.0's journals did not keep them), under its journaled place and name.
    """
    specs = []
    for step_record, _ in plan.owed:
        try:
            step = resolver.rebuild(step_record.locator)
            (spec,) = normalize_saga([(step, step_record.args, dict(step_record.kwargs))])
        except (LookupError, SagaDefinitionError) as exc:
            problem = exc.problem if isinstance(exc, StepNotRecoverable) else str(exc)
            raise StepNotRecoverable(
                problem, run_id=plan.run_id, step=step_record.name, locator=str(step_record.locator)
            ) from exc
        specs.append(replace(spec, index=step_record.index, name=step_record.name, group=step_record.group))
    return tuple(specs)


def _grouped(owed: list[OwedCompensation]) -> list[Owed]:
    """`owed` (newest first) with each parallel group's members together, in start order, under the
    group's own compensation order, as the live rollback has them."""
    units: list[Owed] = []
    for item in owed:
        group = item.spec.group
        last = units[-1] if units else None
        if group is None:
            units.append(item)
        elif isinstance(last, OwedGroup) and last.members[0].spec.group == group:
            units[-1] = OwedGroup((item, *last.members), group.compensation)
        else:
            units.append(OwedGroup((item,), group.compensation))
    return units


async def _finish(
    journal: RecoverableJournal,
    run: JournaledRun,
    plan: RecoveryPlan,
    specs: tuple[StepSpec, ...],
    default_retry: RetryPolicy,
    budget: float,
    sink_sets: Iterable[SinkSet],
) -> SagaRun:
    clock = loop_clock()
    started = clock()
    recorder = RunRecorder(run.run_id, clock, journal, tuple(sink_sets))
    recorder.events.extend(run.events)

    async def compensate_and_report() -> SagaReport:
        for name in plan.in_flight:  # so the history says how each step cut off by the crash ended
            step = run.steps[plan.steps.index(name)]
            await recorder.record(
                StepFailed(
                    *recorder.header(),
                    index=step.index,
                    step=name,
                    duration=0.0,
                    kind=FailureKind.INTERRUPTED,
                    error=CRASH,
                    group=None if step.group is None else step.group.start,
                )
            )
        owed = _grouped(
            [OwedCompensation(spec, ctx) for spec, (_, ctx) in zip(specs, plan.owed, strict=True)]
        )
        await roll_back(recorder, owed, default_retry=default_retry, budget=budget)
        return await conclude_rollback(recorder, plan.saga, started, plan.kind, plan.cause)

    # Shielded as a live rollback is, against asyncio's native cancellation too.
    try:
        report = await run_shielded(compensate_and_report())
    finally:
        journal.close_run(run.run_id)
    failures = report.compensation_failures
    error_type = SagaCompensationFailed if failures else SagaRolledBack
    error: SagaFailed = error_type(report)
    return SagaRun(tuple(recorder.events), None, error, report)
