"""Compensation: undo completed steps newest first, retrying each with backoff, skipping none.

Shared by the live engine and recovery, so a rollback after a crash behaves exactly like one in
process: same budget per attempt, same retry policy, same events.

Each attempt's context carries an exact deadline (now + budget) for the compensation to honour.
The engine's own backstop is one cancel scope for the whole rollback, re-armed only when less than
a budget remains: an attempt is never cancelled before its budget is spent, and at the latest at
twice it. Arming a timer per attempt would cost more than the rest of the rollback. An attempt that
outlives the backstop inside a shield of its own is not cut off, but leaves the backstop's scope
cancelled; the scope is then swapped for a fresh one before anything else awaits.

`anyio.CancelScope(shield=True)` stops only anyio's cancellation. On asyncio a native `Task.cancel()`
(`asyncio.timeout`, `wait_for`, a cancelled `asyncio.TaskGroup`) goes through it, so the engine runs
its rollback with `aegis_nb.kernel.shielding.run_shielded`, which stops both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolTimeoutError
from aegis_nb.kernel.executor import DeadlineGuard
from aegis_nb.kernel.records import builder
from aegis_nb.kernel.report import CompensationFailure, ErrorInfo
from aegis_nb.kernel.values import argument_secrets
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
)
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy

_new_started = builder(CompensationStarted)
_new_succeeded = builder(CompensationSucceeded)


class OwedCompensation(NamedTuple):
    """A step to undo and the context its compensation receives (what its execute produced).

    `roll_back` takes any ``(spec, snapshot)`` pairs; the engine passes plain tuples.
    """

    spec: StepSpec
    snapshot: AegisContext


@dataclass(frozen=True, slots=True)
class RollbackResult:
    compensated: tuple[str, ...]
    failures: tuple[CompensationFailure, ...]


async def roll_back(
    recorder: RunRecorder,
    owed: Iterable[tuple[StepSpec, AegisContext]],
    *,
    default_retry: RetryPolicy,
    budget: float,
    secrets: tuple[str, ...] = (),
) -> RollbackResult:
    """Compensate `owed` in the order given (callers pass newest first), shielded from cancellation.

    `secrets` are the values the run has held, scrubbed from every failure's text (besides those
    in each step's own snapshot and arguments). The shield is anyio's: on asyncio, call this through
    `run_shielded` to survive a native `Task.cancel()` as well. An interrupt (KeyboardInterrupt,
    SystemExit) in a compensation is recorded as that attempt's failure, still owed, and raised:
    the rest of the rollback is left to `recover()`.
    """
    rollback = _Rollback(recorder, owed, default_retry, budget, secrets)
    with anyio.CancelScope(shield=True):
        while not rollback.done:
            # A fresh backstop after each one that fired; normally this loop runs once.
            guard = DeadlineGuard(recorder.clock() + 2 * budget, recorder.clock)
            try:
                with guard:
                    await rollback.drain(guard)
            except ToolTimeoutError:
                # The guard names the attempt it cut off; the error states the budget the
                # compensation was given, and when it was cut off (between one and two budgets).
                cut_off = ToolTimeoutError(
                    guard.step,
                    budget,
                    f"; cut off {(guard.deadline - guard.started_at) * 1000:.1f} ms after it started",
                )
                await rollback.failed(cut_off, guard.started_at, None)
    return RollbackResult(tuple(rollback.compensated), tuple(rollback.failures))


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


class _Rollback:
    """Works through the owed compensations in order; retry state is kept for the one in hand."""

    __slots__ = (
        "attempt_number",
        "budget",
        "compensated",
        "default_retry",
        "delays",
        "done",
        "failures",
        "in_hand",
        "pending",
        "recorder",
        "secrets",
    )

    def __init__(
        self,
        recorder: RunRecorder,
        owed: Iterable[tuple[StepSpec, AegisContext]],
        default_retry: RetryPolicy,
        budget: float,
        secrets: tuple[str, ...],
    ) -> None:
        self.recorder = recorder
        self.secrets = secrets
        self.pending = iter(owed)
        self.done = False
        # A compensation whose attempt failed and which is still owed: recorded only when an
        # attempt fails, cleared once it succeeds or is given up on. A backstop that fires ends
        # `drain`, which resumes with it.
        self.in_hand: tuple[StepSpec, AegisContext] | None = None
        self.default_retry = default_retry
        self.budget = budget
        self.compensated: list[str] = []
        self.failures: list[CompensationFailure] = []
        self.attempt_number = 1
        self.delays: Iterator[float] | None = None

    async def drain(self, guard: DeadlineGuard) -> None:
        """Compensate the rest in order, each until it succeeds or its retries are spent."""
        recorder, budget, compensated = self.recorder, self.budget, self.compensated
        run_id, clock, journal, events = recorder.run_id, recorder.clock, recorder.journal, recorder.events
        # Mirrored in a local, read once or twice per compensation and changed only by a failed
        # attempt (or a backstop re-armed once per budget).
        backstop = guard.deadline
        owed: Iterable[tuple[StepSpec, AegisContext]] = self.pending
        if self.in_hand is not None:
            owed = chain([self.in_hand], owed)
        now = clock()
        for spec, snapshot in owed:
            index, name, step, args, kwargs, _, _, _ = spec
            attempt = self.attempt_number
            try:
                while True:
                    started = now
                    await recorder.record(_new_started(run_id, len(events), now, index, name, attempt))
                    if journal is not None:
                        started = now = clock()  # the write took time: the budget starts after it
                    if now >= backstop:
                        # The write outlasted the backstop (it is shielded): the scope fired, and
                        # would cut the attempt off at its first await.
                        guard.renew(now + 2 * budget)
                        backstop = guard.deadline
                    elif backstop < now + budget:
                        guard.deadline = backstop = now + 2 * budget
                    ctx = snapshot._with_budget(now + budget)
                    try:
                        if args or kwargs:
                            await step.compensate(ctx, *args, **kwargs)
                        else:  # unpacking empty args costs as much as the rest of the call
                            await step.compensate(ctx)
                    except BaseException as exc:
                        if not (isinstance(exc, Exception) or _stray_cancellation(exc)):
                            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                                await self.interrupted(spec, attempt, exc, started)
                            raise  # an interrupt, or the backstop's cancellation
                        self.in_hand = spec, snapshot
                        if (ended := clock()) >= backstop:  # outlived it in a shield: see below
                            guard.renew(ended + 2 * budget)
                        retry = await self.failed(exc, now, guard)
                        backstop, attempt, now = guard.deadline, self.attempt_number, clock()
                        if retry:
                            continue
                        break
                    now = clock()
                    if now >= backstop:
                        # The attempt outlived the backstop in a shield of its own. The scope stays
                        # cancelled and would cut off the journal write below, then the next attempt
                        # at its first await, long before its budget is spent.
                        guard.renew(now + 2 * budget)
                        backstop = guard.deadline
                    await recorder.record(
                        _new_succeeded(run_id, len(events), now, index, name, attempt, now - started)
                    )
                    if journal is not None:
                        now = clock()  # the write took time
                    compensated.append(name)
                    if attempt != 1:
                        self.attempt_number, self.delays, self.in_hand = 1, None, None
                    break
            except BaseException:
                # The backstop fired (or a journal write failed) mid-attempt. The guard learns only
                # now which attempt it cut off, which spares two writes per compensation; roll_back
                # records the attempt as failed and resumes with it.
                self.in_hand = spec, snapshot
                guard.step, guard.started_at = name, started
                raise
            # Nothing awaits from here to the next compensation's start: `now` serves both.
        self.done = True

    async def interrupted(self, spec: StepSpec, attempt: int, exc: BaseException, started: float) -> None:
        """Record that an interrupt stopped this attempt: it is still owed (``will_retry``), and the
        run stays unfinished in the journal, for `recover()` to finish."""
        error = ErrorInfo(type(exc).__name__, "interrupted: the rest of the rollback is left for recovery")
        duration = self.recorder.clock() - started
        await self.recorder.emit(CompensationFailed, spec.index, spec.name, attempt, duration, error, True)

    async def failed(self, exc: BaseException, started: float, guard: DeadlineGuard | None) -> bool:
        """Record a failed attempt of the compensation in hand (begun at `started`).

        Returns whether it will be retried, after backing off; otherwise it is given up on.
        """
        assert self.in_hand is not None
        (spec, snapshot), clock = self.in_hand, self.recorder.clock
        policy = spec.retry or self.default_retry
        secrets = self.secrets + snapshot.secret_values()
        if spec.args or spec.kwargs:
            secrets += argument_secrets(spec.args, spec.kwargs)
        error = ErrorInfo.from_exception(exc, secrets)
        attempt = self.attempt_number
        will_retry = attempt < policy.attempts
        await self.recorder.emit(
            CompensationFailed,
            spec.index,
            spec.name,
            attempt,
            clock() - started,
            error,
            will_retry,
        )
        if not will_retry:
            self.attempt_number, self.delays, self.in_hand = 1, None, None
            self.failures.append(CompensationFailure(spec.name, attempt, error))
            return False
        if self.delays is None:
            self.delays = policy.delays()
        delay = next(self.delays)
        self.attempt_number += 1
        # Keep the backstop clear of the backoff, so it can only fire on a compensation (renewed if
        # it fired during the journal write, which is shielded).
        now = clock()
        if guard is not None and now >= guard.deadline:
            guard.renew(now + delay + 2 * self.budget)
        elif guard is not None and guard.deadline < now + delay + self.budget:
            guard.deadline = now + delay + 2 * self.budget
        await anyio.sleep(delay)
        return True
