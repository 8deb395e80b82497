"""`ToolSession`: an MCP client session whose tool calls return plain data and raise `ToolError`.

Steps want ``result = await session.call_tool("book_flight", {...})`` and an exception when the tool
says no, not a `CallToolResult` to inspect. `connect` opens one over any transport the SDK's
`mcp.Client` knows: a server object in-process, a `StdioServerParameters` subprocess, or an HTTP URL.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Any, Final, Protocol, cast
from urllib.parse import urlsplit, urlunsplit

import anyio
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, RequestParamsMeta, TextContent

from aegis_nb.kernel.errors import ServerUnreachable, ToolError, ToolTimeoutError
from aegis_nb.kernel.printable import printable_line
from aegis_nb.kernel.scrubbing import exception_text
from aegis_nb.kernel.values import JSON_LEAVES
from aegis_nb.server.results import REFUSED_META_KEY, TIMED_OUT_META_KEY

_RESULT_CHECKER = "jsonschema"
"""What the SDK's client checks structured results with: slow to import the first time."""


class ToolCaller(Protocol):
    """What a tool-pair step needs: call a tool by name, get its structured result or a `ToolError`."""

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]: ...


class ToolSession:
    """Wraps a connected `mcp.Client`; `call_tool` unwraps results and raises `ToolError` on ``is_error``."""

    def __init__(self, client: Client) -> None:
        self.client = client
        # The SDK checks structured results with jsonschema, imported on first use: pay for it when
        # connecting, not inside the first step's deadline (`connect` has imported it already).
        importlib.import_module(_RESULT_CHECKER)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The tool's structured content (or its text parsed as JSON, or ``{"text": ...}``).

        Argument values may come from a context's metadata: its frozen mappings and tuples are sent
        as JSON objects and arrays.
        """
        request_meta = None if meta is None else cast(RequestParamsMeta, dict(meta))
        # The client only reads the arguments: a dict of flat values is passed as it is.
        sent: dict[str, Any]
        if type(arguments) is dict and JSON_LEAVES.issuperset(map(type, arguments.values())):
            sent = arguments
        else:
            sent = _plain(arguments or {})
        result = await self.client.call_tool(name, sent, meta=request_meta)
        return unwrap_result(name, result)

    async def list_tools(self) -> list[str]:
        """The names of the server's tools."""
        listing = await self.client.list_tools()
        return [tool.name for tool in listing.tools]


