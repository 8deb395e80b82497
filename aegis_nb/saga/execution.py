"""One run of a saga: the forward phase, then the commit or the rollback.

Each step gets the context the previous one returned, stamped with its idempotency key. One cancel
scope covers the whole forward phase and is touched only when the deadline changes (a scope per step
would cost ten times the engine itself). On an exception, a timeout, a cancellation or an interrupt,
every completed step is compensated, newest first, with the context its own execute returned
(`aegis_nb.saga.rollback`), shielded from the cancellation; then the cancellation or interrupt
propagates unchanged, and any other failure becomes `SagaRolledBack` or `SagaCompensationFailed`.

Every event goes through `RunRecorder.record`, whose journal write no cancellation cuts off: once
the run's end is recorded, the run committed, whatever the caller does next.
"""

from __future__ import annotations

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
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaReport
from aegis_nb.kernel.scrubbing import scrubbed_cause
from aegis_nb.kernel.shielding import run_shielded
from aegis_nb.kernel.values import argument_secrets
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.events import (
    SagaCommitted,
    SagaStarted,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.rollback import OwedCompensation, conclude_rollback, roll_back


class Execution:
    """One run of a saga: its steps forward, then the commit, or the rollback under `retry` and `budget`."""

    def __init__(
        self,
        recorder: RunRecorder,
        saga: str,
        specs: tuple[StepSpec, ...],
        ctx: AegisContext,
        retry: RetryPolicy,
        budget: float,
    ) -> None:
        self.recorder = recorder
        self.saga = saga
        self.specs = specs
        self.initial = ctx
        self.retry = retry
        self.budget = budget
        self.snapshots: list[AegisContext] = []  # what each completed step's execute returned

    async def run(self) -> SagaRun:
        recorder, clock = self.recorder, self.recorder.clock
        started = clock()
        current = self.initial
        guard = DeadlineGuard(current.deadline, clock)
        # What `_fail` needs to know if the step in hand raises.
        running: StepSpec | None = None  # the step whose execute may have acted
        step_input, step_started = current, started
        unrecorded: StepSucceeded | None = None  # a success the journal has not recorded yet
        try:
            # Inside the try: a cancellation the journal held during this write rolls back (nothing
            # to undo) rather than leaving the run open.
            names = tuple(spec.name for spec in self.specs)
            await recorder.record(
                SagaStarted(
                    *recorder.header(),
                    saga=self.saga,
                    steps=names,
                    deadline=current.deadline,
                    context=current,
                )
            )
            with guard:
                for spec in self.specs:
                    step_input = current.for_step(recorder.run_id, spec.index)
                    step_started = guard.begin(spec.name)
                    deadline = current.deadline
                    if spec.timeout is not None:
                        deadline = min(deadline, step_started + spec.timeout)
                    guard.rearm(deadline, step_started)
                    if step_started >= deadline:
                        # Refused before it started: not the failed step, and owed no compensation
                        # even if in doubt. The error names it and says so, for the report's summary.
                        raise ToolTimeoutError(spec.name, deadline - step_started, "; it was not run")
                    await recorder.record(
                        StepStarted(*recorder.header(step_started), index=spec.index, step=spec.name)
                    )
                    running = spec  # from here on the step may have acted
                    result = await spec.step.execute(step_input, *spec.args, **spec.kwargs)
                    current = step_input if result is None else self._accept(spec, step_input, result)
                    self.snapshots.append(current)
                    running = None
                    # Held until recorded: if the journal write fails, the rollback still publishes
                    # the success, so the run's events tell what happened.
                    now = clock()
                    unrecorded = StepSucceeded(
                        *recorder.header(now),
                        index=spec.index,
                        step=spec.name,
                        duration=now - step_started,
                        context=current,
                    )
                    await recorder.record(unrecorded)
                    unrecorded = None
        except BaseException as exc:
            return await self._fail(exc, started, running, step_input, step_started, unrecorded)
        try:
            now = clock()
            await recorder.record(
                SagaCommitted(*recorder.header(now), saga=self.saga, duration=now - started, context=current)
            )
        except BaseException as exc:
            if isinstance(recorder.events[-1], SagaCommitted):
                # The commit is recorded (a cancellation waits for the write): the run committed and
                # nothing undoes it; the cancellation or a sink's interrupt propagates after it.
                raise
            # The commit's journal write failed: the run is not committed (recovery would undo it),
            # so it is rolled back here as after any other failure between steps.
            return await self._fail(exc, started, None, current, clock())
        return SagaRun(tuple(recorder.events), current, None)

    def _accept(self, spec: StepSpec, step_input: AegisContext, result: object) -> AegisContext:
        """The context a step produced, checked, stamped, and never with a later deadline."""
        if not isinstance(result, AegisContext):
            raise StepResultError(
                f"step {spec.name!r}: execute() must return an AegisContext or None, "
                f"got {type(result).__name__}"
            )
        # A context derived from the step's own input already carries its stamp: no copy needed.
        if result.step_index != spec.index or result.run_id != self.recorder.run_id:
            result = result.for_step(self.recorder.run_id, spec.index)
        if result.deadline > step_input.deadline:
            result = result.with_budget(step_input.deadline)
        return result

    async def _fail(
        self,
        exc: BaseException,
        started: float,
        failed: StepSpec | None,
        step_input: AegisContext,
        step_started: float,
        unrecorded: StepSucceeded | None = None,
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
        unrecorded: StepSucceeded | None,
    ) -> SagaReport:
        """`_fail`'s shielded part: the failure's event, the compensations, the final event."""
        recorder = self.recorder
        if unrecorded is not None and unrecorded not in recorder.events[-1:]:
            recorder.publish(unrecorded)  # the step did succeed, and is compensated below
        # Newest first, each with what its own execute returned.
        done = self.specs[: len(self.snapshots)]
        owed = [
            OwedCompensation(*pair) for pair in zip(reversed(done), reversed(self.snapshots), strict=True)
        ]
        if failed is not None:
            duration = recorder.clock() - step_started
            header = recorder.header()
            if isinstance(exc, ToolTimeoutError):
                budget = exc.budget if exc.budget is not None else duration
                event: StepTimedOut | StepFailed = StepTimedOut(
                    *header,
                    index=failed.index,
                    step=failed.name,
                    duration=duration,
                    budget=budget,
                    error=cause,
                )
            else:
                event = StepFailed(
                    *header, index=failed.index, step=failed.name, duration=duration, kind=kind, error=cause
                )
            await recorder.record(event)
            # A refusal is the tool's own answer that it did not act: nothing is in doubt.
            if failed.in_doubt and not cause.refused:
                owed.insert(0, OwedCompensation(failed, step_input))
        await roll_back(recorder, owed, default_retry=self.retry, budget=self.budget, secrets=secrets)
        return await conclude_rollback(recorder, self.saga, started, kind, cause)

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


def _classify(exc: BaseException) -> FailureKind:
    if isinstance(exc, ToolTimeoutError):
        return FailureKind.TIMEOUT
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return FailureKind.CANCELLED
    if not isinstance(exc, Exception):
        return FailureKind.INTERRUPTED
    return FailureKind.ERROR
