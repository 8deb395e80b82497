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
its rollback with `run_shielded`, which stops both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import Any, NamedTuple, TypeVar, cast

import anyio
import sniffio

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
    SagaEvent,
)
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy

_new_started = builder(CompensationStarted)
_new_succeeded = builder(CompensationSucceeded)

T = TypeVar("T")


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
) -> RollbackResult:
    """Compensate `owed` in the order given (callers pass newest first), shielded from cancellation.

    The shield is anyio's: on asyncio, call this through `run_shielded` to survive a native
    `Task.cancel()` as well.
    """
    rollback = _Rollback(recorder, owed, default_retry, budget)
    with anyio.CancelScope(shield=True):
        while not rollback.done:
            # A fresh backstop after each one that fired; normally this loop runs once.
            guard = DeadlineGuard(recorder.clock() + 2 * budget, recorder.clock)
            try:
                with guard:
                    await rollback.drain(guard)
            except ToolTimeoutError as exc:
                await rollback.failed(exc, guard.started_at, None)
    return RollbackResult(tuple(rollback.compensated), tuple(rollback.failures))


async def run_shielded(work: Coroutine[Any, Any, T]) -> T:
    """Await `work` shielded from cancellation, a native asyncio `Task.cancel()` included.

    On asyncio, `Task.cancel()` throws CancelledError into whatever the task awaits, anyio shield
    or not. So there `work` runs in a task of its own (in a copy of this context, like any task):
    a CancelledError that lands on this task is held until `work` is done, then raised unchanged.
    `Task.cancelling()` is left as `cancel()` set it, so `asyncio.timeout` and anyio scopes further
    out still recognise their cancellation. An exception from `work` wins over a held cancellation,
    as one raised in a ``finally`` would. Elsewhere the anyio shield is all it takes.
    """
    if sniffio.current_async_library() != "asyncio":
        with anyio.CancelScope(shield=True):
            return await work
    handoff = Handoff()
    task = asyncio.get_running_loop().create_task(_settle(work, handoff))
    # Keeps an anyio scope outside from re-delivering its cancellation on every loop turn meanwhile.
    with anyio.CancelScope(shield=True):
        cancelled = await outlast(task, handoff=handoff)
    result, error = task.result()
    del task
    try:
        if error is not None:
            raise error
        if cancelled is not None:
            raise cancelled
    finally:
        del error, cancelled  # their tracebacks hold this frame: no cycle through it
    return cast(T, result)


class Handoff:
    """Lets a task wake whoever `outlast`s it as its very last act.

    A task's done callbacks run a loop turn after it ends, behind timers that came due meanwhile
    (a live view's final redraw of the run, say), which would then run before the waiter resumes.
    """

    __slots__ = ("_waiter",)

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        """Called by the task as it ends: its waiter resumes on the next loop turn, first."""
        if self._waiter is not None:
            _wake(self._waiter, None)


async def outlast(
    task: asyncio.Future[Any],
    on_cancel: Callable[[], object] | None = None,
    *,
    handoff: Handoff | None = None,
) -> asyncio.CancelledError | None:
    """Wait until `task` is done, whatever native cancellations land on this task meanwhile.

    Returns the first of them (None if none came), for the caller to raise when it sees fit, and
    calls `on_cancel` at each, to pass it on in a gentler form (cancelling an anyio scope, say).
    A task given `handoff` may wake this waiter itself as it ends (`Handoff.wake`).
    """
    loop = asyncio.get_running_loop()
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        # A future of our own to wait on: cancelling this task cancels it, not `task` (which
        # `await task` would). Lighter than asyncio.wait, which costs a third of the detour.
        done = loop.create_future()
        task.add_done_callback(partial(_wake, done))
        if handoff is not None:
            handoff._waiter = done
        try:
            await done
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
            if on_cancel is not None:
                on_cancel()
    return cancelled


def _wake(done: asyncio.Future[None], _: object) -> None:
    if not done.done():  # a waiter cancelled with its task is left as it is
        done.set_result(None)


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


async def _settle(work: Coroutine[Any, Any, T], handoff: Handoff) -> tuple[T | None, BaseException | None]:
    """`work`'s result or exception, to raise in the awaiting task, which it wakes as it ends.

    Raised out of a task, a KeyboardInterrupt or SystemExit would stop the event loop instead.
    """
    try:
        outcome: tuple[T | None, BaseException | None] = (await work, None)
    except BaseException as exc:
        outcome = (None, exc)
    handoff.wake()
    return outcome


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
    )

    def __init__(
        self,
        recorder: RunRecorder,
        owed: Iterable[tuple[StepSpec, AegisContext]],
        default_retry: RetryPolicy,
        budget: float,
    ) -> None:
        self.recorder = recorder
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
        # Mirrored in locals, read once or twice per compensation and changed only by a failed
        # attempt (or a detached sink, or a backstop re-armed once per budget).
        backstop, sinks = guard.deadline, recorder.sinks
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
                    if backstop < now + budget:
                        guard.deadline = backstop = now + 2 * budget
                    ctx = snapshot._with_budget(now + budget)
                    # recorder.emit and .publish, inlined: a long rollback is two events per step,
                    # like the forward phase.
                    event: SagaEvent = _new_started(run_id, len(events), now, index, name, attempt)
                    if journal is not None:
                        await journal.append(event)
                    events.append(event)
                    for sink in sinks:
                        try:
                            sink(event)
                        except Exception:
                            sinks = recorder.detach(sink, event)
                    try:
                        if args or kwargs:
                            await step.compensate(ctx, *args, **kwargs)
                        else:  # unpacking empty args costs as much as the rest of the call
                            await step.compensate(ctx)
                    except BaseException as exc:
                        if not (isinstance(exc, Exception) or _stray_cancellation(exc)):
                            raise  # an interrupt, or the backstop's cancellation
                        self.in_hand = spec, snapshot
                        if (ended := clock()) >= backstop:  # outlived it in a shield: see below
                            guard.renew(ended + 2 * budget)
                        retry = await self.failed(exc, now, guard)
                        backstop, sinks, attempt, now = (
                            guard.deadline,
                            recorder.sinks,
                            self.attempt_number,
                            clock(),
                        )
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
                    event = _new_succeeded(run_id, len(events), now, index, name, attempt, now - started)
                    if journal is not None:
                        await journal.append(event)
                        now = clock()
                    events.append(event)
                    for sink in sinks:
                        try:
                            sink(event)
                        except Exception:
                            sinks = recorder.detach(sink, event)
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

    async def failed(self, exc: BaseException, started: float, guard: DeadlineGuard | None) -> bool:
        """Record a failed attempt of the compensation in hand (begun at `started`).

        Returns whether it will be retried, after backing off; otherwise it is given up on.
        """
        assert self.in_hand is not None
        (spec, snapshot), clock = self.in_hand, self.recorder.clock
        policy = spec.retry or self.default_retry
        secrets = snapshot.secret_values()
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
        # Keep the backstop clear of the backoff, so it can only fire on a compensation.
        now = clock()
        if guard is not None and guard.deadline < now + delay + self.budget:
            guard.deadline = now + delay + 2 * self.budget
        await anyio.sleep(delay)
        return True
