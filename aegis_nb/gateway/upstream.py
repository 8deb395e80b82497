"""The gateway's client side: one MCP session per upstream server, and which upstream serves each tool.

`open_upstreams` connects to every upstream a policy names (a stdio command, a URL, or, from
Python, a server object in process), lists their tools, and refuses what cannot be served: an
upstream that is down (`ServerUnreachable`, naming it), two upstreams serving one tool name that the
policy does not settle, an upstream tool named like a saga tool. `Upstreams.call` forwards a call
and returns the upstream's own `CallToolResult`; an upstream that dies mid-call raises `UpstreamLost`.

Each upstream's session is kept by a task of its own (`UpstreamLink.keep`): when the session
breaks (a killed process, a server restarted) it is reconnected, after a delay that doubles from
`FIRST_RETRY` up to `LAST_RETRY` seconds while the upstream stays unreachable. A call made while an
upstream is not connected is not sent: it answers a refused error result (``aegis-nb/refused``),
since it did nothing, and a saga step that gets it fails refused, with nothing to undo.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus
from mcp import StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, CallToolResult, RequestParamsMeta, Tool

from aegis_nb.gateway.policy import SAGA_TOOLS, Policy, PolicyError, UpstreamSpec
from aegis_nb.kernel.errors import AegisError
from aegis_nb.kernel.printable import printable_line
from aegis_nb.kernel.scrubbing import exception_text
from aegis_nb.server.results import error_result
from aegis_nb.server.session import ToolSession, connect, redact_urls, sole_exception

logger = logging.getLogger(__name__)

Target = MCPServer[Any] | StdioServerParameters | str
"""What an upstream is reached by: a server object (in process), a stdio command, or a URL."""

FIRST_RETRY: Final = 0.05
"""Seconds before the first attempt to reconnect a broken upstream (a respawned process is quick)."""

LAST_RETRY: Final = 5.0
"""The longest wait between two attempts: an upstream that comes back is used again within it."""


class UpstreamLost(AegisError, ConnectionError):
    """An upstream stopped answering mid-call: the call may or may not have acted."""


@dataclass(frozen=True, slots=True)
class UpstreamTool:
    """An upstream tool as listed, and the upstream that serves it."""

    upstream: str
    tool: Tool


def target_of(spec: UpstreamSpec) -> StdioServerParameters | str:
    """The SDK's way to reach `spec`: its URL, or its command as stdio server parameters."""
    if spec.url is not None:
        return spec.url
    assert spec.command is not None  # the policy checks one of the two is given
    return StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env) or None)


class UpstreamLink:
    """One upstream's session while it is connected (`session`), reconnected by `keep` when it breaks."""

    def __init__(self, name: str, target: Target) -> None:
        self.name = name
        self.target = target
        self.session: ToolSession | None = None
        self._connected = anyio.Event()
        self._broken = anyio.Event()

    async def wait_connected(self) -> None:
        """Return once the upstream is connected (at once if it is)."""
        await self._connected.wait()

    def broke(self, session: ToolSession) -> None:
        """A call found `session` broken: no call is sent on it again, and `keep` reconnects."""
        if self.session is session:
            self._down()

    def _down(self) -> None:
        self.session = None
        if self._connected.is_set():
            self._connected = anyio.Event()
        self._broken.set()

    async def keep(self, *, task_status: TaskStatus[Sequence[Tool]]) -> None:
        """Connect and report the tools listed (`ServerUnreachable` if that fails), then keep the
        session: each time it breaks, reconnect with backoff, until cancelled."""
        delay, started, said = FIRST_RETRY, False, True
        while True:
            why = "its session closed"
            try:
                async with connect(self.target) as session:
                    listing = await session.client.list_tools()
                    self._broken = anyio.Event()
                    self.session = session
                    self._connected.set()
                    delay, said = FIRST_RETRY, False
                    if started:
                        logger.info("gateway: upstream %r answers again", self.name)
                    else:
                        task_status.started(listing.tools)
                        started = True
                    await self._broken.wait()
            except Exception as exc:  # unreachable, or the session broke (a transport's own error)
                if not started:
                    raise
                why = printable_line(redact_urls(f"{type(exc).__name__}: {exception_text(exc)}"))
            self._down()
            if not said:  # once an outage: the attempts that follow would only repeat it
                logger.warning("gateway: upstream %r stopped answering (%s): reconnecting", self.name, why)
                said = True
            await anyio.sleep(delay)
            delay = min(delay * 2, LAST_RETRY)


