"""Compensation: undo completed steps newest first, retrying each with backoff, skipping none.

Shared by the live engine and recovery, so a rollback after a crash behaves exactly like one in
process: same budget per attempt, same retry policy, same events.

Each attempt's context carries an exact deadline (now + budget) for the compensation to honour.
The engine's own backstop is one cancel scope for the whole rollback, re-armed only when less than
a budget remains: an attempt is never cancelled before its budget is spent, and at the latest at
twice it. Arming a timer per attempt would cost more than the rest of the rollback.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolTimeoutError
from aegis_nb.kernel.executor import DeadlineGuard
from aegis_nb.kernel.records import record
from aegis_nb.kernel.report import CompensationFailure, ErrorInfo, StepRef
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    SagaEvent,
)
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy


@record
class OwedCompensation:
    """A step to undo and the context its compensation receives (what its execute produced)."""

    spec: StepSpec
    snapshot: AegisContext


@dataclass(frozen=True, slots=True)
class RollbackResult:
    compensated: tuple[StepRef, ...]
    failures: tuple[CompensationFailure, ...]


async def roll_back(
    recorder: RunRecorder,
    owed: Sequence[OwedCompensation],
    *,
    default_retry: RetryPolicy,
    budget: float,
) -> RollbackResult:
    """Compensate `owed` in the order given (callers pass newest first), shielded from cancellation."""
    rollback = _Rollback(recorder, owed, default_retry, budget)
    with anyio.CancelScope(shield=True):
        while rollback.pending:
            # A fresh backstop after each one that fired; normally this loop runs once.
            guard = DeadlineGuard(recorder.clock() + 2 * budget, recorder.clock)
            try:
                with guard:
                    await rollback.drain(guard)
            except ToolTimeoutError as exc:
                await rollback.failed(exc, None)
    return RollbackResult(tuple(rollback.compensated), tuple(rollback.failures))


class _Rollback:
    """The queue of owed compensations; retry state is kept for the head of the queue only."""

    def __init__(
        self,
        recorder: RunRecorder,
        owed: Sequence[OwedCompensation],
        default_retry: RetryPolicy,
        budget: float,
    ) -> None:
        self.recorder = recorder
        self.pending = deque(owed)
        self.default_retry = default_retry
        self.budget = budget
        self.compensated: list[StepRef] = []
        self.failures: list[CompensationFailure] = []
        self.attempt_number = 1
        self.attempt_started = 0.0
        self.delays: Iterator[float] | None = None

    def _next(self) -> None:
        self.pending.popleft()
        self.attempt_number = 1
        self.delays = None

    async def drain(self, guard: DeadlineGuard) -> None:
        """Compensate the pending steps in order; a failed attempt is retried or given up on in place."""
        recorder, budget, pending = self.recorder, self.budget, self.pending
        run_id, clock, journal, publish = recorder.run_id, recorder.clock, recorder.journal, recorder.publish
        while pending:
            item = pending[0]
            spec = item.spec
            self.attempt_started = now = guard.begin(spec.name)
            if guard.deadline < now + budget:
                guard.deadline = now + 2 * budget
            ctx = item.snapshot._with_budget(now + budget)
            # recorder.emit, inlined: a long rollback is two events per step, like the forward phase.
            event: SagaEvent = CompensationStarted(
                run_id, len(recorder.events), now, spec.index, spec.name, self.attempt_number
            )
            if journal is not None:
                await journal.append(event)
            publish(event)
            try:
                await spec.step.compensate(ctx, *spec.args, **spec.kwargs)
            except Exception as exc:
                await self.failed(exc, guard)
                continue
            attempt = self.attempt_number
            self._next()
            done = clock()
            event = CompensationSucceeded(
                run_id, len(recorder.events), done, spec.index, spec.name, attempt, done - now
            )
            if journal is not None:
                await journal.append(event)
            publish(event)
            self.compensated.append(StepRef(spec.index, spec.name))

    async def failed(self, exc: Exception, guard: DeadlineGuard | None) -> None:
        """Record a failed attempt; back off before the next one, or give up on this step."""
        item, clock = self.pending[0], self.recorder.clock
        spec = item.spec
        policy = spec.retry or self.default_retry
        error = ErrorInfo.from_exception(exc, item.snapshot.secret_values())
        attempt = self.attempt_number
        will_retry = attempt < policy.attempts
        await self.recorder.emit(
            CompensationFailed,
            spec.index,
            spec.name,
            attempt,
            clock() - self.attempt_started,
            error,
            will_retry,
        )
        if not will_retry:
            self._next()
            self.failures.append(CompensationFailure(StepRef(spec.index, spec.name), attempt, error))
            return
        if self.delays is None:
            self.delays = policy.delays()
        delay = next(self.delays)
        self.attempt_number += 1
        # Keep the backstop clear of the backoff, so it can only fire on a compensation.
        now = clock()
        if guard is not None and guard.deadline < now + delay + self.budget:
            guard.deadline = now + delay + 2 * self.budget
        await anyio.sleep(delay)
