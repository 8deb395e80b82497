"""`AegisMCP`: an `MCPServer` that also serves `@app.workflow` sagas as MCP tools.

A workflow is ``async def fn(ctx: AegisContext, ...typed params)``; its MCP input schema comes from the
parameters after the context, so the SDK rejects bad arguments before any step runs. Each call gets a
fresh `AegisContext` whose deadline is the workflow's timeout, shortened by the client's
``_meta["aegis-nb/timeoutMs"]``; every saga event of the call becomes a progress notification; the
result is structured (`WorkflowResult`), or ``is_error`` with the rollback report. A cancelled call
still rolls back: the engine compensates shielded from the cancellation.

Plain ``@app.tool`` coroutines run through the `ToolExecutor` under the same kind of deadline, and may
raise `aegis_nb.kernel.errors.ToolError` to refuse a call in their own words.
"""

from __future__ import annotations

import enum
import inspect
import io
import math
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError as SdkToolError
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from mcp.types import CallToolResult, Icon, InputRequiredResult, ToolAnnotations
from pydantic_core import to_jsonable_python

from aegis_nb.kernel.clock import Clock, loop_clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError, SagaFailed, ToolError, ToolTimeoutError
from aegis_nb.kernel.executor import ToolExecutor
from aegis_nb.kernel.scrubbing import exception_text, scrub
from aegis_nb.kernel.values import Secret
from aegis_nb.saga.durable.startup import Lifespan, durable_engine, durable_lifespan
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.journal import Journal
from aegis_nb.server.callers import Callers
from aegis_nb.server.compensable import (
    SAGA_ARGUMENT,
    SAGA_META_KEY,
    CompensableCall,
    Compensation,
    undo_of,
)
from aegis_nb.server.deadline import InvalidRequestMeta, check_timeout, request_deadline, too_late
from aegis_nb.server.http_security import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_IDLE_TIMEOUT,
    DEFAULT_UNUSED_SESSION_TIMEOUT,
    HttpSecurity,
    serve_http,
)
from aegis_nb.server.progress import RequestObserver, progress_sender
from aegis_nb.server.refusals import refused_on_arrival
from aegis_nb.server.results import (
    committed_result,
    error_result,
    failed_result,
    timed_out_result,
    workflow_output_schema,
)
from aegis_nb.server.routing import Observing, in_a_clean_slate
from aegis_nb.server.saga_calls import compensable_runner, secret_names
from aegis_nb.server.saga_handles import (
    DEFAULT_MAX_OPEN,
    DEFAULT_MAX_OPEN_PER_CALLER,
    DEFAULT_SAGA_TIMEOUT,
    DEFAULT_TTL,
    SagaHandles,
)
from aegis_nb.server.saga_serving import SagaServing
from aegis_nb.server.saga_tools import SAGA_TOOLS, saga_lifespan, saga_tools
from aegis_nb.server.sdklogging import root_logger_kept, serving_logs
from aegis_nb.server.signature import REQUEST_PARAM, publish_signature, request_context, request_meta
from aegis_nb.server.temporal_runs import (
    STATUS_TOOL,
    RemoteRunner,
    RemoteRuns,
    routed,
    status_output_schema,
    wrap_engine,
)
from aegis_nb.server.validation import ArgumentChecker
from aegis_nb.tracing import Tracing, tracing_sink

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_WORKFLOW_TIMEOUT = 300.0
"""Seconds a workflow call may run forward unless the workflow or the server says otherwise."""

DEFAULT_TOOL_TIMEOUT = 60.0
"""Seconds a plain tool call may run unless the server says otherwise."""


class Transport(enum.Enum):
    """How `AegisMCP.run` serves: stdio (the default) or streamable HTTP at ``/mcp``."""

    STDIO = "stdio"
    HTTP = "http"


@dataclass(frozen=True, slots=True)
class Workflow:
    """A registered workflow: its tool name, function and forward timeout (None: no deadline), and the
    runner its sagas run on (None: in-process; see aegis_nb.server.temporal_runs)."""

    name: str
    fn: Callable[..., Awaitable[Any]]
    timeout: float | None
    runner: RemoteRunner | None = None


