"""`TemporalSagaRunner`: start a saga as a Temporal workflow and get the engine's outcome back.

The runner checks the saga where the caller can still be told (bad entries, steps a worker could not
rebuild, non-JSON arguments, a deadline already past), starts `SagaWorkflow`, and turns its outcome
into what `WorkflowEngine` would return: the final context, `SagaRolledBack` or
`SagaCompensationFailed` with the same report, and the same events for sinks, live views and
diagrams (times on workflow time, Unix seconds). Cancelling the caller cancels the workflow, waits
for its rollback and re-raises the cancellation; a workflow cancelled by someone else raises
`SagaCancelled`.
"""

from __future__ import annotations

import contextlib
import math
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

import anyio
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError
from temporalio.service import RPCStatusCode as RPCStatus

from aegis_nb.kernel.clock import loop_clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import (
    SagaCompensationFailed,
    SagaDefinitionError,
    SagaFailed,
    SagaRolledBack,
    ServerUnreachable,
    ToolTimeoutError,
)
from aegis_nb.kernel.text import one_line
from aegis_nb.saga.definition import normalize_saga
from aegis_nb.saga.durable.codec import event_from_json
from aegis_nb.saga.durable.locator import StepResolver
from aegis_nb.saga.engine import DEFAULT_COMPENSATION_BUDGET, run_observers, saga_name
from aegis_nb.saga.events import SagaCommitted, SagaEvent, SagaRolledBackEvent, SagaStuck
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.sinks import Sink, SinkSet
from aegis_nb.temporal.names import EVENTS_QUERY, OUTCOME_MEMO, WORKFLOW_NAME
from aegis_nb.temporal.plan import (
    SagaPlan,
    context_without_deadline,
    convert_deadline,
    plan_steps,
    wall_clock,
)

DEFAULT_HEARTBEAT_TIMEOUT = 5.0
"""Seconds without a heartbeat after which Temporal runs a step's attempt on another worker.

A cancellation reaches a running step with a heartbeat's answer, and the SDK sends heartbeats at most
every 0.8 x this: shorter means faster cancels and failovers, longer means less traffic."""

DEFAULT_HEARTBEAT_AFTER = 30.0
"""Seconds an activity may run before it heartbeats: only one that may run longer (a step whose time
left, or own timeout, is longer, or that has no limit; a compensation with a longer budget) sends
heartbeats. A shorter one's lost worker is noticed by its start-to-close timeout, the activity's
limit plus a second, and a cancellation reaches it when it ends."""


class SagaCancelled(SagaFailed):
    """The workflow was cancelled from outside this call; `report` says what was rolled back."""


