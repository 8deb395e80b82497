"""The OpenAI Agents SDK's MCP client (`MCPServerStdio`, `MCPServerStreamableHttp`) makes an agent's
calls straight through ``call_tool``, no model: through the gateway in front of the mock agency (a
stdio upstream), served over stdio and streamable HTTP, a declined card and ``saga_rollback`` leave
the ledger empty, and a charge retried with another card inside the saga commits exactly that trip."""

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
    committed_trip,
    gateway_command,
    ledger_of,
    moves,
    policy_file,
    seen_from_result,
    status_steps,
    trip_in,
)
from tests.servers.launch import http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: the Agents SDK's MCP servers run on asyncio (its locks and tasks are asyncio's)."""
    return "asyncio"


@asynccontextmanager
async def served_gateway(transport: str, policy: Path) -> AsyncIterator[MCPServer]:
    """The SDK's client of the gateway served by ``aegis-nb gateway`` in a process of its own."""
    server: MCPServer
    if transport == "stdio":
        command, args = gateway_command(policy)
        server = MCPServerStdio(
            {"command": command, "args": args}, client_session_timeout_seconds=INIT_TIMEOUT
        )
        async with server:
            yield server
        return
    async with http_server("gateway", str(policy)) as served:
        server = MCPServerStreamableHttp({"url": served.url}, client_session_timeout_seconds=INIT_TIMEOUT)
        async with server:
            yield server


def caller(server: MCPServer) -> Any:
    async def call(tool: str, arguments: Mapping[str, Any]) -> Seen:
        return seen_from_result(tool, await server.call_tool(tool, dict(arguments)))

    return call


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_declined_card_and_saga_rollback_leave_the_ledger_empty(
    transport: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    async with served_gateway(transport, policy_file(tmp_path, ledger)) as server:
        listed = sorted(tool.name for tool in await server.list_tools())
        seen, answer = await DECLINED_AGENT.drive(caller(server))
    assert {"saga_begin", "saga_status", "saga_commit", "saga_rollback", "book_flight"} <= set(listed)
    assert moves(seen) == DECLINED_MOVES
    assert status_steps(seen, "saga_rollback") == DECLINED_STEPS
    assert answer.text == DECLINED_ANSWER
    assert ledger_of(ledger) == EMPTY_AFTER_TWO_CANCELLATIONS


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_declined_charge_retried_inside_the_saga_commits(transport: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    async with served_gateway(transport, policy_file(tmp_path, ledger)) as server:
        seen, answer = await RETRYING_AGENT.drive(caller(server))
    assert moves(seen) == RETRIED_MOVES
    assert status_steps(seen, "saga_commit") == RETRIED_STEPS
    assert answer.text == "Your trip to Rome is booked: flight FL-0001, hotel HT-0001, charge CH-0001."
    assert trip_in(ledger_of(ledger)) == committed_trip("FL-0001", "HT-0001", "CH-0001")
