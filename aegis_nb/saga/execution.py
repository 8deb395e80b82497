"""One run of a saga: steps and parallel groups forward, then the commit or the rollback.

Both shapes of saga run through this one machine: a list (`WorkflowEngine.run_saga`) and a saga whose
steps are added as it runs (`aegis_nb.saga.dynamic.Saga`). Each step gets the latest context, stamped
with its idempotency key, and runs under the context's deadline (and its own timeout); a parallel
group's members start together on one context, in tasks of their own, and the first to fail cancels
the rest. A step that fails is recorded at once, and, if it may have acted (``in_doubt``), owed a
compensation; its exception goes to the saga's code, which may go on (a dynamic saga) or leave.

On failure every completed step is compensated, newest first, with the context its own execute
returned (`aegis_nb.saga.rollback`), shielded from the cancellation; then the cancellation or
interrupt propagates unchanged, and any other failure becomes `SagaRolledBack` or
`SagaCompensationFailed`. Every event goes through `RunRecorder.record`, whose journal write no
cancellation cuts off: once the run's end is recorded, the run committed, whatever the caller does next.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeAlias

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaCompensationFailed, SagaFailed, SagaRolledBack, ToolTimeoutError
from aegis_nb.kernel.executor import DeadlineGuard
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaReport
from aegis_nb.kernel.scrubbing import scrubbed_cause
from aegis_nb.kernel.shielding import run_shielded
from aegis_nb.kernel.values import argument_secrets
from aegis_nb.saga.definition import StepSpec, group_start
from aegis_nb.saga.events import SagaCommitted, SagaStarted, StepStarted, StepSucceeded
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.parallel import CompensationOrder, merge_outputs
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.rollback import Owed, OwedCompensation, conclude_rollback, roll_back
from aegis_nb.saga.rules import (
    CANCELLED,
    REQUESTED,
    OwedGroup,
    accept,
    admit,
    failure_event,
    member_starts,
    owed_group,
    owes_compensation,
    sibling_cancelled,
)

_Reason: TypeAlias = Callable[[], "ErrorInfo | None"]
"""Why a step was cancelled, when something other than its caller did it (None: its caller)."""


class Execution:
    """One run: its steps forward, then the commit, or the rollback under `retry` and `budget`."""

    def __init__(
        self, recorder: RunRecorder, saga: str, ctx: AegisContext, retry: RetryPolicy, budget: float
    ) -> None:
        self.recorder = recorder
        self.saga = saga
        self.initial = ctx
        self.context = ctx  # the latest: what the next step receives
        self.retry = retry
        self.budget = budget
        self.started = recorder.clock()
        self.owed: list[Owed] = []  # what a rollback undoes, oldest first
        self.specs: list[StepSpec] = []  # every step started, for the secrets its arguments hold
        self.unrecorded: list[StepSucceeded] = []  # successes whose journal write failed
        self.failure: tuple[BaseException, ErrorInfo] | None = None  # the last step failure recorded
        self.outcome: SagaRun | None = None  # once ended, even by a cancellation or interrupt

    def take_outcome(self) -> SagaRun | None:
        """The ended run (None before), forgotten here: its error's cause has a traceback through
        this execution's frames, which would hold it in a cycle."""
        outcome, self.outcome = self.outcome, None
        return outcome

    async def start(self, plan: Sequence[str]) -> None:
        """Record the run's start; `plan` names the steps known ahead (none for a dynamic saga)."""
        recorder = self.recorder
        await recorder.record(
            SagaStarted(
                *recorder.header(self.started),
                saga=self.saga,
                steps=tuple(plan),
                deadline=self.initial.deadline,
                context=self.initial,
            )
        )

    # -- forward ------------------------------------------------------------------------------------

    async def run_list(self, plan: Sequence[StepSpec]) -> None:
        """Run a list saga's steps in order, a group's members together, under one shared scope.

        A cancel scope costs more than the engine's own work per step, and a list's steps run back
        to back, with no caller code between them, so they share one, touched only when the deadline
        changes. A dynamic saga's steps each take their own: its code runs between them, where no
        scope of the engine's may be left open.
        """
        guard = DeadlineGuard(math.inf, self.recorder.clock)
        position = 0
        with guard:
            while position < len(plan):
                spec = plan[position]
                if spec.group is None:
                    await self.run_step(spec, guard)
                    position += 1
                else:  # each member in its own task, under a deadline of its own
                    guard.rearm(math.inf, self.recorder.clock())
                    await self.run_group(plan[position : position + spec.group.size])
                    position += spec.group.size

    async def run_step(self, spec: StepSpec, guard: DeadlineGuard | None = None) -> AegisContext:
        """Run one step on the latest context; return its output, now the latest.

        A failure of the step itself is recorded (and owed a compensation if the step is in doubt)
        before its exception is raised; a failure to record is raised as it is. `guard` is the
        scope the step shares with the others of its list, if it has one (see `run_list`).
        """
        step_input = self.context.for_step(self.recorder.run_id, spec.index)
        output = await self._execute(spec, step_input, self.owed.append, guard=guard)
        self.context = output
        return output

    async def run_group(self, members: Sequence[StepSpec]) -> AegisContext:
        """Run a parallel group's members together on the latest context; return the merged output.

        The first member to fail cancels the others; each is recorded as it settles, and the group
        owes compensation to the members that succeeded and the in-doubt ones that did not. Then the
        first failure is raised; a metadata conflict between members is a `StepResultError`.
        """
        start = self.context
        run_id = self.recorder.run_id
        owed: list[OwedCompensation] = []
        outputs: dict[int, AegisContext] = {}
        failed: list[BaseException] = []

        async def member(spec: StepSpec, group: anyio.abc.TaskGroup) -> None:
            if not member_starts(failed):  # the group failed before this member's task began
                return
            try:
                outputs[spec.index] = await self._execute(
                    spec, start.for_step(run_id, spec.index), owed.append, lambda: _sibling(failed)
                )
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:  # the group's failure: cancel the members still running
                failed.append(exc)
                group.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as group:
                for spec in members:
                    group.start_soon(member, spec, group)
        finally:
            # Whatever cut the group short, what it did is owed.
            placed = members[0].group
            order = CompensationOrder.CONCURRENT if placed is None else placed.compensation
            if (settled := owed_group(owed, _index, order)) is not None:
                self.owed.append(settled)
        if failed:
            raise failed[0]
        ordered = [outputs[spec.index] for spec in members]
        self.context = merge_outputs(start, ordered, [spec.name for spec in members])
        return self.context

    async def _execute(
        self,
        spec: StepSpec,
        step_input: AegisContext,
        owe: Callable[[OwedCompensation], None],
        why_cancelled: _Reason | None = None,
        guard: DeadlineGuard | None = None,
    ) -> AegisContext:
        """Record the step's start, run it under its deadline, record how it ended, note what it owes."""
        recorder, clock = self.recorder, self.recorder.clock
        started = clock()
        deadline = admit(spec.name, step_input.deadline, spec.timeout, started)
        self.specs.append(spec)
        await recorder.record(
            StepStarted(*recorder.header(started), index=spec.index, step=spec.name, group=group_start(spec))
        )
        try:
            if guard is not None:
                guard.rearm(deadline, started)
                guard.begin(spec.name, started)
                result = await spec.step.execute(step_input, *spec.args, **spec.kwargs)
            elif deadline == math.inf:
                result = await spec.step.execute(step_input, *spec.args, **spec.kwargs)
            else:
                with DeadlineGuard(deadline, clock) as guard:
                    guard.begin(spec.name, started)
                    result = await spec.step.execute(step_input, *spec.args, **spec.kwargs)
            output = step_input if result is None else accept(spec.name, step_input, result)
        except BaseException as exc:
            # The shared scope's deadline cancelled the step: a timeout, raised as one on leaving it.
            failure = guard.timeout_error() if guard is not None and guard.expired else exc
            await self._record_failure(spec, step_input, started, failure, owe, why_cancelled)
            raise
        owe(OwedCompensation(spec, output))
        now = clock()
        succeeded = StepSucceeded(
            *recorder.header(now),
            index=spec.index,
            step=spec.name,
            duration=now - started,
            context=output,
            group=group_start(spec),
        )
        # Held until recorded: if the journal write fails, the rollback still publishes the success,
        # so the run's events tell what happened.
        self.unrecorded.append(succeeded)
        await recorder.record(succeeded)
        self.unrecorded.remove(succeeded)
        return output

    async def _record_failure(
        self,
        spec: StepSpec,
        step_input: AegisContext,
        started: float,
        exc: BaseException,
        owe: Callable[[OwedCompensation], None],
        why_cancelled: _Reason | None,
    ) -> None:
        """Record that `spec`'s execute failed; owe it a compensation if it may have acted."""
        recorder = self.recorder
        kind = classify(exc)
        reason = why_cancelled() if why_cancelled is not None and kind is FailureKind.CANCELLED else None
        if reason is not None:
            cause = reason
        elif kind is FailureKind.CANCELLED:
            cause = CANCELLED
        else:
            cause = ErrorInfo.from_exception(exc, self.secrets_held(step_input))
        duration = recorder.clock() - started
        budget = exc.budget if isinstance(exc, ToolTimeoutError) else None
        event = failure_event(
            recorder.header(), spec.index, spec.name, group_start(spec), duration, kind, cause, budget
        )
        if owes_compensation(spec.in_doubt, cause):
            owe(OwedCompensation(spec, step_input))
        if reason is None:  # a sibling's cancellation is not the saga's failure: the sibling's is
            self.failure = (exc, cause)
        await recorder.record(event)

    # -- the end -------------------------------------------------------------------------------------

    async def commit(self) -> SagaRun:
        """Record the commit; if that write fails the run is not committed, and is rolled back."""
        recorder, clock = self.recorder, self.recorder.clock
        try:
            now = clock()
            await recorder.record(
                SagaCommitted(
                    *recorder.header(now), saga=self.saga, duration=now - self.started, context=self.context
                )
            )
        except BaseException as exc:
            if isinstance(recorder.events[-1], SagaCommitted):
                # The commit is recorded (a cancellation waits for the write): the run committed and
                # nothing undoes it; the cancellation or a sink's interrupt propagates after it.
                raise
            return await self.fail(exc)
        self.outcome = SagaRun(tuple(recorder.events), self.context, None)
        return self.outcome

    async def fail(self, exc: BaseException) -> SagaRun:
        """Compensate what is owed, shielded, then re-raise a cancellation or interrupt, or return the
        rolled-back run with its error (chained to `exc`).

        The shield holds against native asyncio cancellation too (see `run_shielded`): a caller's
        ``asyncio.timeout`` still waits for every owed compensation, then gets its cancellation.
        """
        kind = classify(exc)
        secrets = self.secrets_held(self.context)
        if self.failure is not None and self.failure[0] is exc:
            cause = self.failure[1]
        elif kind is FailureKind.CANCELLED:
            cause = CANCELLED
        else:
            cause = ErrorInfo.from_exception(exc, secrets)
        report = await run_shielded(self._roll_back(kind, cause, secrets))
        run = self._rolled_back(report, scrubbed_cause(exc, secrets))
        if kind in (FailureKind.CANCELLED, FailureKind.INTERRUPTED):
            raise exc
        return run

    async def roll_back_requested(self, reason: str) -> SagaRun:
        """Compensate what is owed because the saga's code asked to, and end the run rolled back."""
        secrets = self.secrets_held(self.context)
        cause = ErrorInfo(REQUESTED, reason)
        report = await run_shielded(self._roll_back(FailureKind.REQUESTED, cause, secrets))
        return self._rolled_back(report, None)

    def _rolled_back(self, report: SagaReport, cause: BaseException | None) -> SagaRun:
        error_type = SagaCompensationFailed if report.compensation_failures else SagaRolledBack
        error: SagaFailed = error_type(report)
        error.__cause__ = cause
        self.outcome = SagaRun(tuple(self.recorder.events), None, error, report)
        return self.outcome

    async def _roll_back(self, kind: FailureKind, cause: ErrorInfo, secrets: tuple[str, ...]) -> SagaReport:
        """The shielded part of a rollback: the compensations, newest first, then the final event."""
        recorder = self.recorder
        for succeeded in self.unrecorded:
            if succeeded not in recorder.events:
                recorder.publish(succeeded)  # the step did succeed, and is compensated below
        await roll_back(
            recorder, reversed(self.owed), default_retry=self.retry, budget=self.budget, secrets=secrets
        )
        return await conclude_rollback(recorder, self.saga, self.started, kind, cause)

    def secrets_held(self, latest: AegisContext) -> tuple[str, ...]:
        """Every secret value the run has held: in each context so far and in any step's arguments.

        Not only the failing step's: a step may have swapped the card for a token, or a later one
        added a key, and an error's text (or note) may quote any of them.
        """
        # Each context's metadata keeps the secrets found in it (a merge derives them from its
        # parent's, the same tuple when a step added none), so this reads each tuple once.
        held = [*self.initial.secret_values(), *latest.secret_values()]
        read: set[int] = set()
        for owed in self.owed:
            for item in owed.members if isinstance(owed, OwedGroup) else (owed,):
                found = item.snapshot.secret_values()
                if id(found) not in read:  # the tuples live as long as the run's contexts
                    read.add(id(found))
                    held += found
        for spec in self.specs:
            if spec.args or spec.kwargs:
                held += argument_secrets(spec.args, spec.kwargs)
        return tuple(dict.fromkeys(held))


def _sibling(failed: list[BaseException]) -> ErrorInfo | None:
    """Why a group's member was cancelled, if a sibling's failure did it."""
    return sibling_cancelled(type(failed[0]).__name__) if failed else None


def _index(owed: OwedCompensation) -> int:
    return owed.spec.index


def classify(exc: BaseException) -> FailureKind:
    """Why the forward phase stopped, from the exception that stopped it."""
    if isinstance(exc, ToolTimeoutError):
        return FailureKind.TIMEOUT
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return FailureKind.CANCELLED
    if not isinstance(exc, Exception):
        return FailureKind.INTERRUPTED
    return FailureKind.ERROR