class TemporalSagaRunner:
    """Runs sagas on Temporal with the engine's rules; holds the rollback defaults, like `WorkflowEngine`.

    `steps` names the steps registered on the workers (``saga_worker(..., steps=[...])``), so that
    they travel by name (two objects of one name: a mapping, each under a key of its own); every
    other step must be rebuildable from its import path.
    """

    def __init__(
        self,
        client: Client,
        task_queue: str,
        *,
        compensation_retry: RetryPolicy | None = None,
        compensation_budget: float = DEFAULT_COMPENSATION_BUDGET,
        heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
        heartbeat_after: float | None = DEFAULT_HEARTBEAT_AFTER,
        steps: Iterable[object] | Mapping[str, object] = (),
        poll_interval: float = 0.1,
    ) -> None:
        if heartbeat_after is not None and not (
            isinstance(heartbeat_after, int | float) and 0 <= heartbeat_after < math.inf
        ):
            raise ValueError(f"heartbeat_after must be seconds (0: always) or None, got {heartbeat_after!r}")
        for what, value in (
            ("compensation_budget", compensation_budget),
            ("heartbeat_timeout", heartbeat_timeout),
            ("poll_interval", poll_interval),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{what} must be positive seconds, got {value!r}")
        self.client = client
        self.task_queue = task_queue
        self.compensation_retry = compensation_retry or RetryPolicy()
        self.compensation_budget = float(compensation_budget)
        self.heartbeat_timeout = float(heartbeat_timeout)
        self.heartbeat_after = None if heartbeat_after is None else float(heartbeat_after)
        self.poll_interval = float(poll_interval)
        self._resolver = StepResolver(steps)

    async def execute_saga(
        self,
        steps: Any,
        ctx: AegisContext | None = None,
        *,
        name: str | None = None,
        workflow_id: str | None = None,
        sinks: Iterable[Sink] = (),
    ) -> AegisContext:
        """Run the saga; return the final context or raise `SagaRolledBack` / `SagaCompensationFailed`."""
        run = await self.run_saga(steps, ctx, name=name, workflow_id=workflow_id, sinks=sinks)
        try:
            return run.unwrap()
        finally:
            del run  # no reference cycle through the error's traceback: see SagaRun.unwrap

    async def run_saga(
        self,
        steps: Any,
        ctx: AegisContext | None = None,
        *,
        name: str | None = None,
        workflow_id: str | None = None,
        sinks: Iterable[Sink] = (),
    ) -> SagaRun:
        """Run the saga and return its `SagaRun` (cancelling the caller still rolls back, then propagates).

        `sinks` (and `run_observers`) get each event while the saga runs (polled with a query every
        `poll_interval`).
        """
        handle = await self.start_saga(steps, ctx, name=name, workflow_id=workflow_id)
        sinks = (*sinks, *run_observers.get())
        if not sinks:
            return await _shielded_result(handle, lambda run: None)
        recorder = RunRecorder(handle.workflow_id, loop_clock(), None, (SinkSet(sinks),))

        def catch_up(run: SagaRun) -> None:
            for event in run.events[len(recorder.events) :]:
                recorder.publish(event)

        async with anyio.create_task_group() as group:
            group.start_soon(handle._follow, recorder, self.poll_interval)
            run = await _shielded_result(handle, catch_up)
            group.cancel_scope.cancel()
        return run

    async def start_saga(
        self,
        steps: Any,
        ctx: AegisContext | None = None,
        *,
        name: str | None = None,
        workflow_id: str | None = None,
    ) -> TemporalSagaHandle:
        """Check the saga and start its workflow; the handle follows it (events, outcome, cancel).

        `workflow_id` (default: the saga name and a random suffix) is the run id, and the first half
        of every idempotency key: Temporal refuses to reuse it, so a key never names two effects.
        """
        specs = normalize_saga(steps)
        if ctx is None:
            ctx = AegisContext()
        elif not isinstance(ctx, AegisContext):
            raise SagaDefinitionError(f"ctx must be an AegisContext, got {type(ctx).__name__}")
        name = name or saga_name.get()
        plans = plan_steps(name, specs, self._resolver)
        timeout = None
        if ctx.deadline != math.inf:
            timeout = ctx.deadline - loop_clock()()
            if timeout <= 0:
                raise ToolTimeoutError(
                    specs[0].name,
                    timeout,
                    f"; saga {name!r} did not start, no step ran and nothing needs undoing",
                )
        plan = SagaPlan(
            name,
            plans,
            context_without_deadline(ctx),
            timeout,
            self.compensation_budget,
            self.compensation_retry,
            self.heartbeat_timeout,
            self.heartbeat_after,
        )
        try:
            handle: WorkflowHandle[Any, dict[str, Any]] = await self.client.start_workflow(
                WORKFLOW_NAME,
                plan.to_json(),
                id=workflow_id or f"{name}-{uuid.uuid4().hex}",
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                result_type=dict,
            )
        except (RPCError, RuntimeError) as exc:
            unreachable = _unreachable(self.client, exc)
            if unreachable is None:
                raise
            raise unreachable from exc
        return TemporalSagaHandle(handle)

    def saga(self, *args: object, **kwargs: object) -> None:
        """Refused: a dynamic saga runs in-process only (see the README, "On Temporal")."""
        raise SagaDefinitionError(
            "a dynamic saga cannot run on Temporal: a Temporal workflow is code the worker replays, "
            "and a dynamic saga's steps are decided by the caller's code as it runs; run a list saga "
            "(with parallel groups if need be), or the dynamic saga on a WorkflowEngine"
        )

    def attach(self, workflow_id: str) -> TemporalSagaHandle:
        """The saga started as `workflow_id` (by any client): follow it, wait for it, or replay its events."""
        return TemporalSagaHandle(self.client.get_workflow_handle(workflow_id, result_type=dict))

    async def run_events(self, run_id: str, *, wait: bool = False) -> tuple[SagaEvent, ...] | None:
        """The events of the saga run `run_id` so far, all of them once it has ended (`wait`: once it
        ends); None if Temporal holds no saga of that id. Answers for runs any client started.

        While the run is going, its events come from a query, which needs a worker: with none
        answering, the answer is no events yet (the run is still going).
        """
        handle = self.attach(run_id)
        try:
            description = await handle.handle.describe()
        except RPCError as exc:
            if exc.status is RPCStatus.NOT_FOUND:
                return None
            raise
        if description.workflow_type != WORKFLOW_NAME:
            return None  # another kind of workflow: not a saga this runner answers for
        if wait or description.status is not WorkflowExecutionStatus.RUNNING:
            return (await handle.result()).events
        try:
            return await handle.events()
        except _QUERY_FAILURES:
            return ()


class TemporalSagaHandle:
    """A started saga workflow: read its events while it runs, wait for its `SagaRun`, or cancel it."""

    def __init__(self, handle: WorkflowHandle[Any, dict[str, Any]]) -> None:
        self.handle = handle

    @property
    def workflow_id(self) -> str:
        """The workflow id, which is also the saga's run id."""
        return self.handle.id

    async def events(self, after: int = 0) -> tuple[SagaEvent, ...]:
        """The events recorded so far (from sequence number `after`), by query: needs a running worker."""
        data = await self.handle.query(EVENTS_QUERY, after, result_type=list)
        return tuple(event_from_json(item) for item in data)

    async def cancel(self) -> None:
        """Ask the workflow to stop: the running step is cancelled and completed steps are rolled back."""
        await self.handle.cancel()

    async def result(self) -> SagaRun:
        """Wait for the workflow to finish; its outcome as the engine's `SagaRun`."""
        try:
            outcome = await self.handle.result()
        except WorkflowFailureError as exc:
            if not isinstance(exc.cause, CancelledError):
                raise
            description = await self.handle.describe()
            memo = await description.memo()
            run = _run_from(memo[OUTCOME_MEMO], cancelled=True)
            if run.error is not None:
                run.error.__cause__ = exc
            return run
        return _run_from(outcome, cancelled=False)

    async def _follow(self, recorder: RunRecorder, interval: float) -> None:
        """Publish new events to the recorder's sinks until cancelled, polling the events query.

        A query that fails is skipped: no worker may answer for a while (all of them restarting),
        and a failure here must not cut off the run being awaited (its task group would cancel
        the saga). The sinks get what they missed from the next answer, or from the outcome.
        """
        while True:
            with contextlib.suppress(*_QUERY_FAILURES):
                for event in await self.events(len(recorder.events)):
                    recorder.publish(event)
            await anyio.sleep(interval)


def _unreachable(client: Client, exc: Exception) -> ServerUnreachable | None:
    """`exc` as one line naming the server, if it says the server cannot be reached: a lazy client's
    failed connect (a Rust transport error, address and all, on one long line) or an RPC that found
    no server after the client's retries (its message does not name the server)."""
    if isinstance(exc, RPCError):
        if exc.status is not RPCStatus.UNAVAILABLE:
            return None
    elif not str(exc).startswith("Failed client connect"):
        return None
    # The OS's own words, when the transport error carries them ('message: "Connection refused"',
    # 'error: "failed to lookup address information: ..."'), not its Rust debug form.
    reasons = re.findall(r'(?:message|error): "([^"]+)"', str(exc))
    reason = reasons[-1] if reasons else one_line(str(exc))
    address = client.service_client.config.target_host
    return ServerUnreachable(f"no Temporal server reachable at {address}: {reason}")


_QUERY_FAILURES = (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError)
"""How an events query fails when no worker answers in time, or the workflow cannot answer yet."""


async def _shielded_result(handle: TemporalSagaHandle, done: Callable[[SagaRun], None]) -> SagaRun:
    """The run's outcome, handed to `done` too; if the caller is cancelled, cancel the workflow, await
    its rollback (still handed to `done`, so sinks see it), then re-raise the cancellation."""
    try:
        run = await handle.result()
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_WAIT):
            await handle.cancel()
            # Whatever the rollback's outcome, this caller was cancelled: that is what it sees.
            with contextlib.suppress(Exception):
                done(await handle.result())
        raise
    done(run)
    return run


_CANCEL_WAIT = timedelta(hours=1).total_seconds()
"""How long a cancelled caller waits for the rollback before giving up on seeing it (it still runs)."""


def _run_from(outcome: Mapping[str, Any], *, cancelled: bool) -> SagaRun:
    """The `SagaRun` the workflow's events describe; the final context's deadline back on the loop clock."""
    events = tuple(event_from_json(item) for item in outcome["events"])
    last = events[-1]
    if isinstance(last, SagaCommitted):
        context = last.context
        local = convert_deadline(context.deadline, source=wall_clock, target=loop_clock())
        final = context.with_budget(local)  # the same moment, on this process's clock
        return SagaRun(events, final, None)
    if not isinstance(last, SagaRolledBackEvent | SagaStuck):
        raise ValueError(f"the saga workflow ended on {type(last).__name__}, not on a final event")
    report = last.report
    error_type: type[SagaFailed] = (
        SagaCancelled
        if cancelled
        else (SagaCompensationFailed if isinstance(last, SagaStuck) else SagaRolledBack)
    )
    return SagaRun(events, None, error_type(report), report)