def _plain(value: Any) -> Any:
    """`value` with every mapping a dict and every tuple a list: the SDK serializes no frozen ones."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def unwrap_result(tool: str, result: CallToolResult) -> dict[str, Any]:
    """Plain data from a tool result; `ToolError` (with the text and structure) when it is an error.

    The error is a refusal (`ToolError.refused`: nothing was done) only when the result says so, as
    an `AegisMCP` server's refusals do (``_meta["aegis-nb/refused"]``); any other error may come
    after the tool acted, so a failed in-doubt step is compensated. One that an `AegisMCP` server
    marks as stopped at its deadline mid-way raises `ToolTimeoutError`.
    """
    structured = result.structured_content
    if structured is not None and not result.is_error:
        # The result's own fresh dict needs no copy (the text block only repeats it).
        return structured if isinstance(structured, dict) else dict(structured)
    text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
    if result.is_error:
        meta = result.meta or {}
        if TIMED_OUT_META_KEY in meta:
            raise _timed_out(tool, text, meta[TIMED_OUT_META_KEY])
        message = text or "the tool reported an error"
        refused = meta.get(REFUSED_META_KEY) is True
        raise ToolError(tool, message, result.structured_content, refused=refused)
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"text": text}
    return parsed if isinstance(parsed, dict) else {"result": parsed}


def _timed_out(tool: str, text: str, budget_ms: object) -> ToolTimeoutError:
    budget: float | None = None
    if isinstance(budget_ms, int | float) and not isinstance(budget_ms, bool):
        with suppress(OverflowError):  # an int past float range: no budget worth saying
            budget = budget_ms / 1000
    error = ToolTimeoutError(tool, budget)
    if text:
        error.args = (text,)  # the server's own words, which name what ran out of time
    return error


@asynccontextmanager
async def connect(
    target: MCPServer[Any] | StdioServerParameters | str, **client_options: Any
) -> AsyncIterator[ToolSession]:
    """``async with connect(server_or_params_or_url) as session:`` a `ToolSession` over a real client.

    `client_options` go to `mcp.Client` (e.g. ``read_timeout_seconds``). An exception raised in the
    block comes out as itself, not wrapped in the client's task-group `ExceptionGroup`, so
    ``except SagaRolledBack`` around the block works.
    """
    if _RESULT_CHECKER not in sys.modules:
        # Where Jupyter is installed, this import compiles a grammar (rfc3987-syntax): about a second.
        # In a worker thread it holds up only this connection, not every task on the loop.
        await anyio.to_thread.run_sync(importlib.import_module, _RESULT_CHECKER)
    client = Client(target, **client_options)
    try:
        async with AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(client)
            except Exception as exc:
                # The SDK's errors here name neither the server nor, often, the problem's object
                # ("All connection attempts failed", "Connection closed", a bare ENOENT).
                cause = (sole_exception(exc) if isinstance(exc, BaseExceptionGroup) else None) or exc
                # The cause's text may quote the URL (httpx's status errors do) or the server's words.
                raise ServerUnreachable(
                    f"cannot connect to the MCP server {describe_target(target)}: "
                    f"{type(cause).__name__}: {printable_line(redact_urls(exception_text(cause)))}"
                ) from exc
            yield ToolSession(client)
    except BaseExceptionGroup as group:
        sole = sole_exception(group)
        if sole is None:
            raise
        raise sole from sole.__cause__  # the group only wrapped it: keep its own cause, drop the group


def describe_target(target: object) -> str:
    """How connection errors name a server, without what could be secret (URL credentials and
    query, command-line arguments, environment)."""
    if isinstance(target, str):
        url = urlsplit(target)
        host = url.hostname or ""
        where = f"{host}:{url.port}" if url.port is not None else host
        return f"at {url.scheme}://{where}{url.path}" if url.scheme else f"at {target!r}"
    if isinstance(target, StdioServerParameters):
        return f"started by {target.command!r} over stdio"
    if isinstance(target, MCPServer):
        return f"{target.name!r} (in process)"
    return f"of type {type(target).__name__}"


_URL: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>()]*[^\s'\"<>().,;:!?]")
"""A URL in free text: it ends before a space, a quote or bracket, and any punctuation that ends it."""
_HIDDEN: Final = "***"


def redacted_url(url: str) -> str:
    """`url` as it may be shown: its user info, every query value and any fragment as ``***``.

    A URL's password, an ``api_key`` or a signed query are credentials; which query names hold
    them cannot be known, so every value is hidden and only the names are kept.
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # a malformed IPv6 host: nothing in it is safe to show but the scheme
        scheme, separator, _rest = url.partition("://")
        return f"{scheme}{separator}{_HIDDEN}"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{_HIDDEN}@{netloc.rpartition('@')[2]}"
    query = "&".join(
        f"{name}={_HIDDEN}" if equals else name
        for name, equals, _value in (field.partition("=") for field in parts.query.split("&"))
    )
    fragment = _HIDDEN if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query if parts.query else "", fragment))


def redact_urls(text: str) -> str:
    """`text` with every URL in it shown as `redacted_url` shows it (log lines, error messages)."""
    if "://" not in text:
        return text
    return _URL.sub(lambda found: redacted_url(found.group()), text)


def sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception nested task groups wrapped, or None when there are several."""
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup):
        if len(found.exceptions) != 1:
            return None
        found = found.exceptions[0]
    return found
