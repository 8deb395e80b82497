"""`ToolExecutor`: run awaitables under a context's deadline, raising `ToolTimeoutError` past it.

Deadlines are absolute times on the loop clock enforced by anyio cancel scopes. `ToolExecutor.run`
guards one call. A `DeadlineGuard` keeps a single scope open across many calls and touches it only
when the deadline changes, because re-arming a scope costs microseconds and the engine's budget per
step is about one: the engine's forward phase runs its steps under one, and its rollback keeps one
as a backstop behind every compensation's budget.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import ParamSpec, TypeVar

import anyio

from aegis_nb.kernel.clock import Clock, loop_clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolTimeoutError

P = ParamSpec("P")
T = TypeVar("T")


class DeadlineGuard:
    """One cancel scope for a sequence of calls; says which call was running when time ran out."""

    __slots__ = ("_clock", "_deadline", "_error", "_scope", "started_at", "step")

    def __init__(self, deadline: float, clock: Clock) -> None:
        self._scope = anyio.CancelScope(deadline=deadline)
        self._deadline = deadline
        self._clock = clock
        self.step: str | None = None
        self.started_at = clock()
        self._error: ToolTimeoutError | None = None

    @property
    def deadline(self) -> float:
        return self._deadline

    @deadline.setter
    def deadline(self, value: float) -> None:
        if value != self._deadline:
            self._deadline = self._scope.deadline = value

    def renew(self, deadline: float) -> None:
        """Swap the scope for a fresh one ending at `deadline`, from inside the guard.

        A scope whose deadline passed stays cancelled even if the call it guarded did not notice
        (it was shielded), and would cut off the next call at its first await. Call this between
        calls only: the scope must be the task's innermost one.
        """
        self._scope.__exit__(None, None, None)
        self._scope = anyio.CancelScope(deadline=deadline)
        self._scope.__enter__()
        self._deadline = deadline

    def rearm(self, deadline: float, now: float) -> None:
        """Guard the next call until `deadline`: the scope is touched only when the deadline changes,
        and swapped for a fresh one if its own deadline passed (a shielded call outlived it)."""
        if self._deadline <= now:
            self.renew(deadline)
        else:
            self.deadline = deadline

    @property
    def expired(self) -> bool:
        """Whether the deadline has cancelled the calls inside (nothing else cancels the scope)."""
        return self._scope.cancel_called

    def timeout_error(self) -> ToolTimeoutError:
        """The `ToolTimeoutError` for the call the deadline cut off, the one leaving the guard raises."""
        if self._error is None:
            self._error = ToolTimeoutError(self.step, self._deadline - self.started_at)
        return self._error

    def begin(self, step: str, at: float | None = None) -> float:
        """Mark `step` as the running call, started `at` (default now); returns its start time."""
        self.step = step
        self.started_at = now = self._clock() if at is None else at
        return now

    def __enter__(self) -> DeadlineGuard:
        self._scope.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        swallowed = self._scope.__exit__(exc_type, exc, tb)
        if self._scope.cancelled_caught:
            raise self.timeout_error() from None
        return bool(swallowed)


class ToolExecutor:
    """Runs tool calls and steps under the deadline carried by an `AegisContext`."""

    async def run(
        self,
        ctx: AegisContext,
        fn: Callable[P, Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Await ``fn(*args, **kwargs)``; raise `ToolTimeoutError` if `ctx.deadline` passes first."""
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        return await self.run_named(name, ctx, fn, *args, **kwargs)

    async def run_named(
        self,
        name: str,
        ctx: AegisContext,
        fn: Callable[P, Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Like `run`, naming the call `name` in the timeout error."""
        if ctx.deadline == math.inf:
            return await fn(*args, **kwargs)
        guard = DeadlineGuard(ctx.deadline, loop_clock())
        guard.begin(name)
        if guard.deadline <= guard.started_at:
            raise ToolTimeoutError(name, guard.deadline - guard.started_at)
        with guard:
            return await fn(*args, **kwargs)
        raise AssertionError("unreachable: a cancelled guard raises ToolTimeoutError")  # pragma: no cover
