"""`Gateway`: an MCP server that serves the tools of other MCP servers, and makes an agent's calls a saga.

Clients see every upstream tool under its own name, with its own schema and annotations, plus the
saga tools (``saga_begin``, ``saga_status``, ``saga_commit``, ``saga_rollback``). A call is checked
against the tool's input schema here, before anything is forwarded (no client checks schemas, and
a refused call must not become a step); then, by the tool's policy:

- read only: forwarded as it is, in a saga or not;
- compensable: outside a saga forwarded as it is; with a saga handle (a ``saga`` argument, which
  the gateway adds to the tool's schema, or ``_meta["aegis-nb/saga"]``) it is the saga's next step,
  undone on rollback by its undo tool with the arguments the policy binds from the call;
- irreversible: forwarded outside a saga, refused inside one unless the policy allows it
  (``allow_in_saga``: then forwarded as outside, not a step, since nothing could undo it).

Tools the policy does not name take a default from their annotations (`defaults`): ``readOnlyHint``
makes a tool read only, anything else irreversible. The upstream sessions open with the gateway
(``async with gateway:``, or the server's lifespan when a client or `run` starts it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

import jsonschema  # type: ignore[import-untyped]  # no stubs; the SDK depends on it
from mcp.server.mcpserver import Context
from mcp.types import SERVER_INFO_META_KEY, CallToolResult, Tool, ToolAnnotations

from aegis_nb.gateway.policy import Policy, ToolKind, ToolPolicy
from aegis_nb.gateway.steps import UpstreamStep
from aegis_nb.gateway.upstream import Target, UpstreamLost, Upstreams, open_upstreams
from aegis_nb.kernel.clock import Clock
from aegis_nb.kernel.errors import ToolError, ToolTimeoutError
from aegis_nb.kernel.printable import printable_line
from aegis_nb.saga.durable.journal import SqliteJournal
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.results import error_result, timed_out_result
from aegis_nb.server.saga_handles import (
    DEFAULT_SAGA_TIMEOUT,
    DEFAULT_TTL,
    HandleRefused,
    NotOpen,
    SagaHandles,
)
from aegis_nb.server.saga_tools import saga_tools
from aegis_nb.server.signature import request_meta

logger = logging.getLogger(__name__)

SAGA_ARGUMENT: Final = "saga"
"""The argument the gateway adds to a compensable or irreversible tool's schema: the saga handle."""

SAGA_META_KEY: Final = "aegis-nb/saga"
"""``_meta`` key a host may set instead of the argument."""

STEP_META_KEY: Final = "aegis-nb/step"
"""``_meta`` key of a result that ran as a saga step: its flat index in the saga."""


def default_policy(tool: Tool) -> ToolPolicy:
    """What a tool the policy does not name is taken for: read only if it says so, else irreversible."""
    hints = tool.annotations or ToolAnnotations()
    kind = ToolKind.READ_ONLY if hints.read_only_hint is True else ToolKind.IRREVERSIBLE
    return ToolPolicy(tool.name, kind, guessed=True)


