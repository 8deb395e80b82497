"""`connect` to a server that is not there: one `ServerUnreachable` that names the server (never its
credentials or arguments) and says why; errors from inside the block stay as they are."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.server.mcpserver import MCPServer

from aegis_nb import ServerUnreachable, connect
from aegis_nb.mock import travel_app
from tests.servers.launch import ROOT, aegis_nb, free_port

pytestmark = pytest.mark.anyio

SECRET = "hunter2-aegis"


async def unreachable(target: Any) -> ServerUnreachable:
    with pytest.raises(ServerUnreachable) as caught:
        async with connect(target):
            pytest.fail("connected to a server that is not there")
    return caught.value


def why(error: ServerUnreachable) -> str:
    """The SDK's own error, as the message ends with it (its wording differs by backend)."""
    cause = error.__cause__
    assert cause is not None
    while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
        cause = cause.exceptions[0]
    return f"{type(cause).__name__}: {cause}"


async def test_a_url_nobody_serves_is_named_without_its_credentials_or_query() -> None:
    port = free_port()
    error = await unreachable(f"http://agent:{SECRET}@127.0.0.1:{port}/mcp?token={SECRET}")

    assert isinstance(error, ConnectionError)
    assert why(error).startswith("ConnectError: ")
    assert str(error) == f"cannot connect to the MCP server at http://127.0.0.1:{port}/mcp: {why(error)}"


async def test_a_stdio_command_that_does_not_exist_is_named_without_its_arguments() -> None:
    params = StdioServerParameters(command="/nonexistent/aegis-server", args=["--token", SECRET])
    error = await unreachable(params)

    assert str(error) == (
        "cannot connect to the MCP server started by '/nonexistent/aegis-server' over stdio: "
        "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/aegis-server'"
    )


async def test_a_stdio_server_that_exits_at_once() -> None:
    params = StdioServerParameters(command=sys.executable, args=["-c", "raise SystemExit(3)"], cwd=str(ROOT))
    error = await unreachable(params)

    assert str(error) == (
        f"cannot connect to the MCP server started by {sys.executable!r} over stdio: "
        "MCPError: Connection closed"
    )


async def test_an_in_process_server_whose_start_up_fails() -> None:
    @asynccontextmanager
    async def lifespan(server: Any) -> AsyncIterator[dict[str, Any]]:
        raise RuntimeError("the database is not there")
        yield {}  # type: ignore[unreachable]  # never runs: it makes lifespan the generator it must be

    error = await unreachable(MCPServer("broken", lifespan=lifespan))

    assert str(error) == (
        "cannot connect to the MCP server 'broken' (in process): RuntimeError: the database is not there"
    )


async def test_an_error_raised_in_the_block_comes_out_as_itself() -> None:
    with pytest.raises(KeyError, match="raised in the block"):
        async with connect(MCPServer("fine")):
            raise KeyError("raised in the block")


def unreachable_agent() -> Any:
    """A travel agent whose agency (connected on start-up) is at a URL nobody serves."""
    return travel_app(f"http://127.0.0.1:{free_port()}/mcp")


def test_serving_an_app_whose_start_up_cannot_connect_is_one_line_and_exit_1() -> None:
    done = aegis_nb("serve", "tests.test_connect_errors:unreachable_agent")

    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("aegis-nb serve: cannot connect to the MCP server at http://127.0.0.1:")
    assert line.split("/mcp: ", 1)[1].startswith("ConnectError: ")
