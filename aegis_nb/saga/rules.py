"""The saga's rules, once, for both drivers: the in-process engine (`execution`, `rollback`) and the
Temporal workflow (`aegis_nb.temporal.workflow`).

Each driver runs steps its own way (a coroutine under a cancel scope, an activity under a timer)
and reads its own clock; what follows from what happened is decided here: whether a step may start
and when it is cut off, the context a step's result becomes, the event its failure is recorded as,
what a rollback owes and in what order, how a failed compensation is retried, and the words for it.

Pure: plain functions over frozen values, no I/O, no clock, no anyio or temporalio, so the workflow
sandbox imports it and a replay takes the same decisions as the first run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass
from typing import Generic, TypeVar

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import StepResultError, ToolTimeoutError
from aegis_nb.kernel.report import ErrorInfo, FailureKind
from aegis_nb.saga.events import StepFailed, StepTimedOut
from aegis_nb.saga.parallel import CompensationOrder
from aegis_nb.saga.retry import RetryPolicy

M = TypeVar("M")
"""What a driver owes for one step: the step as it knows it, with its compensation's context."""

NOT_RUN = "; it was not run"
"""How a refused step's timeout ends: it was never started (for the report's summary)."""

CANCELLED = ErrorInfo("CancelledError", "cancelled by its caller")
"""A cancellation as a cause: the same words on asyncio and trio, none of the backend's internals
(a cancel scope's address, a task's repr and source path) that its message holds."""

REQUESTED = "RollbackRequested"
"""The type name a rollback the saga's own code asked for is reported under."""

_SIBLING = "cancelled: another member of its parallel group failed"

INTERRUPTED = "interrupted: the rest of the rollback is left for recovery"
"""Why an interrupted compensation attempt failed: it is still owed, for `recover()` to finish."""


# -- forward ------------------------------------------------------------------------------------------


def admit(name: str, deadline: float, timeout: float | None, now: float) -> float:
    """When step `name`, starting `now` under `deadline` and its own `timeout`, is cut off.

    Raises `ToolTimeoutError` if no time is left: the step is refused, not run. A refused step is
    neither recorded nor the failed step, and owes nothing even if in doubt.
    """
    limit = deadline if timeout is None else min(deadline, now + timeout)
    if now >= limit:
        raise ToolTimeoutError(name, limit - now, NOT_RUN)
    return limit


def member_starts(group_failures: Sized) -> bool:
    """Whether a parallel group's member whose turn has come begins: never once a sibling failed.

    Its group is failing: it would only be cancelled, and if in doubt, undone for nothing.
    """
    return not group_failures


def accept(name: str, step_input: AegisContext, result: object) -> AegisContext:
    """The context step `name` produced from `step_input`: stamped with its idempotency key, and
    never with a later deadline than it was given. `None` is its input unchanged; anything but a
    context is a `StepResultError`."""
    if result is None:
        return step_input
    if not isinstance(result, AegisContext):
        raise StepResultError(
            f"step {name!r}: execute() must return an AegisContext or None, got {type(result).__name__}"
        )
    # A context derived from the step's own input already carries its stamp: no copy needed.
    if result.step_index != step_input.step_index or result.run_id != step_input.run_id:
        assert step_input.run_id is not None  # a step's input is always stamped
        assert step_input.step_index is not None
        result = result.for_step(step_input.run_id, step_input.step_index)
    if result.deadline > step_input.deadline:
        result = result.with_budget(step_input.deadline)
    return result


def failure_event(
    header: tuple[str, int, float],
    index: int,
    name: str,
    group: int | None,
    duration: float,
    kind: FailureKind,
    cause: ErrorInfo,
    budget: float | None,
) -> StepTimedOut | StepFailed:
    """The event a step's failure is recorded as: timed out (with the `budget` it was given, else
    its `duration`) or failed, with its `kind`. `group`: its group's first index, if a member."""
    if kind is FailureKind.TIMEOUT:
        return StepTimedOut(
            *header,
            index=index,
            step=name,
            duration=duration,
            budget=duration if budget is None else budget,
            error=cause,
            group=group,
        )
    return StepFailed(*header, index=index, step=name, duration=duration, kind=kind, error=cause, group=group)


def sibling_cancelled(failure_type: str) -> ErrorInfo:
    """Why a group's member was cancelled when a sibling's failure (of type `failure_type`) did it.

    Not the saga's failure: the sibling's is.
    """
    return ErrorInfo("CancelledError", f"{_SIBLING} ({failure_type})")


def cancelled_by_sibling(error: ErrorInfo) -> bool:
    """Whether `error` is a group member's, cut off by a sibling's failure (`sibling_cancelled`):
    not the run's failure, which is the sibling's."""
    return error.type == "CancelledError" and error.message.startswith(_SIBLING)


def owes_compensation(in_doubt: bool, cause: ErrorInfo, *, lost: bool = False) -> bool:
    """Whether a step whose execute failed with `cause` is owed its compensation.

    Only if it may have acted: it opted in (``in_doubt``) and its tool did not answer that it did
    not act (a refusal), or an attempt of it was lost after it may have acted.
    """
    return (in_doubt and not cause.refused) or lost


# -- rollback -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwedGroup(Generic[M]):
    """A parallel group's owed compensations, in start order, and how they run (`CompensationOrder`)."""

    members: tuple[M, ...]
    order: CompensationOrder


def owed_group(
    members: Iterable[M], index: Callable[[M], int], order: CompensationOrder
) -> OwedGroup[M] | None:
    """What a group owes once it settled: its owed `members` in start order (`index`), or None."""
    ordered = sorted(members, key=index)
    return OwedGroup(tuple(ordered), order) if ordered else None


def rollback_order(owed: Iterable[M | OwedGroup[M]]) -> Iterator[M | OwedGroup[M]]:
    """`owed` (newest first) as a rollback works through it: a group compensated one by one becomes
    its members, newest start first; a group of one is that one; a concurrent group stays whole."""
    for item in owed:
        if not isinstance(item, OwedGroup):
            yield item
        elif item.order is CompensationOrder.REVERSE_START or len(item.members) == 1:
            yield from reversed(item.members)
        else:
            yield item


def retry_policy(step_retry: RetryPolicy | None, default: RetryPolicy) -> RetryPolicy:
    """The policy a step's compensation is retried under: its own, else the run's."""
    return step_retry or default


def backoff(policy: RetryPolicy, attempt: int) -> float | None:
    """How long to wait after failed attempt number `attempt` (from 1) before the next; None: that
    was the last, and the compensation is given up on."""
    if attempt >= policy.attempts:
        return None
    delay = min(policy.initial_delay, policy.max_delay)
    for _ in range(attempt - 1):
        # Capped as it grows, as `RetryPolicy.delays` does: the same waits, to the last bit.
        delay = min(delay * policy.multiplier, policy.max_delay)
    return delay


def cut_off(step: str | None, budget: float, after: float) -> ToolTimeoutError:
    """A compensation attempt given `budget` seconds that the backstop cut off `after` seconds."""
    return ToolTimeoutError(step, budget, f"; cut off {after * 1000:.1f} ms after it started")
