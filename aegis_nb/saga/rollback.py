"""Compensation: undo completed steps newest first, retrying each with backoff, skipping none.

Shared by the live engine and recovery, so a rollback after a crash behaves exactly like one in
process: same budget per attempt, same retry policy, same events, and the same conclusion
(`conclude_rollback`, which the Temporal workflow uses too).

Each attempt's context carries an exact deadline (start + budget) for the compensation to honour.
The engine's own backstop is one cancel scope for the whole rollback, pushed out only when less than
a budget remains: an attempt is never cut off before its budget is spent, and at the latest at twice
it. (A timer per attempt would cost more than the rest of the rollback.) When the backstop fires it
ends the scope; the cut-off attempt is recorded as failed and the rollback resumes with it under a
fresh backstop. An attempt (or a journal write) that outlives the backstop inside a shield of its own
leaves the scope cancelled; it is then swapped for a fresh one before anything else awaits.

The rollback is shielded from the caller's cancellation: anyio's here, asyncio's native one by
`aegis_nb.kernel.shielding.run_shielded`, through which the engine runs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolTimeoutError
from aegis_nb.kernel.executor import DeadlineGuard
from aegis_nb.kernel.report import CompensationFailure, ErrorInfo, FailureKind, SagaReport, SagaStatus
from aegis_nb.kernel.undo import NOTHING_TO_UNDO
from aegis_nb.kernel.values import argument_secrets
from aegis_nb.saga.definition import StepSpec, group_start
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    SagaRolledBackEvent,
    SagaStuck,
)
from aegis_nb.saga.history import fold_report
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.rules import INTERRUPTED, backoff, cut_off, retry_policy, rollback_order
from aegis_nb.saga.rules import OwedGroup as OwedGroup  # where recovery and older code import it


class OwedCompensation(NamedTuple):
    """A step to undo and the context its compensation receives (what its execute produced)."""

    spec: StepSpec
    snapshot: AegisContext


Owed: TypeAlias = OwedCompensation | OwedGroup[OwedCompensation]
"""What a rollback undoes: one step, or a parallel group's members."""


@dataclass(frozen=True, slots=True)
class RollbackResult:
    """The steps undone, in order, and those given up on after their last attempt."""

    compensated: tuple[str, ...]
    failures: tuple[CompensationFailure, ...]


async def roll_back(
    recorder: RunRecorder,
    owed: Iterable[Owed | tuple[StepSpec, AegisContext]],
    *,
    default_retry: RetryPolicy,
    budget: float,
    secrets: tuple[str, ...] = (),
) -> RollbackResult:
    """Compensate `owed` in the order given (callers pass newest first), shielded from cancellation.

    A parallel group's members are compensated together, each with its own retries (a failure never
    stops its siblings'), or one by one, newest start first, as the group's order says.

    `secrets` are the values the run has held, scrubbed from every failure's text (besides those in
    each step's own snapshot and arguments). An interrupt (KeyboardInterrupt, SystemExit) in a
    compensation is recorded as that attempt's failure, still owed, and raised: the rest of the
    rollback is left to `recover()`.
    """
    rollback = _Rollback(recorder, owed, default_retry, budget, secrets)
    with anyio.CancelScope(shield=True):
        await rollback.run()
    return RollbackResult(tuple(rollback.compensated), tuple(rollback.failures))


async def conclude_rollback(
    recorder: RunRecorder, saga: str, started: float, kind: FailureKind, cause: ErrorInfo
) -> SagaReport:
    """End a run whose rollback is over: its report, folded from its events, in its final event.

    The run is stuck if some compensation was given up on, else rolled back; `kind` and `cause` say
    why it failed (its events hold them only when a step failed). Shared by the live engine, recovery
    and the Temporal workflow, so all three end a run alike.
    """
    folded = fold_report(recorder.events)
    stuck = bool(folded.compensation_failures)
    status = SagaStatus.STUCK if stuck else SagaStatus.ROLLED_BACK
    report = dataclasses.replace(folded, status=status, failure_kind=kind, cause=cause)
    final = SagaStuck if stuck else SagaRolledBackEvent
    duration = recorder.clock() - started
    await recorder.record(final(*recorder.header(), saga=saga, duration=duration, report=report))
    return report