class Upstreams:
    """The upstream links (kept connected) and the routing table (tool name -> `UpstreamTool`)."""

    def __init__(self, links: Mapping[str, UpstreamLink], tools: Mapping[str, UpstreamTool]) -> None:
        self.links = dict(links)
        self.tools = dict(tools)

    @property
    def sessions(self) -> dict[str, ToolSession]:
        """The sessions of the upstreams connected now, by upstream name."""
        return {name: link.session for name, link in self.links.items() if link.session is not None}

    async def call(
        self, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None = None
    ) -> CallToolResult:
        """Forward a call to the upstream serving `name`; `UpstreamLost` when it stops answering.

        While the upstream is not connected the call is not sent: the answer is a refused error.
        """
        upstream = self.tools[name].upstream
        link = self.links[upstream]
        session = link.session
        if session is None:
            return error_result(
                f"{name} was not called: upstream {upstream!r} is not connected (it stopped answering; "
                "the gateway is reconnecting it): try again later",
                refused=True,
            )
        request_meta = None if meta is None else RequestParamsMeta(**meta)  # type: ignore[typeddict-item]
        try:
            return await session.client.call_tool(name, dict(arguments), meta=request_meta)
        except Exception as exc:  # the session's transport broke: a closed stream, a dead process
            if not isinstance(exc, MCPError) or exc.code == CONNECTION_CLOSED:
                link.broke(session)  # an error the upstream answered leaves its session as it is
            raise UpstreamLost(
                f"upstream {upstream!r} stopped answering during {name!r}: {type(exc).__name__}: "
                f"{printable_line(redact_urls(exception_text(exc))) or 'no detail'}"
            ) from exc


@asynccontextmanager
async def open_upstreams(policy: Policy, targets: Mapping[str, Target]) -> AsyncIterator[Upstreams]:
    """Connect to every upstream of `policy` (`targets` overrides how a named one is reached).

    Raises `ServerUnreachable` for an upstream that is down, and `PolicyError` for a tool the
    policy names that no upstream serves, or a tool name two upstreams share.
    """
    unknown = sorted(set(targets) - {spec.name for spec in policy.upstreams})
    if unknown:
        raise PolicyError(policy.source, None, "upstreams", f"no upstream named {unknown[0]!r} in the policy")
    try:
        async with anyio.create_task_group() as keepers:
            links: dict[str, UpstreamLink] = {}
            tools: dict[str, UpstreamTool] = {}
            shared: dict[str, list[str]] = {}
            for spec in policy.upstreams:
                link = UpstreamLink(spec.name, targets.get(spec.name, target_of(spec)))
                listed: Sequence[Tool] = await keepers.start(link.keep)
                links[spec.name] = link
                for tool in listed:
                    shared.setdefault(tool.name, []).append(spec.name)
                    entry = policy.tool(tool.name)
                    if entry is not None and entry.upstream is not None and entry.upstream != spec.name:
                        continue  # the policy routes this name to another upstream
                    tools.setdefault(tool.name, UpstreamTool(spec.name, tool))
            try:
                _check_routes(policy, tools, shared)
                yield Upstreams(links, tools)
            finally:
                keepers.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        sole = sole_exception(group)
        if sole is None:
            raise
        raise sole from sole.__cause__  # the group only wrapped it: keep its own cause, drop the group


def _check_routes(policy: Policy, tools: Mapping[str, UpstreamTool], shared: Mapping[str, list[str]]) -> None:
    for name, servers in shared.items():
        if name in SAGA_TOOLS:
            raise PolicyError(
                policy.source,
                None,
                f"upstreams.{servers[0]}",
                f"serves {name!r}, the gateway's own saga tool",
            )
        entry = policy.tool(name)
        if len(servers) > 1 and (entry is None or entry.upstream is None):
            raise policy.error(
                ("tools", name),
                f'served by {" and ".join(map(repr, servers))}: say which with upstream = "..."',
            )
    policy.check_tools({name: found.tool.input_schema for name, found in tools.items()})
