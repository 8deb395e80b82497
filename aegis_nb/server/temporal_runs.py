"""Workflows whose sagas run elsewhere (on Temporal), and the tool that answers for a run by its id.

``AegisMCP(name, temporal=TemporalSagaRunner(...))`` (or ``@app.workflow(temporal=runner)`` for one
workflow) keeps the workflow's code, tool, input schema, result and progress as they are, and runs
the sagas it starts on the runner: ``app.workflow_engine`` becomes a `RoutedEngine`, which sends
``run_saga`` to the runner of the workflow being called (`routed`) and everything else to the
engine it wraps. Any number of servers and workers share the work through the runner's task queue;
the server holds nothing a crash loses: the workflow goes on on the workers.

A caller names its run with ``_meta["aegis-nb/runId"]`` (the Temporal workflow id of the call's
first saga, ``ID.2``, ``ID.3`` for later ones; Temporal refuses an id twice, so a retried call
cannot book twice). Any server of the same runner then answers for that run with the
``workflow_status`` tool (`STATUS_TOOL`): the result the call gave or would have given, or the steps
done so far while it runs.

The server layer does not import Temporal: a runner is anything with the two methods of
`RemoteRunner` (``aegis_nb.temporal.TemporalSagaRunner`` has them).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from mcp.types import CallToolResult, TextContent
from pydantic_core import to_json

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaCommitted, SagaEvent, SagaRolledBackEvent, SagaStuck, StepSucceeded
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.sinks import Sink
from aegis_nb.server.results import committed_result, error_result, failed_result, workflow_output_schema

RUN_ID_META_KEY: Final = "aegis-nb/runId"
"""``_meta`` key of a workflow call: the run id (Temporal workflow id) its first saga gets."""

STATUS_TOOL: Final = "workflow_status"
"""The tool a server with Temporal workflows adds: ``workflow_status(run_id, wait=False)``."""

RUNNING: Final = "running"
"""`WorkflowResult` status of a run the status tool finds still going."""


@runtime_checkable
class RemoteRunner(Protocol):
    """What runs a served workflow's sagas in other processes (``TemporalSagaRunner``)."""

    async def run_saga(
        self,
        steps: Any,
        ctx: AegisContext | None = None,
        *,
        name: str | None = None,
        workflow_id: str | None = None,
        sinks: Iterable[Sink] = (),
    ) -> SagaRun:
        """Run the saga to its end, as `WorkflowEngine.run_saga` does."""
        ...

    async def run_events(self, run_id: str, *, wait: bool = False) -> tuple[SagaEvent, ...] | None:
        """The run's events so far (all once it ended; `wait`: wait for its end); None: no such run."""
        ...


@dataclass(slots=True)
class _Route:
    """One workflow call's runner, and the run ids its sagas get (a per-call counter, never shared)."""

    runner: RemoteRunner
    run_id: str | None
    started: int = field(default=0)

    def next_run_id(self) -> str | None:
        self.started += 1
        if self.run_id is None:
            return None  # the runner mints one
        return self.run_id if self.started == 1 else f"{self.run_id}.{self.started}"


_route: ContextVar[_Route | None] = ContextVar("aegis_remote_route", default=None)


@contextmanager
def routed(runner: RemoteRunner | None, meta: Mapping[str, Any] | None) -> Iterator[None]:
    """Around one workflow call: its sagas run on `runner` (None: in-process), named by `meta`'s run id.

    A `SagaDefinitionError` if the run id given is no non-empty string (the call is then refused).
    """
    if runner is None:
        # Cleared, not inherited: an in-process workflow called from a remote one's step runs here.
        token = _route.set(None)
    else:
        run_id = None if meta is None else meta.get(RUN_ID_META_KEY)
        if run_id is not None and not (isinstance(run_id, str) and run_id):
            raise SagaDefinitionError(
                f"_meta[{RUN_ID_META_KEY!r}] must be a non-empty string, got {run_id!r}"
            )
        token = _route.set(_Route(runner, run_id))
    try:
        yield
    finally:
        _route.reset(token)


