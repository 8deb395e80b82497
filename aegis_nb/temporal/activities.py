"""The two activities a saga worker runs: one step's execute, one attempt of one step's compensate.

Each rebuilds its step from the locator (`saga.durable.locator`: a registered name, a module-level
object, or a class and its JSON attributes), moves the context's deadline from workflow time onto
this process's loop clock, runs the call under it with the `ToolExecutor`, and heartbeats meanwhile
so that Temporal notices a dead worker and runs the attempt elsewhere. The heartbeats come from a
thread: a step that blocks the event loop (a synchronous HTTP call) is busy, not dead, and must not
be run a second time.

Temporal cancels an activity with a native `Task.cancel()`, which goes through anyio shields. So
the call runs in a task of its own inside a cancel scope, and the activity's cancellation is passed
on by cancelling that scope, as the engine's caller would: what the step shields finishes, and a
step that completes anyway is reported completed (the workflow then compensates it).

Every error the step raises goes back as a non-retryable `ApplicationError` of the same type name
and message (secret-scrubbed), because whether to go on is the workflow's decision, not Temporal's.
The original exception is not chained: its traceback would land in Temporal's history.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import anyio
from temporalio import activity
from temporalio.bridge.proto import ActivityHeartbeat
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from aegis_nb.kernel.clock import loop_clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import StepResultError, ToolTimeoutError, is_refusal
from aegis_nb.kernel.executor import ToolExecutor
from aegis_nb.kernel.scrubbing import exception_text, scrub
from aegis_nb.kernel.shielding import outlast
from aegis_nb.kernel.text import replace_surrogates
from aegis_nb.kernel.undo import NOTHING_TO_UNDO
from aegis_nb.saga.durable.codec import context_to_json
from aegis_nb.saga.durable.locator import StepResolver
from aegis_nb.temporal.names import COMPENSATE_ACTIVITY, EXECUTE_ACTIVITY
from aegis_nb.temporal.plan import StepCall, convert_deadline, restamp, wall_clock

T = TypeVar("T")


class SagaActivities:
    """The activities of one worker; `resolver` holds the steps registered with it by name.

    `worker` is the `temporalio.worker.Worker` running them (set by `saga_worker`), whose core
    takes heartbeats from any thread.
    """

    def __init__(self, resolver: StepResolver) -> None:
        self._resolver = resolver
        self._executor = ToolExecutor()
        self.worker: Worker | None = None

    @activity.defn(name=EXECUTE_ACTIVITY)
    async def execute(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Run one step's execute; return the context it produced, its deadline in workflow time."""
        call, step, ctx = self._prepare(payload)
        result = await self._run(call, ctx, step.execute)
        if result is None:
            return context_to_json(call.context)
        if not isinstance(result, AegisContext):
            error = StepResultError(
                f"step {call.name!r}: execute() must return an AegisContext or None, "
                f"got {type(result).__name__}"
            )
            raise _reported(error, ctx)
        # An unchanged deadline goes back exactly as it came (no round trip through two clocks).
        deadline = call.context.deadline
        if result.deadline != ctx.deadline:
            deadline = convert_deadline(result.deadline, source=loop_clock(), target=wall_clock)
        return context_to_json(restamp(result, deadline, result.run_id, result.step_index))

    @activity.defn(name=COMPENSATE_ACTIVITY)
    async def compensate(self, payload: dict[str, Any]) -> dict[str, bool]:
        """Run one attempt of one step's compensate under the budget in its context.

        Returns ``{"nothing_to_undo": true}`` when the step returned `NOTHING_TO_UNDO`, else ``{}``.
        """
        call, step, ctx = self._prepare(payload)
        result = await self._run(call, ctx, step.compensate)
        return {"nothing_to_undo": True} if result is NOTHING_TO_UNDO else {}

    def _prepare(self, payload: dict[str, Any]) -> tuple[StepCall, Any, AegisContext]:
        try:
            call = StepCall.from_json(payload)
            step = self._resolver.rebuild(call.locator)
        except (LookupError, ValueError, TypeError) as exc:
            raise _failure(f"this worker cannot run the step: {exc}", {}, type(exc).__name__) from None
        clock = loop_clock()
        local = convert_deadline(call.context.deadline, source=wall_clock, target=clock)
        return call, step, restamp(call.context, local, call.context.run_id, call.context.step_index)

    async def _run(self, call: StepCall, ctx: AegisContext, method: Callable[..., Awaitable[Any]]) -> Any:
        limit = (
            AegisContext()
            if call.limit is None
            else AegisContext(deadline=convert_deadline(call.limit, source=wall_clock, target=loop_clock()))
        )
        scope = anyio.CancelScope()

        async def guarded() -> Any:
            with scope:
                return await self._executor.run_named(
                    call.name, limit, method, ctx, *call.args, **call.kwargs
                )
            return None  # cut off by the scope: `_outlasting` re-raises the activity's cancellation

        heartbeat = self._heartbeat()
        try:
            return await _outlasting(asyncio.ensure_future(guarded()), scope)
        except Exception as exc:
            # The call's own deadline cut it (not a tool's timeout inside it): the workflow knows
            # the budget it gave, measured from the step's start rather than this activity's.
            at_limit = (
                isinstance(exc, ToolTimeoutError)
                and exc.step == call.name
                and limit.deadline != math.inf
                and loop_clock()() >= limit.deadline
            )
            raise _reported(exc, ctx, at_limit=at_limit) from None
        finally:
            if heartbeat is not None:
                heartbeat.stop()

    def _heartbeat(self) -> _Heartbeat | None:
        """Heartbeats for the running activity, three per heartbeat timeout, from a thread of their own."""
        timeout = activity.info().heartbeat_timeout
        if timeout is None:
            return None
        send: Callable[[], object]
        # The SDK's `activity.heartbeat` needs the event loop, which a blocking step holds; the
        # worker's core records a heartbeat from any thread and sends it from threads of its own.
        # That door is private (temporalio 1.35): tests/test_temporal_parity.py fails if it closes.
        record = getattr(getattr(self.worker, "_bridge_worker", None), "record_activity_heartbeat", None)
        if callable(record):
            send = partial(record, ActivityHeartbeat(task_token=activity.info().task_token))
        else:  # an SDK without that door: heartbeat through the loop, as the SDK does
            loop, context = asyncio.get_running_loop(), contextvars.copy_context()
            send = partial(loop.call_soon_threadsafe, context.run, activity.heartbeat)
        return _Heartbeat(send, max(timeout.total_seconds() / 3, 0.05))


