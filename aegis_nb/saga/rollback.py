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
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolTimeoutError
from aegis_nb.kernel.executor import DeadlineGuard
from aegis_nb.kernel.records import record
from aegis_nb.kernel.report import CompensationFailure, ErrorInfo, StepRef
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.events import CompensationFailed, CompensationStarted, CompensationSucceeded
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


class _Attempt:
    """The compensation in progress: which step, which attempt, and its remaining backoff delays."""

    __slots__ = ("delays", "item", "number", "policy", "started")

    def __init__(self, item: OwedCompensation, policy: RetryPolicy) -> None:
        self.item = item
        self.policy = policy
        self.delays = policy.delays()
        self.number = 1
        self.started = 0.0


async def roll_back(
    recorder: RunRecorder,
    owed: Sequence[OwedCompensation],
    *,
    default_retry: RetryPolicy,
    budget: float,
) -> RollbackResult:
    """Compensate `owed` in the order given (callers pass newest first), shielded from cancellation."""
    rollback = _Rollback(recorder, budget)
    pending = deque(_Attempt(item, item.spec.retry or default_retry) for item in owed)
    with anyio.CancelScope(shield=True):
        while pending:
            # A fresh backstop after each one that fired; normally this loop runs once.
            guard = DeadlineGuard(recorder.clock() + 2 * budget, recorder.clock)
            try:
                with guard:
                    while pending:
                        await rollback.attempt(guard, pending)
            except ToolTimeoutError as exc:
                await rollback.failed(pending, exc, None)
    return RollbackResult(tuple(rollback.compensated), tuple(rollback.failures))


class _Rollback:
    def __init__(self, recorder: RunRecorder, budget: float) -> None:
        self.recorder = recorder
        self.budget = budget
        self.compensated: list[StepRef] = []
        self.failures: list[CompensationFailure] = []

    async def attempt(self, guard: DeadlineGuard, pending: deque[_Attempt]) -> None:
        """Run the first pending attempt; on success or final failure, drop it from `pending`."""
        attempt = pending[0]
        spec = attempt.item.spec
        attempt.started = now = guard.begin(spec.name)
        if guard.deadline < now + self.budget:
            guard.deadline = now + 2 * self.budget
        ctx = attempt.item.snapshot._with_budget(now + self.budget)
        await self.recorder.emit(CompensationStarted, spec.index, spec.name, attempt.number)
        try:
            await spec.step.compensate(ctx, *spec.args, **spec.kwargs)
        except Exception as exc:
            await self.failed(pending, exc, guard)
        else:
            pending.popleft()
            duration = self.recorder.clock() - now
            await self.recorder.emit(CompensationSucceeded, spec.index, spec.name, attempt.number, duration)
            self.compensated.append(StepRef(spec.index, spec.name))

    async def failed(self, pending: deque[_Attempt], exc: Exception, guard: DeadlineGuard | None) -> None:
        """Record a failed attempt; back off before the next one, or give up on this step."""
        attempt = pending[0]
        spec, clock = attempt.item.spec, self.recorder.clock
        error = ErrorInfo.from_exception(exc, attempt.item.snapshot.secret_values())
        will_retry = attempt.number < attempt.policy.attempts
        await self.recorder.emit(
            CompensationFailed,
            spec.index,
            spec.name,
            attempt.number,
            clock() - attempt.started,
            error,
            will_retry,
        )
        if not will_retry:
            pending.popleft()
            self.failures.append(CompensationFailure(StepRef(spec.index, spec.name), attempt.number, error))
            return
        delay = next(attempt.delays)
        attempt.number += 1
        # Keep the backstop clear of the backoff, so it can only fire on a compensation.
        now = clock()
        if guard is not None and guard.deadline < now + delay + self.budget:
            guard.deadline = now + delay + 2 * self.budget
        await anyio.sleep(delay)
