"""`fastmcp.Client` makes an agent's calls straight through ``call_tool``, no model: through the
gateway in front of the mock agency (a stdio upstream), served over stdio and streamable HTTP, a
declined card and ``saga_rollback`` leave the ledger empty, and a charge retried with another card
inside the saga commits exactly that trip; fastmcp's own error (``ToolError`` with the upstream's
text) is what a failed call inside a saga raises by default."""

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
    committed_trip,
    gateway_command,
    ledger_of,
    moves,
    policy_file,
    status_steps,
    trip_in,
)
from tests.servers.launch import http_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: fastmcp's client runs its session in `asyncio.create_task` (no trio)."""
    return "asyncio"


@asynccontextmanager
async def served_gateway(transport: str, policy: Path) -> AsyncIterator[Client[Any]]:
    """A fastmcp client of the gateway served by ``aegis-nb gateway`` in a process of its own."""
    if transport == "stdio":
        command, args = gateway_command(policy)
        async with Client(StdioTransport(command, args), init_timeout=INIT_TIMEOUT) as client:
            yield client
        return
    async with (
        http_server("gateway", str(policy)) as served,
        Client(served.url, init_timeout=INIT_TIMEOUT) as client,
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
async def test_a_declined_card_and_saga_rollback_leave_the_ledger_empty(
    transport: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.db"
    async with served_gateway(transport, policy_file(tmp_path, ledger)) as client:
        seen, answer = await DECLINED_AGENT.drive(caller(client))
    assert moves(seen) == DECLINED_MOVES
    assert status_steps(seen, "saga_rollback") == DECLINED_STEPS
    assert answer.text == DECLINED_ANSWER
    assert ledger_of(ledger) == EMPTY_AFTER_TWO_CANCELLATIONS


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_declined_charge_retried_inside_the_saga_commits(transport: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    async with served_gateway(transport, policy_file(tmp_path, ledger)) as client:
        seen, answer = await RETRYING_AGENT.drive(caller(client))
    assert moves(seen) == RETRIED_MOVES
    assert status_steps(seen, "saga_commit") == RETRIED_STEPS
    assert answer.text == "Your trip to Rome is booked: flight FL-0001, hotel HT-0001, charge CH-0001."
    assert trip_in(ledger_of(ledger)) == committed_trip("FL-0001", "HT-0001", "CH-0001")


async def test_a_declined_charge_raises_fastmcps_tool_error_and_the_saga_stays_open(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    async with served_gateway("stdio", policy_file(tmp_path, ledger)) as client:
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
