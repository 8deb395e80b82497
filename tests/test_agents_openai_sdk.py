"""The OpenAI Agents SDK's MCP client (`MCPServerStdio`, `MCPServerStreamableHttp`) makes an agent's
calls straight through ``call_tool``, no model, through the gateway in front of the mock agency (a
stdio upstream) and through an `AegisMCP` app whose tools are compensable, served over stdio and
streamable HTTP: a declined card and ``saga_rollback`` leave the ledger empty (each server, each
transport), and a charge retried with another card inside the saga commits exactly that trip (the
gateway over stdio, the app over HTTP)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp

from aegis_nb.notebook.trip_agent import Seen
from tests.agents_support import (
    DECLINED_AGENT,
    DECLINED_ANSWER,
    DECLINED_MOVES,
    DECLINED_STEPS,
    EMPTY_AFTER_TWO_CANCELLATIONS,
    INIT_TIMEOUT,
    RETRIED_MOVES,
    RETRIED_STEPS,
    RETRYING_AGENT,
    ROOT,
    Served,
    child_environment,
    committed_trip,
    ledger_of,
    moves,
    seen_from_result,
    serve_arguments,
    status_steps,
    stdio_command,
    trip_in,
)
from tests.servers.launch import http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: the Agents SDK's MCP servers run on asyncio (its locks and tasks are asyncio's)."""
    return "asyncio"


@asynccontextmanager
async def served(transport: str, arguments: list[str]) -> AsyncIterator[MCPServer]:
    """The SDK's client of ``aegis-nb ARGUMENTS`` served in a process of its own."""
    server: MCPServer
    if transport == "stdio":
        command, args = stdio_command(arguments)
        params = {"command": command, "args": args, "env": child_environment(), "cwd": str(ROOT)}
        server = MCPServerStdio(params, client_session_timeout_seconds=INIT_TIMEOUT)  # type: ignore[arg-type]
        async with server:
            yield server
        return
    async with http_server(*arguments) as http:
        server = MCPServerStreamableHttp({"url": http.url}, client_session_timeout_seconds=INIT_TIMEOUT)
        async with server:
            yield server


def caller(server: MCPServer) -> Any:
    async def call(tool: str, arguments: Mapping[str, Any]) -> Seen:
        return seen_from_result(tool, await server.call_tool(tool, dict(arguments)))

    return call


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("served_by", list(Served), ids=lambda s: s.value)
async def test_a_declined_card_and_saga_rollback_leave_the_ledger_empty(
    served_by: Served, transport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.db"
    async with served(transport, serve_arguments(served_by, tmp_path, ledger, monkeypatch)) as server:
        listed = sorted(tool.name for tool in await server.list_tools())
        seen, answer = await DECLINED_AGENT.drive(caller(server))
    assert {"saga_begin", "saga_status", "saga_commit", "saga_rollback", "book_flight"} <= set(listed)
    assert moves(seen) == DECLINED_MOVES
    assert status_steps(seen, "saga_rollback") == DECLINED_STEPS
    assert answer.text == DECLINED_ANSWER
    assert ledger_of(ledger) == EMPTY_AFTER_TWO_CANCELLATIONS


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_declined_charge_retried_inside_the_saga_commits(
    transport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.db"
    arguments = serve_arguments(
        Served.AEGISMCP if transport == "http" else Served.GATEWAY, tmp_path, ledger, monkeypatch
    )
    async with served(transport, arguments) as server:
        seen, answer = await RETRYING_AGENT.drive(caller(server))
    assert moves(seen) == RETRIED_MOVES
    assert status_steps(seen, "saga_commit") == RETRIED_STEPS
    assert answer.text == "Your trip to Rome is booked: flight FL-0001, hotel HT-0001, charge CH-0001."
    assert trip_in(ledger_of(ledger)) == committed_trip("FL-0001", "HT-0001", "CH-0001")
