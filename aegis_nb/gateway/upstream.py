"""The gateway's client side: one MCP session per upstream server, and which upstream serves each tool.

`open_upstreams` connects to every upstream a policy names (a stdio command, a URL, or, from
Python, a server object in process), lists their tools, and refuses what cannot be served: an
upstream that is down (`ServerUnreachable`, naming it), two upstreams serving one tool name that the
policy does not settle, an upstream tool named like a saga tool. `Upstreams.call` forwards a call
and returns the upstream's own `CallToolResult`; an upstream that dies mid-call raises `UpstreamLost`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from mcp import StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, RequestParamsMeta, Tool

from aegis_nb.gateway.policy import SAGA_TOOLS, Policy, PolicyError, UpstreamSpec
from aegis_nb.kernel.errors import AegisError
from aegis_nb.kernel.scrubbing import exception_text
from aegis_nb.server.session import ToolSession, connect

Target = MCPServer[Any] | StdioServerParameters | str
"""What an upstream is reached by: a server object (in process), a stdio command, or a URL."""


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


class Upstreams:
    """The open upstream sessions and the routing table (tool name -> `UpstreamTool`)."""

    def __init__(self, sessions: Mapping[str, ToolSession], tools: Mapping[str, UpstreamTool]) -> None:
        self.sessions = dict(sessions)
        self.tools = dict(tools)

    async def call(
        self, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] | None = None
    ) -> CallToolResult:
        """Forward a call to the upstream serving `name`; `UpstreamLost` when it stops answering."""
        upstream = self.tools[name].upstream
        request_meta = None if meta is None else RequestParamsMeta(**meta)  # type: ignore[typeddict-item]
        try:
            return await self.sessions[upstream].client.call_tool(name, dict(arguments), meta=request_meta)
        except Exception as exc:  # the session's transport broke: a closed stream, a dead process
            raise UpstreamLost(
                f"upstream {upstream!r} stopped answering during {name!r}: {type(exc).__name__}: "
                f"{exception_text(exc) or 'no detail'}"
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
    async with AsyncExitStack() as stack:
        sessions: dict[str, ToolSession] = {}
        tools: dict[str, UpstreamTool] = {}
        shared: dict[str, list[str]] = {}
        for spec in policy.upstreams:
            session = await stack.enter_async_context(connect(targets.get(spec.name, target_of(spec))))
            sessions[spec.name] = session
            listing = await session.client.list_tools()
            for tool in listing.tools:
                shared.setdefault(tool.name, []).append(spec.name)
                entry = policy.tool(tool.name)
                if entry is not None and entry.upstream is not None and entry.upstream != spec.name:
                    continue  # the policy routes this name to another upstream
                tools.setdefault(tool.name, UpstreamTool(spec.name, tool))
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
        yield Upstreams(sessions, tools)