class Gateway(AegisMCP):
    """Serve the upstream MCP servers of `policy` (reached as `upstreams` overrides say) as one server."""

    def __init__(
        self,
        policy: Policy,
        *,
        upstreams: Mapping[str, Target] | None = None,
        name: str = "aegis-nb-gateway",
        saga_ttl: float = DEFAULT_TTL,
        saga_timeout: float | None = DEFAULT_SAGA_TIMEOUT,
        clock: Clock | None = None,
        journal: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """`upstreams` maps an upstream's policy name to a server object, stdio parameters or a URL,
        in place of what the policy says. A saga idle for `saga_ttl` seconds, or open for `saga_timeout`,
        is rolled back (`clock` measures both: the loop's by default). Other keyword arguments go to
        `AegisMCP` (`engine`, its sinks seeing every saga's events).

        `journal`, a SQLite file's path, keeps every saga as a run of its own, which start-up
        recovery rolls back if the gateway was killed while it was open (the journal rebuilds each
        step by its tool's name). Recovery runs when the gateway is served (stdio, HTTP, or an
        in-process client's lifespan): serve a journaled gateway once, not to several in-process
        clients at a time, as each lifespan recovers what it finds unfinished.
        """
        engine = kwargs.get("engine")
        given = journal is not None and not isinstance(journal, str | os.PathLike)
        if getattr(engine, "journal", None) is not None or given:
            raise ValueError("give a Gateway its journal as a path: it registers its steps with it")
        self.policy = policy
        self._clock = clock
        self._targets = dict(upstreams or {})
        self._upstreams: Upstreams | None = None
        self._handles: SagaHandles | None = None
        self._routes: dict[str, Route] = {}
        self._stack: AsyncExitStack | None = None
        # One step per compensable tool, for the gateway's life: what a journal finds by name.
        self._steps = {
            tool.name: UpstreamStep(lambda: self.upstreams, tool)
            for tool in policy.tools
            if tool.kind is ToolKind.COMPENSABLE
        }
        if journal is not None:
            kwargs["journal"] = SqliteJournal(journal, steps=list(self._steps.values()))
        super().__init__(
            name,
            lifespan=_lifespan,
            tool_timeout=None,
            workflow_timeout=None,
            saga_ttl=saga_ttl,
            saga_timeout=saga_timeout,
            **kwargs,
        )
        # The saga tools of AegisMCP's compensable tools, over the gateway's own registry.
        for tool_name, tool in saga_tools(lambda request: self._handles, self.callers.of).items():
            self.add_tool(tool, tool_name, structured_output=False)

    # -- the upstream sessions ------------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        """Open every upstream session (refused while open already: one set of sessions per gateway)."""
        if self._stack is not None:
            raise RuntimeError("this gateway is open already")
        async with AsyncExitStack() as stack:
            upstreams = await stack.enter_async_context(open_upstreams(self.policy, self._targets))
            self._routes = {
                name: Route.of(found.tool, self.policy.tool(name) or default_policy(found.tool))
                for name, found in upstreams.tools.items()
            }
            # Entered after the upstreams, so left before them: open sagas roll back while they answer.
            self._handles = await stack.enter_async_context(
                SagaHandles(
                    self.workflow_engine,
                    ttl=self.saga_ttl,
                    timeout=self.saga_timeout,
                    clock=self._clock,
                    max_open=self.saga_max_open,
                    max_open_per_caller=self.saga_max_open_per_caller,
                )
            )
            self._upstreams = upstreams
            self._stack = stack.pop_all()
        for line in self.startup_lines():
            logger.info("%s", line)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack = self._stack
        try:
            if stack is not None:  # the open sagas roll back first, through the sessions still open
                await stack.__aexit__(kind, exc, tb)
        finally:
            self._stack, self._upstreams, self._handles, self._routes = None, None, None, {}

    @property
    def upstreams(self) -> Upstreams:
        """The open sessions; `RuntimeError` when the gateway is not open."""
        if self._upstreams is None:
            raise RuntimeError("the gateway is not open: use `async with gateway:` or serve it")
        return self._upstreams

    @property
    def handles(self) -> SagaHandles:
        """The open agent sagas; `RuntimeError` when the gateway is not open."""
        if self._handles is None:
            raise RuntimeError("the gateway is not open: use `async with gateway:` or serve it")
        return self._handles

    def policies(self) -> dict[str, ToolPolicy]:
        """Every upstream tool's policy: the policy's entry, or the default from its annotations."""
        self.upstreams  # noqa: B018 (refused when not open)
        return {name: route.policy for name, route in self._routes.items()}

    def defaults(self) -> dict[str, ToolPolicy]:
        """The tools the policy does not name, with the default each was given."""
        return {name: policy for name, policy in self.policies().items() if self.policy.tool(name) is None}

    def startup_lines(self) -> list[str]:
        """What the gateway says when it starts: its upstreams, and each default and guess it serves."""
        upstreams = self.upstreams
        lines = [
            f"gateway: {len(upstreams.tools)} tools from {len(upstreams.sessions)} upstream(s): "
            + ", ".join(spec.describe() for spec in self.policy.upstreams)
        ]
        for name, policy in sorted(self.policies().items()):
            if self.policy.tool(name) is None:
                lines.append(
                    f"gateway: {printable_line(name)} is not in the policy: served as {policy.kind.value} "
                    "(from its annotations)"
                )
            elif policy.guessed:
                lines.append(
                    f"gateway: {printable_line(name)} is {policy.kind.value}, "
                    "marked as a guess in the policy (guess = true)"
                )
        return lines

    # -- serving --------------------------------------------------------------------------------

    async def list_tools(self) -> list[Tool]:
        """The gateway's own tools, then every upstream tool (a saga argument added where it counts)."""
        own = await super().list_tools()
        if self._upstreams is None:
            return own
        return [*own, *(route.served for route in self._routes.values())]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        """An upstream tool's call, checked, then forwarded or made a saga step; any other: our own."""
        route = self._routes.get(name)
        if route is None:
            return await super().call_tool(name, arguments, context)
        policy = route.policy
        handle = arguments.pop(SAGA_ARGUMENT, None) if policy.kind is not ToolKind.READ_ONLY else None
        if handle is None:
            meta = request_meta(context)
            handle = None if meta is None else meta.get(SAGA_META_KEY)
        problem = route.problem(arguments)
        if problem is not None:
            return error_result(f"{name}: {problem}", refused=True)
        if handle is None or policy.kind is ToolKind.READ_ONLY:
            return await self._forward(name, arguments)
        if policy.kind is ToolKind.IRREVERSIBLE:
            if policy.allow_in_saga:  # let through as outside a saga: no step, since nothing undoes it
                return await self._forward(name, arguments)
            return error_result(
                f"{name} is irreversible: the gateway's policy refuses it inside a saga "
                "(commit the saga first, or call it without a saga)",
                refused=True,
            )
        return await self.saga_call(handle, name, arguments, policy, owner=self.callers.of(context))

    async def _forward(self, name: str, arguments: Mapping[str, Any]) -> CallToolResult:
        try:
            return _passed_on(await self.upstreams.call(name, arguments))
        except UpstreamLost as exc:
            return error_result(str(exc), refused=False)  # it may have acted before the upstream went

    async def saga_call(
        self,
        handle: object,
        name: str,
        arguments: dict[str, Any],
        policy: ToolPolicy,
        *,
        owner: str | None = None,
    ) -> Any:
        """A call that carries a saga handle: the saga's next step, answered as the upstream answered.

        `owner` is the caller's identity: the handle answers only the caller that began its saga."""
        step = self._steps[name]
        # The call's secrets and answer are held for as long as this caller waits, and no longer.
        with step.calling(arguments) as call:
            try:
                done = await self.handles.step(
                    handle if isinstance(handle, str) else "", step, (), call.arguments, owner=owner
                )
            except HandleRefused as exc:
                return error_result(f"{name} was not called: {exc}", refused=True)
            except NotOpen as exc:
                if exc.cut_off:  # it was called, and may have acted: the state says if that was undone
                    return error_result(
                        f"{name} was cancelled when the saga ended: {exc.state.ended_as()}",
                        refused=False,
                        structured=exc.state.to_json(),
                    )
                phase = exc.state.phase.value
                return error_result(
                    f"{name} was not called: the saga has ended ({phase})",
                    refused=True,
                    structured=exc.state.to_json(),
                )
            except ToolError as exc:  # the upstream's own error: the saga stays open, the agent decides
                return error_result(exc.message, refused=exc.refused, structured=exc.structured)
            except ToolTimeoutError as exc:
                return timed_out_result(str(exc), exc)
            except UpstreamLost as exc:
                return error_result(str(exc), refused=False)
            result = call.answer
        assert result is not None  # the step succeeded, so its call answered
        return _passed_on(result, {STEP_META_KEY: done.index})


def _passed_on(result: CallToolResult, added: Mapping[str, Any] | None = None) -> CallToolResult:
    """An upstream's result as the gateway answers it: without the upstream's server-info stamp,
    so that the SDK stamps the gateway's own (it stamps only a result that has none).

    The result is this call's own, fresh from the client: its meta is replaced in place, as a copy
    of the whole result (~15 µs) would cost the gateway a tenth of an in-process call.
    """
    meta = result.meta
    if not added and (meta is None or SERVER_INFO_META_KEY not in meta):
        return result
    kept = {key: value for key, value in (meta or {}).items() if key != SERVER_INFO_META_KEY}
    result.meta = {**kept, **(added or {})} or None
    return result


@asynccontextmanager
async def _lifespan(server: Any) -> AsyncIterator[dict[str, Any]]:
    """Open the upstreams for the time the server is served, unless they are open already."""
    assert isinstance(server, Gateway)
    if server._upstreams is not None:  # opened by `async with gateway:`, which closes them too
        yield {}
        return
    async with server:
        yield {}


def _served(tool: Tool, policy: ToolPolicy) -> Tool:
    """`tool` as the gateway lists it: with the optional saga argument unless it is read only."""
    if policy.kind is ToolKind.READ_ONLY:
        return tool
    schema = dict(tool.input_schema)
    properties = dict(schema.get("properties") or {})
    properties[SAGA_ARGUMENT] = {
        "type": "string",
        "description": "A saga handle from saga_begin: the call becomes a step of that saga.",
    }
    schema["properties"] = properties
    return tool.model_copy(update={"input_schema": schema})


@dataclass(frozen=True, slots=True)
class Route:
    """One upstream tool as served: its policy, its listing, and the check of its arguments."""

    tool: Tool
    policy: ToolPolicy
    served: Tool
    validator: Any

    @classmethod
    def of(cls, tool: Tool, policy: ToolPolicy) -> Route:
        schema = tool.input_schema
        checker = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        return cls(tool, policy, _served(tool, policy), checker(schema))

    def problem(self, arguments: Mapping[str, Any]) -> str | None:
        """Why `arguments` do not fit the tool's input schema (naming the place, never a value), or None."""
        error = jsonschema.exceptions.best_match(self.validator.iter_errors(arguments))
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path) or "arguments"
        # The message may quote the value (a card number): only the rule it broke is said.
        rule = error.validator
        return f"argument {printable_line(where)!r} does not fit the tool's input schema ({rule} rule)"
