"""The two activities a saga worker runs: one step's execute, one attempt of one step's compensate.

Each rebuilds its step from the locator (`saga.durable.locator`: a registered name, a module-level
object, or a class and its JSON attributes), moves the context's deadline from workflow time onto
this process's loop clock, runs the call under it with the `ToolExecutor`, and heartbeats meanwhile
so that Temporal notices a dead worker and runs the attempt elsewhere.

Every error the step raises goes back as a non-retryable `ApplicationError` of the same type name
and message (secret-scrubbed), because whether to go on is the workflow's decision, not Temporal's.
The original exception is not chained: its traceback would land in Temporal's history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from aegis_nb.kernel.clock import loop_clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import StepResultError, ToolError, ToolTimeoutError
from aegis_nb.kernel.executor import ToolExecutor
from aegis_nb.kernel.report import scrub
from aegis_nb.saga.durable.codec import context_to_json
from aegis_nb.saga.durable.locator import StepResolver
from aegis_nb.temporal.names import COMPENSATE_ACTIVITY, EXECUTE_ACTIVITY
from aegis_nb.temporal.plan import StepCall, convert_deadline, restamp, wall_clock


class SagaActivities:
    """The activities of one worker; `resolver` holds the steps registered with it by name."""

    def __init__(self, resolver: StepResolver) -> None:
        self._resolver = resolver
        self._executor = ToolExecutor()

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
    async def compensate(self, payload: dict[str, Any]) -> None:
        """Run one attempt of one step's compensate under the budget in its context."""
        call, step, ctx = self._prepare(payload)
        await self._run(call, ctx, step.compensate)

    def _prepare(self, payload: dict[str, Any]) -> tuple[StepCall, Any, AegisContext]:
        try:
            call = StepCall.from_json(payload)
            step = self._resolver.rebuild(call.locator)
        except (LookupError, ValueError, TypeError) as exc:
            raise ApplicationError(
                f"this worker cannot run the step: {exc}", type=type(exc).__name__, non_retryable=True
            ) from None
        clock = loop_clock()
        local = convert_deadline(call.context.deadline, source=wall_clock, target=clock)
        return call, step, restamp(call.context, local, call.context.run_id, call.context.step_index)

    async def _run(self, call: StepCall, ctx: AegisContext, method: Callable[..., Awaitable[Any]]) -> Any:
        limit = (
            AegisContext()
            if call.limit is None
            else AegisContext(deadline=convert_deadline(call.limit, source=wall_clock, target=loop_clock()))
        )
        beat = asyncio.create_task(_heartbeat())
        try:
            return await self._executor.run_named(call.name, limit, method, ctx, *call.args, **call.kwargs)
        except Exception as exc:
            raise _reported(exc, ctx) from None
        finally:
            beat.cancel()


def _reported(exc: Exception, ctx: AegisContext) -> ApplicationError:
    """`exc` as the workflow will see it: type name, scrubbed message, and what kind of failure."""
    details = {"tool_error": isinstance(exc, ToolError), "timeout": isinstance(exc, ToolTimeoutError)}
    message = scrub(str(exc), ctx.secret_values())
    return ApplicationError(message, details, type=type(exc).__name__, non_retryable=True)


async def _heartbeat() -> None:
    """Tell Temporal this worker is alive, three times per heartbeat timeout."""
    timeout = activity.info().heartbeat_timeout
    if timeout is None:
        return
    interval = max(timeout.total_seconds() / 3, 0.05)
    while True:
        activity.heartbeat()
        await asyncio.sleep(interval)