_UNSET: Any = object()


class AegisMCP(MCPServer[Any]):
    """An MCP server whose workflows run on `workflow_engine` and roll back on failure."""

    def __init__(
        self,
        name: str,
        *,
        engine: WorkflowEngine | None = None,
        workflow_timeout: float | None = DEFAULT_WORKFLOW_TIMEOUT,
        tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        journal: str | os.PathLike[str] | Journal | None = None,
        temporal: RemoteRunner | None = None,
        tracing: Tracing = None,
        saga_ttl: float = DEFAULT_TTL,
        saga_timeout: float | None = DEFAULT_SAGA_TIMEOUT,
        saga_max_open: int = DEFAULT_MAX_OPEN,
        saga_max_open_per_caller: int = DEFAULT_MAX_OPEN_PER_CALLER,
        **kwargs: Any,
    ) -> None:
        """`engine` runs the workflows (a fresh `WorkflowEngine` by default); timeouts are seconds or None.

        `journal` (a SQLite file path, or a `Journal`) makes the workflows durable: on start-up, before
        serving, the server rolls back every run a crash left unfinished. `temporal` (a
        `TemporalSagaRunner`) runs the workflows' sagas on Temporal, and adds the ``workflow_status`` tool
        (aegis_nb.server.temporal_runs). `tracing` records the runs as OpenTelemetry spans (a
        `SagaTracer`, True or False; None: if a tracer provider is configured by now; see
        aegis_nb.tracing). Agent sagas over compensable tools (``@app.tool(compensate=...)``) are rolled
        back idle past `saga_ttl` seconds, or past `saga_timeout` (a client may ask for less, not more);
        at most `saga_max_open` are open at once, `saga_max_open_per_caller` for one caller, to whom
        each handle is bound (aegis_nb.server.callers). Other keyword arguments go to `MCPServer`
        unchanged.
        """
        own_lifespan: Lifespan | None = kwargs.get("lifespan")
        if journal is not None:
            engine = durable_engine(engine, journal)
            kwargs["lifespan"] = durable_lifespan(engine, own_lifespan)
        # Outermost: agent sagas are served after recovery, and rolled back before the app's own
        # sessions close (their undos may need them).
        callers = Callers()
        kwargs["lifespan"] = saga_lifespan(kwargs.get("lifespan"), AegisMCP._serving_sagas, callers.connected)
        with root_logger_kept():  # set up when serving instead: see aegis_nb.server.sdklogging
            super().__init__(name, **kwargs)
        self._own_lifespan = own_lifespan
        self.workflow_engine = engine or WorkflowEngine()
        tracer = tracing_sink(tracing)
        if tracer is not None:  # tracing off adds no sink: it costs nothing
            self.workflow_engine.subscribe(tracer)
        self.workflow_timeout = check_timeout(workflow_timeout, "workflow_timeout")
        self.tool_timeout = check_timeout(tool_timeout, "tool_timeout")
        self._executor = ToolExecutor()
        self._workflows: dict[str, Workflow] = {}
        self.saga_ttl, self.saga_timeout = saga_ttl, saga_timeout
        self.saga_max_open, self.saga_max_open_per_caller = saga_max_open, saga_max_open_per_caller
        self.callers = callers
        self._compensable: dict[str, CompensableCall] = {}
        self._checkers: dict[str, ArgumentChecker] = {}
        self._sagas = SagaServing(self._saga_registry)
        self.temporal = temporal
        self._remote_runs: RemoteRuns | None = None
        if temporal is not None:
            self._serve_remote(temporal)

    def resources(self) -> AbstractAsyncContextManager[Any]:
        """Enter the app's own lifespan (the sessions and clients it opens to serve) without serving.

        ``aegis-nb recover`` rolls unfinished runs back inside it, so that their steps compensate
        through what the app opens, as start-up recovery does.
        """
        if self._own_lifespan is None:
            return nullcontext({})
        return self._own_lifespan(self)

    @property
    def workflows(self) -> Mapping[str, Workflow]:
        """The registered workflows by tool name (read-only)."""
        return MappingProxyType(self._workflows)

    # -- workflows ------------------------------------------------------------------------------

    def workflow(
        self,
        name: str | None = None,
        *,
        timeout: float | None = _UNSET,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        temporal: RemoteRunner | None = _UNSET,
    ) -> Callable[[F], F]:
        """Register ``async def fn(ctx, ...)`` as the MCP tool `name`; returns `fn` unchanged.

        `timeout` (seconds, None for none) overrides the server's `workflow_timeout`. A later parameter
        annotated with the SDK's `Context` receives the request's, as a tool's does (not an argument).
        `title`, `description` and `annotations` (MCP's hints to clients) are published as a tool's.
        `temporal` (a `TemporalSagaRunner`, None for in-process) overrides the server's `temporal`.
        """
        if callable(name):
            raise TypeError("use @app.workflow() or @app.workflow('name'), not a bare @app.workflow")

        def decorator(fn: F) -> F:
            workflow_name = name or fn.__name__
            if not inspect.iscoroutinefunction(fn):
                raise SagaDefinitionError(f"workflow {workflow_name!r} must be an `async def` function")
            params = list(inspect.signature(fn, eval_str=True).parameters.values())
            if not params or params[0].kind not in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                raise SagaDefinitionError(
                    f"workflow {workflow_name!r} must take the AegisContext as its first parameter"
                )
            if workflow_name in self._workflows:
                raise SagaDefinitionError(f"workflow {workflow_name!r} is already registered")
            if self._tool_manager.get_tool(workflow_name) is not None:
                # The SDK would keep the tool and only log a warning: the workflow would never run.
                raise SagaDefinitionError(
                    f"workflow {workflow_name!r}: a tool named {workflow_name!r} is already registered"
                )
            own_context = find_context_parameter(fn)
            if own_context == params[0].name:
                raise SagaDefinitionError(
                    f"workflow {workflow_name!r}: the first parameter receives the AegisContext, "
                    "not the SDK's Context"
                )
            limit = self.workflow_timeout if timeout is _UNSET else check_timeout(timeout, "timeout")
            remote = self.temporal if temporal is _UNSET else temporal
            if remote is not None:
                self._serve_remote(remote)
            spec = Workflow(workflow_name, fn, limit, remote)
            runner = self._workflow_runner(spec, own_context)
            publish_signature(
                runner,
                params[1:],
                dict[str, Any],
                workflow_name,
                fn.__doc__,
                add_request=own_context is None,
            )
            self.add_tool(
                runner,
                name=workflow_name,
                title=title,
                description=description or inspect.getdoc(fn) or f"Saga workflow {workflow_name}.",
                annotations=annotations,
                structured_output=True,
            )
            # Publish WorkflowResult's schema, flattened (see workflow_output_schema). The runner builds
            # its CallToolResult itself from that TypedDict, so the SDK need not validate it again
            # on every call: without an output model it publishes the schema and passes results through.
            tool = self._tool_manager.get_tool(workflow_name)
            assert tool is not None
            tool.fn_metadata.output_schema = workflow_output_schema()
            tool.fn_metadata.output_model = None
            self._workflows[workflow_name] = spec
            self._trust_module_of(fn)
            return fn

        return decorator

    def _serve_remote(self, runner: RemoteRunner) -> None:
        """Let workflows run their sagas on `runner`: the routing engine, and the status tool, once."""
        if self._remote_runs is None:
            self._remote_runs = RemoteRuns()
            self.workflow_engine = wrap_engine(self.workflow_engine)
            self.add_tool(self._remote_runs.status_tool(), name=STATUS_TOOL, structured_output=True)
            tool = self._tool_manager.get_tool(STATUS_TOOL)
            assert tool is not None
            tool.fn_metadata.output_schema = status_output_schema()
            tool.fn_metadata.output_model = None
        self._remote_runs.add(runner)

    def _trust_module_of(self, fn: Callable[..., Any]) -> None:
        """Let start-up recovery rebuild the step classes defined beside a workflow (its module is the
        app's own code), as `SqliteJournal(allow_modules=...)` would; other modules stay refused."""
        from aegis_nb.saga.durable.locator import StepResolver  # only a durable app needs it

        resolver = getattr(self.workflow_engine.journal, "resolver", None)
        module = getattr(fn, "__module__", None)
        if isinstance(resolver, StepResolver) and isinstance(module, str):
            resolver.trust(module)

    def _workflow_runner(
        self, spec: Workflow, own_context: str | None
    ) -> Callable[..., Awaitable[CallToolResult]]:
        """`own_context`: the workflow's own SDK `Context` parameter, which the runner passes on."""
        app = self

        async def run_workflow(**kwargs: Any) -> CallToolResult:
            sdk_context = kwargs.pop(REQUEST_PARAM) if own_context is None else kwargs.pop(own_context)
            refusal = app._refused_arguments(spec.name, kwargs)
            if own_context is not None:
                kwargs[own_context] = sdk_context
            if refusal is not None:
                return refusal
            request = request_context(sdk_context)
            clock = loop_clock()  # resolved once: the deadline and both ends of the timing read it
            started = clock()
            try:
                deadline = request_deadline(None if request is None else request.meta, spec.timeout, started)
            except InvalidRequestMeta as exc:
                return error_result(str(exc), refused=True)
            if deadline <= started:
                # Refused here, before the workflow's code runs: past this point, what it did is in
                # doubt even when what then times out had no time left (a second saga, say).
                return error_result(too_late(spec.name, deadline - started), refused=True)
            ctx = AegisContext(deadline=deadline)
            report = progress_sender(request)
            if report is None:
                # No progress token: the events are only needed for the result, so no task is
                # started and each event costs one list append.
                events: list[SagaEvent] = []
                with Observing(events.append, spec.name):
                    return await app._invoke(spec, ctx, kwargs, events, clock, started, request)
            observer = RequestObserver()
            outcome = error_result("workflow did not finish", refused=False)
            with Observing(observer, spec.name):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(observer.forward_progress, report)
                    try:
                        outcome = await app._invoke(
                            spec, ctx, kwargs, observer.events, clock, started, request
                        )
                    finally:
                        observer.close()
            return outcome

        return run_workflow

    async def _invoke(
        self,
        spec: Workflow,
        ctx: AegisContext,
        arguments: dict[str, Any],
        events: list[SagaEvent],
        clock: Clock,
        started: float,
        request: Any = None,
    ) -> CallToolResult:
        try:
            with routed(spec.runner, None if request is None else request.meta):
                returned = await spec.fn(ctx, **arguments)
        except SagaFailed as exc:
            return failed_result(exc.report, events, clock() - started)
        except ToolTimeoutError as exc:
            return timed_out_result(f"workflow {spec.name!r}: {exc}", exc)
        except Exception as exc:
            # Not a saga failure: the workflow's own code raised. Say what, minus any secret.
            text = scrub(exception_text(exc), _secrets(events))
            # It may have acted (a saga of its own may even have committed): not a refusal.
            return error_result(f"workflow {spec.name!r} failed: {type(exc).__name__}: {text}", refused=False)
        return committed_result(returned, events, clock() - started)

    # -- plain tools ----------------------------------------------------------------------------

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
        *,
        compensate: Compensation | None = None,
        secret: str | Iterable[str] = (),
        in_doubt: bool = False,
    ) -> None:
        """Register a tool; an ``async def`` runs under the tool deadline and may raise `ToolError`.

        Sync functions are registered as the SDK does (in a worker thread, which no deadline can stop).
        A tool may not take a workflow's name: the SDK would keep the workflow and only log a warning.
        `compensate` makes it compensable (see aegis_nb.server.compensable): a call with a saga handle
        is a step of that saga, and the saga tools are served. `secret` names its parameters that never
        reach events, status or reports; `in_doubt`: a failed call is undone too (it may have acted).
        """
        tool_name = name or fn.__name__
        if tool_name in self._workflows:
            raise SagaDefinitionError(
                f"tool {tool_name!r}: a workflow named {tool_name!r} is already registered"
            )
        self._checkers.pop(tool_name, None)
        if compensate is not None:
            self._add_compensable(
                fn, tool_name, compensate, secret, in_doubt, title, description, annotations, icons, meta
            )
            return
        if getattr(fn, "_aegis_wrapped", False) or not inspect.iscoroutinefunction(fn):
            if not inspect.iscoroutinefunction(fn) and (inspect.isfunction(fn) or inspect.ismethod(fn)):
                fn = in_a_clean_slate(fn, tool_name)  # a sync tool (ours are wrapped already)
            super().add_tool(fn, name, title, description, annotations, icons, meta, structured_output)
            return
        runner = self._tool_runner(fn, tool_name)
        super().add_tool(
            runner,
            tool_name,
            title,
            description or inspect.getdoc(fn),
            annotations,
            icons,
            meta,
            structured_output,
        )

    def remove_tool(self, name: str) -> None:
        """Remove a tool, or a workflow (which then leaves `workflows`, and its name is free again)."""
        super().remove_tool(name)
        self._workflows.pop(name, None)
        self._compensable.pop(name, None)
        self._checkers.pop(name, None)

    def tool(
        self,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
        *,
        compensate: Compensation | None = None,
        secret: str | Iterable[str] = (),
        in_doubt: bool = False,
    ) -> Callable[[F], F]:
        """``@app.tool(...)`` as the SDK's, plus `compensate`, `secret` and `in_doubt` (see `add_tool`)."""
        if callable(name):
            raise TypeError("use @app.tool() or @app.tool('name'), not a bare @app.tool")

        def decorator(fn: F) -> F:
            self.add_tool(
                fn,
                name,
                title,
                description,
                annotations,
                icons,
                meta,
                structured_output,
                compensate=compensate,
                secret=secret,
                in_doubt=in_doubt,
            )
            return fn

        return decorator

    # -- compensable tools and agent sagas ------------------------------------------------------

    @property
    def saga_handles(self) -> SagaHandles | None:
        """The open agent sagas while the server serves (None before, after, with no compensable tool,
        or while several in-process clients each have their own: see aegis_nb.server.saga_serving)."""
        return self._sagas.only()

    @property
    def compensable_tools(self) -> Mapping[str, CompensableCall]:
        """The compensable tools by name (read-only): each one's saga step."""
        return MappingProxyType(self._compensable)

    def _add_compensable(
        self,
        fn: Callable[..., Any],
        tool_name: str,
        compensate: Compensation,
        secret: str | Iterable[str],
        in_doubt: bool,
        title: str | None,
        description: str | None,
        annotations: ToolAnnotations | None,
        icons: list[Icon] | None,
        meta: dict[str, Any] | None,
    ) -> None:
        if not inspect.iscoroutinefunction(fn) or getattr(fn, "_aegis_wrapped", False):
            raise SagaDefinitionError(f"compensable tool {tool_name!r} must be an `async def` function")
        if find_context_parameter(fn) is not None:
            raise SagaDefinitionError(
                f"compensable tool {tool_name!r}: a saga step cannot take the SDK's Context"
            )
        parameters = inspect.signature(fn, eval_str=True).parameters
        hidden = secret_names(secret, parameters, tool_name)
        step = CompensableCall(
            tool_name,
            fn,
            undo_of(compensate),
            self.call_tool,
            key_argument="idempotency_key" if "idempotency_key" in parameters else None,
            timeout=self.tool_timeout,
            in_doubt=in_doubt,
        )
        plain = self._tool_runner(fn, tool_name)
        runner = compensable_runner(
            plain,
            step,
            hidden,
            self._sagas.of,
            REQUEST_PARAM,
            lambda arguments: self._refused_arguments(tool_name, arguments),
            self.callers.of,
        )
        self._add_saga_tools()
        super().add_tool(
            runner, tool_name, title, description or inspect.getdoc(fn), annotations, icons, meta, None
        )
        self._compensable[tool_name] = step
        self._register_with_journal(step)

    def _register_with_journal(self, step: CompensableCall) -> None:
        """Let recovery find a compensable tool's step by its name: it holds the tool, which no
        journal record could rebuild, and a fresh process registers its own when the tool is added."""
        from aegis_nb.saga.durable.locator import StepResolver  # only a durable app needs it

        journal = self.workflow_engine.journal
        resolver = getattr(getattr(journal, "inner", journal), "resolver", None)
        if isinstance(resolver, StepResolver):
            resolver.register(step)

    def _add_saga_tools(self) -> None:
        """Serve saga_begin, saga_status, saga_commit and saga_rollback, once."""
        if self._tool_manager.get_tool(SAGA_TOOLS[0]) is not None:
            return
        for tool_name in SAGA_TOOLS:
            if self._tool_manager.get_tool(tool_name) is not None:
                raise SagaDefinitionError(
                    f"compensable tools need the saga tool {tool_name!r}, and a tool of that name is "
                    "already registered"
                )
        for tool_name, fn in saga_tools(self._sagas.of, self.callers.of).items():
            self.add_tool(fn, tool_name, structured_output=False)

    @asynccontextmanager
    async def _serving_sagas(self, state: object) -> AsyncIterator[None]:
        """Hold the agent sagas of one run of the lifespan (whose requests see `state`) while it
        serves; leaving rolls back those still open."""
        if not self._compensable:
            yield
            return
        async with self._sagas.serving(state):
            yield

    def _saga_registry(self) -> SagaHandles:
        return SagaHandles(
            self.workflow_engine,
            ttl=self.saga_ttl,
            timeout=self.saga_timeout,
            max_open=self.saga_max_open,
            max_open_per_caller=self.saga_max_open_per_caller,
        )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """As the SDK's, its refusals marked ``aegis-nb/refused`` (the tool did nothing): an unknown
        tool, and arguments its validation rejects, in the SDK's words; and, on a server with
        compensable tools, a saga handle given to a tool that can be no step of a saga."""
        if self._compensable and name not in self._compensable:
            refusal = self._not_a_saga_step(name, arguments, request_meta(context))
            if refusal is not None:
                return refusal
        try:
            return await super().call_tool(name, arguments, context)
        except SdkToolError as exc:
            if not refused_on_arrival(exc):
                raise
            return error_result(str(exc), refused=True)

    def _not_a_saga_step(
        self, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None
    ) -> CallToolResult | None:
        """A refusal for a saga handle on a tool that is not compensable: run as a plain call, the
        agent would take it for a step that a rollback undoes. Read-only tools change nothing, so
        they take a handle and ignore it; a tool with its own ``saga`` parameter keeps it."""
        tool = self._tool_manager.get_tool(name)
        if tool is None or (tool.annotations is not None and tool.annotations.read_only_hint):
            return None
        own = SAGA_ARGUMENT in tool.parameters.get("properties", {})
        if (SAGA_ARGUMENT not in arguments or own) and not (meta and meta.get(SAGA_META_KEY)):
            return None
        return error_result(
            f"{name} is not compensable: it cannot be a step of a saga, and nothing was done; "
            "call it without the saga handle to run it outside the saga",
            refused=True,
        )

    def _refused_arguments(self, name: str, arguments: Mapping[str, Any]) -> CallToolResult | None:
        """A refusal if `arguments` (as pydantic validated them) break the tool's published schema.

        Checked after pydantic, which coerces (``"3"`` for an int) and checks types, because a schema
        may publish more than pydantic enforces: a parameter typed loosely so that its error never
        repeats a card number, with a ``pattern`` (aegis_nb.server.validation).
        """
        checker = self._checkers.get(name)
        if checker is None:
            tool = self._tool_manager.get_tool(name)
            assert tool is not None
            checker = self._checkers[name] = ArgumentChecker(tool.parameters)
        problems = checker.problems(to_jsonable_python(dict(arguments)))
        if not problems:
            return None
        return error_result(f"{name}: refused before anything ran: {'; '.join(problems)}", refused=True)

    def _tool_runner(self, fn: Callable[..., Awaitable[Any]], tool_name: str) -> Callable[..., Any]:
        app = self
        own_context = find_context_parameter(fn)
        signature = inspect.signature(fn, eval_str=True)

        async def run_tool(**kwargs: Any) -> Any:
            request = kwargs.pop(REQUEST_PARAM) if own_context is None else kwargs[own_context]
            now = anyio.current_time()  # one reading: the deadline starts from it, and is checked against it
            try:
                deadline = request_deadline(request_meta(request), app.tool_timeout, now)
            except InvalidRequestMeta as exc:
                return error_result(str(exc), refused=True)
            if deadline <= now:
                # Refused before the tool runs; a timeout from inside it is in doubt (timed_out_result).
                return error_result(too_late(tool_name, deadline - now), refused=True)
            # A clean slate (see aegis_nb.server.routing): called in-process from another server's
            # workflow step, the tool runs in that caller's context, and the sagas it runs must not
            # be reported to the caller's request. They are named after the tool.
            with Observing(None, tool_name):
                try:
                    if deadline == math.inf:
                        return await fn(**kwargs)
                    return await app._executor.run_named(
                        tool_name, AegisContext(deadline=deadline), fn, **kwargs
                    )
                except ToolError as exc:
                    return error_result(exc.message, refused=exc.refused, structured=exc.structured)
                except ToolTimeoutError as exc:
                    return timed_out_result(str(exc), exc)

        publish_signature(
            run_tool,
            list(signature.parameters.values()),
            signature.return_annotation,
            tool_name,
            fn.__doc__,
            add_request=own_context is None,
        )
        return run_tool

    # -- serving --------------------------------------------------------------------------------

    def run(  # type: ignore[override]
        self,
        transport: Transport | str = Transport.STDIO,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        allowed_hosts: str | Iterable[str] = (),
        allowed_origins: str | Iterable[str] = (),
        token: str | Secret | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
        unused_session_timeout: float = DEFAULT_UNUSED_SESSION_TIMEOUT,
    ) -> None:
        """Serve until stopped: stdio by default, or streamable HTTP on ``http://host:port/mcp``.

        Over HTTP (see `aegis_nb.server.http_security`): Host and Origin are always checked; off
        loopback, `allowed_hosts` (``HOST[:PORT]``) must name what clients reach the server by, or
        `UnsafeServing` is raised before anything starts; `allowed_origins` (``scheme://host[:port]``)
        are the web pages that may call it. With a `token`, every request needs
        ``Authorization: Bearer <token>``. Sessions: at most `max_sessions` (a full table closes
        its least recently active idle one for a newcomer), closed after `session_idle_timeout`
        seconds idle, or `unused_session_timeout` when used for nothing but their initialization.
        """
        if _transport(transport) is Transport.STDIO:
            serving_logs(self.settings.log_level)  # this process serves: log as the SDK would
            # The SDK diverts print() to stderr while stdout carries the protocol; line buffering
            # makes a step's prints show up as they happen rather than at exit.
            if isinstance(sys.stdout, io.TextIOWrapper):
                sys.stdout.reconfigure(line_buffering=True)
            anyio.run(self.run_stdio_async)
            return
        security = HttpSecurity(
            allowed_hosts=_names(allowed_hosts),
            allowed_origins=_names(allowed_origins),
            token=Secret(token) if isinstance(token, str) else token,
            max_sessions=max_sessions,
            session_idle_timeout=session_idle_timeout,
            unused_session_timeout=unused_session_timeout,
        )
        security.transport_security(host)  # refused off loopback here, before any set-up
        serving_logs(self.settings.log_level)
        anyio.run(serve_http, self, host, port, security, backend="asyncio")  # uvicorn: asyncio only


def _names(given: str | Iterable[str]) -> tuple[str, ...]:
    """One name or several: a lone str is one host or origin, not its characters."""
    return (given,) if isinstance(given, str) else tuple(given)


def _transport(value: Transport | str) -> Transport:
    if isinstance(value, Transport):
        return value
    aliases = {"stdio": Transport.STDIO, "http": Transport.HTTP, "streamable-http": Transport.HTTP}
    try:
        return aliases[value]
    except KeyError:
        raise ValueError(f"unknown transport {value!r}: use 'stdio' or 'http'") from None


def _secrets(events: list[SagaEvent]) -> tuple[str, ...]:
    found: list[str] = []
    for event in events:
        context = getattr(event, "context", None)
        if isinstance(context, AegisContext):
            found.extend(context.secret_values())
    return tuple(found)