class RoutedEngine(WorkflowEngine):
    """``app.workflow_engine`` of a server with remote workflows: ``run_saga`` goes to the runner of the
    workflow being called, and to `local` outside such a call; the rest (sinks, journal, recovery)
    is `local`'s. Its defaults are `local`'s; a remote run uses its runner's own."""

    def __init__(self, local: WorkflowEngine) -> None:
        super().__init__(
            compensation_retry=local.compensation_retry,
            compensation_budget=local.compensation_budget,
            journal=local.journal,
        )
        self.local = local

    def subscribe(self, sink: Sink) -> None:
        """Subscribe to `local`'s runs (a remote run's events go to its call's sinks and observers)."""
        self.local.subscribe(sink)

    def unsubscribe(self, sink: Sink) -> None:
        self.local.unsubscribe(sink)

    async def run_saga(
        self,
        steps: Any,
        ctx: AegisContext | None = None,
        *,
        name: str | None = None,
        sinks: Iterable[Sink] = (),
        run_id: str | None = None,
    ) -> SagaRun:
        route = _route.get()
        if route is None:
            return await self.local.run_saga(steps, ctx, name=name, sinks=sinks, run_id=run_id)
        return await route.runner.run_saga(
            steps, ctx, name=name, sinks=sinks, workflow_id=run_id or route.next_run_id()
        )

    def saga(self, *args: Any, **kwargs: Any) -> Any:
        """A dynamic saga: in-process only (see the README, "Sagas on Temporal")."""
        if _route.get() is not None:
            raise SagaDefinitionError(
                "a dynamic saga (engine.saga) cannot run on Temporal: a Temporal workflow is code the "
                "worker replays, and a dynamic saga's steps are decided by the caller's code as it "
                "runs; use a list saga (with parallel groups if need be), or serve this workflow "
                "in-process (@app.workflow(temporal=None))"
            )
        return self.local.saga(*args, **kwargs)

    async def recover(self, *, sinks: Iterable[Sink] = ()) -> tuple[SagaRun, ...]:
        return await self.local.recover(sinks=sinks)


def wrap_engine(engine: WorkflowEngine) -> RoutedEngine:
    """`engine` as a `RoutedEngine` (itself, if it is one already)."""
    return engine if isinstance(engine, RoutedEngine) else RoutedEngine(engine)


@functools.cache
def status_output_schema() -> dict[str, Any]:
    """`WorkflowResult`'s schema, whose status may also be ``running``."""
    schema = copy.deepcopy(workflow_output_schema())
    schema["properties"]["status"]["enum"].append(RUNNING)
    return schema


async def run_status(runners: Iterable[RemoteRunner], run_id: str, *, wait: bool) -> CallToolResult:
    """What the status tool answers for `run_id`: the call's result if the run ended, else its progress.

    The first of `runners` that knows the run answers. An ended run gives the result its workflow
    call gave (committed, or ``is_error`` with the rollback report), for that run alone; a running
    one ``status: running`` with the steps done so far (none known while no worker answers).
    """
    for runner in runners:
        events = await runner.run_events(run_id, wait=wait)
        if events is not None:
            return _status_of(run_id, events)
    return error_result(f"no saga run {run_id!r} is known here", refused=True)


def _status_of(run_id: str, events: tuple[SagaEvent, ...]) -> CallToolResult:
    last = events[-1] if events else None
    match last:
        case SagaCommitted():
            return committed_result(last.context, events, last.duration)
        case SagaRolledBackEvent() | SagaStuck():
            return failed_result(last.report, events, last.duration)
    first = events[0] if events else None
    elapsed = 0.0 if first is None or last is None else last.time - first.time
    structured: dict[str, Any] = {
        "status": RUNNING,
        "run_id": run_id,
        "metadata": {},
        "steps": [
            {"index": e.index, "name": e.step, "duration_ms": round(e.duration * 1000, 3)}
            for e in events
            if isinstance(e, StepSucceeded)
        ],
        "duration_ms": round(elapsed * 1000, 3),
    }
    return CallToolResult(
        content=[TextContent(type="text", text=to_json(structured).decode())],
        structured_content=structured,
    )


class RemoteRuns:
    """A server's remote runners, and its status tool over them."""

    def __init__(self) -> None:
        self.runners: list[RemoteRunner] = []

    def add(self, runner: RemoteRunner) -> None:
        if all(runner is not known for known in self.runners):
            self.runners.append(runner)

    def status_tool(self) -> Any:
        """``workflow_status(run_id, wait=False)``, as an async function to register as a tool."""
        runs = self

        async def workflow_status(run_id: str, wait: bool = False) -> CallToolResult:
            """The outcome of the saga run `run_id` (a workflow call's `_meta` "aegis-nb/runId", or the
            run_id of its result), as its call returned it; while it runs, status "running" and the
            steps done so far. `wait`: answer once it has ended."""
            return await run_status(runs.runners, run_id, wait=wait)

        return workflow_status