class _Rollback:
    """Works through the owed compensations in order; retry state is kept for the one in hand."""

    def __init__(
        self,
        recorder: RunRecorder,
        owed: Iterable[Owed | tuple[StepSpec, AegisContext]],
        default_retry: RetryPolicy,
        budget: float,
        secrets: tuple[str, ...],
    ) -> None:
        self.recorder = recorder
        self.clock = recorder.clock
        # The first is in hand until it succeeds or is given up on.
        self.pending: deque[Owed] = deque(rollback_order(map(_owed, owed)))
        self.default_retry = default_retry
        self.budget = budget
        self.secrets = secrets
        self.compensated: list[str] = []
        self.failures: list[CompensationFailure] = []
        self.attempt = 1  # of the compensation in hand

    async def run(self) -> None:
        """Compensate each owed step in turn; resume after the backstop cuts an attempt off."""
        while self.pending:
            head = self.pending[0]
            if isinstance(head, OwedGroup):
                await self._compensate_together(head)
                self.pending.popleft()
                continue
            backstop = DeadlineGuard(self.clock() + 2 * self.budget, self.clock)
            try:
                with backstop:
                    while self.pending and not isinstance(self.pending[0], OwedGroup):
                        await self._compensate(*self.pending[0], backstop)
                        self.pending.popleft()
            except ToolTimeoutError:
                # The backstop names the attempt it cut off; the error states the budget it was
                # given, and when it was cut off (between one and two budgets after it started).
                error = cut_off(backstop.step, self.budget, backstop.deadline - backstop.started_at)
                if not await self._failed(error, backstop.started_at, None):
                    self.pending.popleft()

    async def _compensate_together(self, group: OwedGroup[OwedCompensation]) -> None:
        """Compensate a group's members at once, each as a rollback of its own, in its own task."""
        rollbacks = [
            _Rollback(self.recorder, (member,), self.default_retry, self.budget, self.secrets)
            for member in group.members
        ]
        interrupts: list[BaseException] = []

        async def compensate(rollback: _Rollback) -> None:
            try:
                await rollback.run()
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:  # an interrupt, recorded and still owed: see below
                interrupts.append(exc)

        # Caught in its task: asyncio raises an interrupt that leaves a task out of the event loop
        # itself, past every handler. The siblings finish their own compensations, then it is raised.
        async with anyio.create_task_group() as tasks:
            for rollback in rollbacks:
                tasks.start_soon(compensate, rollback)
        for rollback in rollbacks:
            self.compensated += rollback.compensated
            self.failures += rollback.failures
        if interrupts:
            raise interrupts[0]

    async def _compensate(self, spec: StepSpec, snapshot: AegisContext, backstop: DeadlineGuard) -> None:
        """Compensate `spec` until an attempt succeeds or its retries are spent."""
        recorder = self.recorder
        while True:
            started = backstop.begin(spec.name)
            await recorder.record(
                CompensationStarted(
                    *recorder.header(started),
                    index=spec.index,
                    step=spec.name,
                    attempt=self.attempt,
                    group=group_start(spec),
                )
            )
            if recorder.journal is not None:  # the budget starts after the write, which took a while
                started = backstop.begin(spec.name)
            self._arm(backstop, started, started + self.budget)
            ctx = snapshot.with_budget(started + self.budget)
            try:
                result = await spec.step.compensate(ctx, *spec.args, **spec.kwargs)
            except BaseException as exc:
                if isinstance(exc, Exception) or _stray_cancellation(exc):
                    if await self._failed(exc, started, backstop):
                        continue
                    return
                if not isinstance(exc, anyio.get_cancelled_exc_class()):
                    await self._interrupted(spec, exc, started)
                raise  # an interrupt, or the backstop's cancellation (see `run`)
            now = self.clock()
            self._arm(backstop, now, now)  # an attempt that outlived the backstop in a shield
            await recorder.record(
                CompensationSucceeded(
                    *recorder.header(now),
                    index=spec.index,
                    step=spec.name,
                    attempt=self.attempt,
                    duration=now - started,
                    group=group_start(spec),
                    nothing_to_undo=result is NOTHING_TO_UNDO,
                )
            )
            self.compensated.append(spec.name)
            self.attempt = 1
            return

    def _arm(self, backstop: DeadlineGuard, now: float, until: float) -> None:
        """Keep the backstop clear of `until`: pushed out to a budget past it when less remains, and
        swapped for a fresh scope if it fired while a shielded wait (a write, an attempt) outlived it."""
        if now >= backstop.deadline:
            backstop.renew(until + self.budget)
        elif backstop.deadline < until:
            backstop.deadline = until + self.budget

    async def _failed(self, exc: BaseException, started: float, backstop: DeadlineGuard | None) -> bool:
        """Record a failed attempt of the compensation in hand (begun at `started`).

        Returns whether it will be retried, after backing off; otherwise it is given up on.
        """
        head = self.pending[0]
        assert isinstance(head, OwedCompensation)
        spec, snapshot = head
        policy = retry_policy(spec.retry, self.default_retry)
        secrets = self.secrets + snapshot.secret_values()
        if spec.args or spec.kwargs:
            secrets += argument_secrets(spec.args, spec.kwargs)
        error = ErrorInfo.from_exception(exc, secrets)
        delay = backoff(policy, self.attempt)
        await self._record_failure(spec, started, error, will_retry=delay is not None)
        if delay is None:
            self.failures.append(CompensationFailure(spec.name, self.attempt, error))
            self.attempt = 1
            return False
        self.attempt += 1
        if backstop is not None:  # clear of the backoff, so it can only fire on a compensation
            now = self.clock()
            self._arm(backstop, now, now + delay + self.budget)
        await anyio.sleep(delay)
        return True

    async def _interrupted(self, spec: StepSpec, exc: BaseException, started: float) -> None:
        """Record that an interrupt stopped this attempt: it is still owed (``will_retry``), and the
        run stays unfinished in the journal, for `recover()` to finish."""
        error = ErrorInfo(type(exc).__name__, INTERRUPTED)
        await self._record_failure(spec, started, error, will_retry=True)

    async def _record_failure(
        self, spec: StepSpec, started: float, error: ErrorInfo, will_retry: bool
    ) -> None:
        """Record that the attempt in hand of `spec`'s compensation (begun at `started`) failed."""
        recorder, now = self.recorder, self.clock()
        await recorder.record(
            CompensationFailed(
                *recorder.header(now),
                index=spec.index,
                step=spec.name,
                attempt=self.attempt,
                duration=now - started,
                error=error,
                will_retry=will_retry,
                group=group_start(spec),
            )
        )


def _owed(item: Owed | tuple[StepSpec, AegisContext]) -> Owed:
    """`item` as owed: a group, or one step with its snapshot (recovery passes plain pairs)."""
    return item if isinstance(item, OwedCompensation | OwedGroup) else OwedCompensation(*item)


def _stray_cancellation(exc: BaseException) -> bool:
    """Whether `exc` is an asyncio CancelledError that no cancellation of this task sent.

    A compensation that awaits a future or task cancelled elsewhere raises one. Nothing cancels
    the rollback's own task but the backstop (which counts in ``cancelling()``), so it is a
    failure of that compensation, to retry and report, not a reason to abandon the others.
    """
    if not isinstance(exc, asyncio.CancelledError):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio, where no cancellation comes as asyncio's error
        return True
    return task is not None and task.cancelling() == 0
