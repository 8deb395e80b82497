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
from typing import NamedTuple

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolTimeoutError
from aegis_nb.kernel.executor import DeadlineGuard
from aegis_nb.kernel.records import builder
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

_new_started = builder(CompensationStarted)
_new_succeeded = builder(CompensationSucceeded)
_new_step_ref = builder(StepRef)


class OwedCompensation(NamedTuple):
    """A step to undo and the context its compensation receives (what its execute produced).

    `roll_back` takes any ``(spec, snapshot)`` pairs; the engine passes plain tuples.
    """

    spec: StepSpec
    snapshot: AegisContext


@dataclass(frozen=True, slots=True)
class RollbackResult:
    compensated: tuple[StepRef, ...]
    failures: tuple[CompensationFailure, ...]


async def roll_back(
    recorder: RunRecorder,
    owed: Sequence[tuple[StepSpec, AegisContext]],
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
        owed: Sequence[tuple[StepSpec, AegisContext]],
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
        recorder, budget, pending, compensated = self.recorder, self.budget, self.pending, self.compensated
        run_id, clock, journal, events = recorder.run_id, recorder.clock, recorder.journal, recorder.events
        backstop = guard.deadline  # mirrored locally: read once per compensation, written rarely
        while pending:
            spec, snapshot = pending[0]
            index, name, step, args, kwargs, _, _, _ = spec
            guard.step = name
            self.attempt_started = guard.started_at = now = clock()
            if backstop < now + budget:
                guard.deadline = backstop = now + 2 * budget
            ctx = snapshot._with_budget(now + budget)
            # recorder.emit and .publish, inlined: a long rollback is two events per step, like
            # the forward phase.
            event: SagaEvent = _new_started(run_id, len(events), now, index, name, self.attempt_number)
            if journal is not None:
                await journal.append(event)
            events.append(event)
            for sink, origin in recorder.sinks:
                try:
                    sink(event)
                except Exception:
                    recorder.detach(sink, origin, event)
            try:
                if args or kwargs:
                    await step.compensate(ctx, *args, **kwargs)
                else:  # unpacking empty args costs as much as the rest of the call
                    await step.compensate(ctx)
            except Exception as exc:
                await self.failed(exc, guard)
                backstop = guard.deadline
                continue
            attempt = self.attempt_number
            if attempt == 1:
                pending.popleft()
            else:
                self._next()
            done = clock()
            event = _new_succeeded(run_id, len(events), done, index, name, attempt, done - now)
            if journal is not None:
                await journal.append(event)
            events.append(event)
            for sink, origin in recorder.sinks:
                try:
                    sink(event)
                except Exception:
                    recorder.detach(sink, origin, event)
            compensated.append(_new_step_ref(index, name))

    async def failed(self, exc: Exception, guard: DeadlineGuard | None) -> None:
        """Record a failed attempt; back off before the next one, or give up on this step."""
        (spec, snapshot), clock = self.pending[0], self.recorder.clock
        policy = spec.retry or self.default_retry
        error = ErrorInfo.from_exception(exc, snapshot.secret_values())
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