class _Heartbeat:
    """Calls `send` now and every `interval` seconds, in a daemon thread, until `stop`."""

    def __init__(self, send: Callable[[], object], interval: float) -> None:
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, args=(send, interval), name="aegis-nb heartbeat", daemon=True
        )
        self._thread.start()

    def _beat(self, send: Callable[[], object], interval: float) -> None:
        try:
            send()
            while not self._stopped.wait(interval):
                send()
        except Exception:  # the worker is shutting down: there is nothing left to keep alive
            return

    def stop(self) -> None:
        """Stop beating; returns once no heartbeat is being sent (none must outlive the activity)."""
        self._stopped.set()
        self._thread.join(timeout=1.0)


async def _outlasting(task: asyncio.Future[T], scope: anyio.CancelScope) -> T:
    """`task`'s result, a native cancellation of this task being passed on to `scope`, anyio-style.

    The task is awaited to its end even so: the step's shields hold, and if it completes anyway its
    result stands. The cancellation is re-raised only if the scope did cut the step off.
    """
    cancelled = await outlast(task, on_cancel=scope.cancel)
    if cancelled is not None and scope.cancelled_caught:
        raise cancelled
    return task.result()


def _reported(exc: Exception, ctx: AegisContext, *, at_limit: bool = False) -> ApplicationError:
    """`exc` as the workflow will see it: type name, scrubbed message, and what kind of failure.

    The details say whether the tool refused (`is_refusal`), whether it timed out, with which
    budget and whether at the call's own limit, and which attempt this was (a later one means an
    earlier one's worker was lost).
    """
    details: dict[str, Any] = {
        "tool_error": is_refusal(exc),
        "timeout": isinstance(exc, ToolTimeoutError),
        "attempt": activity.info().attempt,
    }
    if isinstance(exc, ToolTimeoutError) and exc.budget is not None and math.isfinite(exc.budget):
        details["budget"] = exc.budget
    if at_limit:
        details["at_limit"] = True
    return _failure(scrub(exception_text(exc), ctx.secret_values()), details, type(exc).__name__)


def _failure(message: str, details: dict[str, Any], error_type: str) -> ApplicationError:
    """A non-retryable failure whose message is exactly `message`, even one holding lone surrogates.

    A failure's message must encode as UTF-8, or the SDK cannot report it and fails the attempt
    as retryable instead: the step would run again, up to five times. So the message shown is
    made encodable, and the exact one travels in the details (JSON escapes surrogates).
    """
    shown = replace_surrogates(message)
    if shown != message:
        details = {**details, "message": message}
    return ApplicationError(shown, details, type=error_type, non_retryable=True)
