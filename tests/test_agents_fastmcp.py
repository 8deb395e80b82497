"""`fastmcp.Client` makes an agent's calls straight through ``call_tool``, no model, through the
gateway in front of the mock agency (a stdio upstream) and through an `AegisMCP` app whose tools
are compensable, served over stdio and streamable HTTP: a declined card and ``saga_rollback`` leave
the ledger empty (each server, each transport), and a charge retried with another card inside the
saga commits exactly that trip (the app over stdio, the gateway over HTTP); fastmcp's own error
(``ToolError`` with the tool's text) is what a failed call inside a saga raises by default."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from fastmcp.exceptions import ToolError

from aegis_nb.mock import DECLINED_TEST_CARD
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
    serve_arguments,
    status_steps,
    stdio_command,
    trip_in,
)
from tests.servers.launch import http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: fastmcp's client runs its session in `asyncio.create_task` (no trio)."""
    return "asyncio"


@asynccontextmanager
async def served(transport: str, arguments: list[str]) -> AsyncIterator[Client[Any]]:
    """A fastmcp client of ``aegis-nb ARGUMENTS`` served in a process of its own."""
    if transport == "stdio":
        command, args = stdio_command(arguments)
        stdio = StdioTransport(command, args, env=child_environment(), cwd=str(ROOT))
        async with Client(stdio, init_timeout=INIT_TIMEOUT) as client:
            yield client
        return
    async with (
        http_server(*arguments) as http,
        Client(http.url, init_timeout=INIT_TIMEOUT) as client,
    ):
        yield client


def caller(client: Client[Any]) -> Any:
    async def call(tool: str, arguments: Mapping[str, Any]) -> Seen:
        result = await client.call_tool(tool, dict(arguments), raise_on_error=False)
        content: Any = result.structured_content
        if content is None:
            content = "\n".join(getattr(block, "text", "") for block in result.content)
        return Seen(tool, not result.is_error, content)

    return call


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("served_by", list(Served), ids=lambda s: s.value)
async def test_a_declined_card_and_saga_rollback_leave_the_ledger_empty(
    served_by: Served, transport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.db"
    async with served(transport, serve_arguments(served_by, tmp_path, ledger, monkeypatch)) as client:
        seen, answer = await DECLINED_AGENT.drive(caller(client))
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
        Served.GATEWAY if transport == "http" else Served.AEGISMCP, tmp_path, ledger, monkeypatch
    )
    async with served(transport, arguments) as client:
        seen, answer = await RETRYING_AGENT.drive(caller(client))
    assert moves(seen) == RETRIED_MOVES
    assert status_steps(seen, "saga_commit") == RETRIED_STEPS
    assert answer.text == "Your trip to Rome is booked: flight FL-0001, hotel HT-0001, charge CH-0001."
    assert trip_in(ledger_of(ledger)) == committed_trip("FL-0001", "HT-0001", "CH-0001")


async def test_a_declined_charge_raises_fastmcps_tool_error_and_the_saga_stays_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.db"
    async with served("stdio", serve_arguments(Served.AEGISMCP, tmp_path, ledger, monkeypatch)) as client:
        begun = await client.call_tool("saga_begin", {})
        saga = begun.data["saga"]
        await client.call_tool("book_flight", {"destination": "Oslo", "saga": saga})
        with pytest.raises(ToolError) as raised:
            await client.call_tool(
                "charge_card", {"amount_cents": 100, "card_number": DECLINED_TEST_CARD, "saga": saga}
            )
        status = await client.call_tool("saga_status", {"saga": saga})
        rolled = await client.call_tool("saga_rollback", {"saga": saga, "reason": "declined"})
    assert str(raised.value) == "Card Declined!"
    assert (status.data["status"], [s["state"] for s in status.data["steps"]]) == ("open", ["live", "failed"])
    assert [s["state"] for s in rolled.data["steps"]] == ["undone", "failed"]
    assert ledger_of(ledger)["flights"] == []
