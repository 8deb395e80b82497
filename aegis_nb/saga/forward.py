"""One run of a saga: the forward phase, then the commit or the rollback.

Forward, one cancel scope covers the whole phase and is re-armed only when the deadline changes
(a scope per step would cost ten times the engine itself). Each step gets the context the previous
one returned, stamped with its idempotency key. On an exception, a timeout, a cancellation or an
interrupt, every completed step is compensated with the context its own execute returned, under a
fresh compensation budget and shielded from the cancellation (asyncio's native one included, and
one that arrives mid-rollback); then the cancellation or interrupt propagates unchanged, and any
other failure becomes `SagaRolledBack` or `SagaCompensationFailed`.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import (
    SagaCompensationFailed,
    SagaFailed,
    SagaRolledBack,
    StepResultError,
    ToolTimeoutError,
)
from aegis_nb.kernel.executor import DeadlineGuard
from aegis_nb.kernel.records import builder
from aegis_nb.kernel.report import (
    CompensationFailure,
    ErrorInfo,
    FailureKind,
    SagaReport,
    SagaStatus,
)
from aegis_nb.kernel.scrubbing import scrubbed_cause
from aegis_nb.kernel.shielding import run_shielded
from aegis_nb.kernel.values import argument_secrets
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.events import (
    SagaCommitted,
    SagaCompensated,
    SagaEvent,
    SagaStarted,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.rollback import roll_back

_new_step_started = builder(StepStarted)
_new_step_succeeded = builder(StepSucceeded)


class Forward:
    """One run: the forward phase, then commit or rollback (under `retry` and `budget`)."""

    def __init__(
        self,
        recorder: RunRecorder,
        saga: str,
        specs: tuple[StepSpec, ...],
        ctx: AegisContext,
        retry: RetryPolicy,
        budget: float,
    ) -> None:
        self.retry = retry
        self.budget = budget
        self.recorder = recorder
        self.saga = saga
        self.specs = specs
        self.initial = ctx
        self.step_names = tuple([s.name for s in specs])
        self.snapshots: list[AegisContext] = []  # what each completed step's execute returned

    async def run(self) -> SagaRun:
        recorder, clock = self.recorder, self.recorder.clock
        run_id, journal, events = recorder.run_id, recorder.journal, recorder.events
        snapshots = self.snapshots
        started = clock()
        current = self.initial
        guard = DeadlineGuard(current.deadline, clock)
        deadline = guard.deadline  # mirrored locally: read twice per step, written rarely
        # What _fail needs to know if the step in hand raises.
        running: StepSpec | None = None
        unrecorded: SagaEvent | None = None  # a StepSucceeded the journal has not recorded yet
        step_input = current
        step_started = now = clock()
        try:
            # Inside the try: a cancellation the journal held during this write ends the run as
            # rolled back (nothing to undo), not as a run left open.
            await recorder.emit(SagaStarted, self.saga, self.step_names, current.deadline, current)
            step_started = now = clock()
            with guard:
                for spec in self.specs:
                    index, name, step, args, kwargs, timeout, _, _ = spec
                    step_input = current._for_step(run_id, index)
                    # Nothing awaits between the last step's end and this one's start: one clock
                    # reading serves both.
                    guard.step = name
                    guard.started_at = step_started = now
                    if timeout is not None:
                        guard.deadline = deadline = min(current.deadline, step_started + timeout)
                    if step_started >= deadline:
                        # Refused before it started: not the failed step, and owed no compensation
                        # even if in doubt. The error names it and says so, for the report's summary.
                        raise ToolTimeoutError(name, deadline - step_started, "; it was not run")
                    await recorder.record(_new_step_started(run_id, len(events), step_started, index, name))

                    # From here on the step may have acted (not if its StepStarted write failed).
                    running = spec
                    # Unpacking empty args costs as much as the rest of the call: skip it.
                    if args or kwargs:
                        result = await step.execute(step_input, *args, **kwargs)
                    else:
                        result = await step.execute(step_input)

                    current = step_input if result is None else self._accept(spec, step_input, result)
                    if current._deadline != deadline:  # a shorter one, or the end of a step timeout
                        if current._deadline > deadline and deadline <= clock():
                            # The step outlived its timeout in a shield of its own and succeeded: the
                            # scope stays cancelled and would cut off the next step, which has time.
                            guard.renew(current._deadline)
                        guard.deadline = deadline = current._deadline
                    snapshots.append(current)
                    running = None
                    now = clock()
                    # Held here until recorded: if the journal write fails, the rollback still
                    # publishes the success, so the run's events tell what happened.
                    unrecorded = _new_step_succeeded(
                        run_id, len(events), now, index, name, now - step_started, current
                    )
                    await recorder.record(unrecorded)
                    unrecorded = None
                    if journal is not None:
                        now = clock()  # the write took time
        except BaseException as exc:
            return await self._fail(exc, started, running, step_input, step_started, unrecorded)
        try:
            await recorder.emit(SagaCommitted, self.saga, clock() - started, current)
        except BaseException as exc:
            if events and isinstance(events[-1], SagaCommitted):
                # The commit is recorded (a cancellation waits for the write, see RunRecorder.record):
                # the run did commit, and nothing undoes it; the cancellation or a sink's interrupt
                # propagates after it.
                raise
            # The commit's journal write failed: the run is not committed (recovery would undo it),
            # so it is rolled back here as after any other failure between steps.
            return await self._fail(exc, started, None, current, clock())
        return SagaRun(tuple(events), current, None)

    def _accept(self, spec: StepSpec, step_input: AegisContext, result: object) -> AegisContext:
        """The context a step produced, checked, stamped, and never with a later deadline."""
        if not isinstance(result, AegisContext):
            raise StepResultError(
                f"step {spec.name!r}: execute() must return an AegisContext or None, "
                f"got {type(result).__name__}"
            )
        # A context derived from the step's own input already carries its stamp: no copy needed.
        if result._step_index != spec.index or result._run_id != self.recorder.run_id:
            result = result._for_step(self.recorder.run_id, spec.index)
        if result._deadline > step_input._deadline:
            result = result._with_budget(step_input._deadline)
        return result

    async def _fail(
        self,
        exc: BaseException,
        started: float,
        failed: StepSpec | None,
        step_input: AegisContext,
        step_started: float,
        unrecorded: SagaEvent | None = None,
    ) -> SagaRun:
        """Record the failure, compensate shielded, then re-raise cancellations or build the error.

        `failed` is the step whose execute was running (None if the failure came between steps),
        `step_input` the context it was given and `step_started` when. The shield holds against
        native asyncio cancellation too (see `run_shielded`): a caller's ``asyncio.timeout`` still
        waits for every owed compensation, then gets its cancellation.
        """
        kind = _classify(exc)
        secrets = self._secrets_held(step_input)
        cause = ErrorInfo.from_exception(exc, secrets)
        report = await run_shielded(
            self._roll_back(exc, kind, cause, secrets, started, failed, step_input, step_started, unrecorded)
        )
        if kind in (FailureKind.CANCELLED, FailureKind.INTERRUPTED):
            raise exc
        error_type = SagaCompensationFailed if report.compensation_failures else SagaRolledBack
        error: SagaFailed = error_type(report)
        error.__cause__ = scrubbed_cause(exc, secrets)
        return SagaRun(tuple(self.recorder.events), None, error, report)

    def _secrets_held(self, step_input: AegisContext) -> tuple[str, ...]:
        """Every secret value the run has held: in each context so far and in any step's arguments.

        Not only the failing step's: a step may have swapped the card for a token, or a later one
        added a key, and an error's text (or note) may quote any of them.
        """
        held = [*self.initial.secret_values(), *step_input.secret_values()]
        for snapshot in self.snapshots:
            held += snapshot.secret_values()
        for spec in self.specs:
            if spec.args or spec.kwargs:
                held += argument_secrets(spec.args, spec.kwargs)
        return tuple(dict.fromkeys(held))

    async def _roll_back(
        self,
        exc: BaseException,
        kind: FailureKind,
        cause: ErrorInfo,
        secrets: tuple[str, ...],
        started: float,
        failed: StepSpec | None,
        step_input: AegisContext,
        step_started: float,
        unrecorded: SagaEvent | None,
    ) -> SagaReport:
        """`_fail`'s shielded part: the failure's event, the compensations, the final event.

        `unrecorded` is a step's success that its journal write did not record: the step did
        succeed and will be compensated, so the run's events (and sinks) get it first.
        """
        recorder, clock = self.recorder, self.recorder.clock
        if unrecorded is not None and unrecorded not in recorder.events[-1:]:
            recorder.publish(unrecorded)
        snapshots = self.snapshots
        # Newest first, each with what its own execute returned; zip hands out its pairs lazily.
        owed: Iterable[tuple[StepSpec, AegisContext]]
        owed = zip(reversed(self.specs[: len(snapshots)]), reversed(snapshots), strict=True)
        if failed is not None:
            duration = clock() - step_started
            if isinstance(exc, ToolTimeoutError):
                budget = exc.budget if exc.budget is not None else duration
                await recorder.emit(StepTimedOut, failed.index, failed.name, duration, budget, cause)
            else:
                await recorder.emit(StepFailed, failed.index, failed.name, duration, kind, cause)
            # A refusal is the tool's own answer that it did not act: nothing is in doubt.
            if failed.in_doubt and not cause.refused:
                owed = chain([(failed, step_input)], owed)
        result = await roll_back(
            recorder, owed, default_retry=self.retry, budget=self.budget, secrets=secrets
        )
        status = SagaStatus.STUCK if result.failures else SagaStatus.ROLLED_BACK
        report = self._report(
            status,
            failed=failed,
            kind=kind,
            cause=cause,
            compensated=result.compensated,
            failures=result.failures,
        )
        final = SagaStuck if result.failures else SagaCompensated
        await recorder.emit(final, self.saga, clock() - started, report)
        return report

    def _report(
        self,
        status: SagaStatus,
        *,
        failed: StepSpec | None = None,
        kind: FailureKind | None = None,
        cause: ErrorInfo | None = None,
        compensated: tuple[str, ...] = (),
        failures: tuple[CompensationFailure, ...] = (),
    ) -> SagaReport:
        return SagaReport(
            run_id=self.recorder.run_id,
            saga=self.saga,
            status=status,
            steps=self.step_names,
            succeeded=self.step_names[: len(self.snapshots)],
            failed_step=None if failed is None else failed.name,
            failure_kind=kind,
            cause=cause,
            compensated=compensated,
            compensation_failures=failures,
        )


def _classify(exc: BaseException) -> FailureKind:
    if isinstance(exc, ToolTimeoutError):
        return FailureKind.TIMEOUT
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return FailureKind.CANCELLED
    if not isinstance(exc, Exception):
        return FailureKind.INTERRUPTED
    return FailureKind.ERROR
