"""A dead upstream is reconnected: a stdio upstream that was SIGKILLed is started again, a URL upstream
that restarts is used again. The call that found it dead may have acted (in doubt); calls made while
it is down are refused, not sent (they did nothing); once it is back, calls work, and the saga's
rollback undoes what the ledger holds."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.gateway.upstream import Target
from aegis_nb.mock import Ledger
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.results import REFUSED_META_KEY
from tests.gateway_process_support import mock_agency_over_http
from tests.servers.launch import ROOT, free_port

pytestmark = pytest.mark.anyio

POLICY = """\
[upstreams.agency]
command = "aegis-nb"
args = ["mock"]

[tools.book_flight]
kind = "compensable"
undo = "cancel_flight"
undo_args = { booking_id = "/result/booking_id" }

[tools.reserve_hotel]
kind = "compensable"
undo = "cancel_hotel"
undo_args = { booking_id = "/result/booking_id" }
"""

# The mock agency on a ledger file, started by a stub that first writes its pid (exec keeps it).
LAUNCH = (
    "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
    "os.execv(sys.executable, [sys.executable, '-m', 'aegis_nb.cli', 'mock', '--ledger', sys.argv[2]])"
)

RECONNECT_BOUND = 60.0
"""Seconds a test waits for the gateway to reconnect: a restarted Python process on a busy machine."""


def gateway(target: Target) -> Gateway:
    engine = WorkflowEngine(compensation_retry=RetryPolicy(attempts=2, initial_delay=0.0))
    return Gateway(parse_policy(POLICY, "policy.toml"), upstreams={"agency": target}, engine=engine)


def said(result: CallToolResult) -> tuple[bool, str, object]:
    """Whether it is an error, its text, and whether it says it was refused (did nothing)."""
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    return (result.is_error, text, (result.meta or {}).get(REFUSED_META_KEY))


def ledger(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = dict(Ledger(path).state().to_json())
    return {
        "flights": [flight["booking_id"] for flight in state["flights"]],
        "hotels": [hotel["booking_id"] for hotel in state["hotels"]],
        "cancellations": state["cancellations"],
    }


LOST = "upstream 'agency' stopped answering during 'reserve_hotel': MCPError: Connection closed"
DOWN = (
    "reserve_hotel was not called: upstream 'agency' is not connected (it stopped answering; the "
    "gateway is reconnecting it): try again later"
)

STEPS = [
    {"index": 0, "name": "book_flight", "state": "undone"},
    {
        "index": 1,
        "name": "reserve_hotel",
        "state": "orphaned",  # in doubt, and no answer to bind its undo from: said, not hidden
        "detail": "cancel_hotel was not called: booking_id (/result/booking_id) did not resolve from "
        "the call",
    },
    {"index": 2, "name": "reserve_hotel#2", "state": "undone"},
]
"""The rollback after the upstream came back: what it booked is undone; the call that found it dead
could not be undone (it may have acted, and never answered), so the saga ends stuck, naming it."""


@pytest.mark.slow
async def test_a_killed_stdio_upstream_is_started_again_and_serves_the_saga(tmp_path: Path) -> None:
    pidfile, books = tmp_path / "pid", tmp_path / "ledger.db"
    agency = StdioServerParameters(
        command=sys.executable, args=["-c", LAUNCH, str(pidfile), str(books)], cwd=ROOT
    )
    served = gateway(agency)
    async with Client(served) as client:
        saga = ((await client.call_tool("saga_begin", {})).structured_content or {})["saga"]
        booked = await client.call_tool("book_flight", {"destination": "Oslo", "saga": saga})
        first = pidfile.read_text()
        os.kill(int(first), signal.SIGKILL)
        lost = await client.call_tool("reserve_hotel", {"city": "Oslo", "nights": 1, "saga": saga})
        with anyio.fail_after(RECONNECT_BOUND):
            await served.upstreams.links["agency"].wait_connected()
        reserved = await client.call_tool("reserve_hotel", {"city": "Oslo", "nights": 1, "saga": saga})
        standing = ledger(books)
        rolled = await client.call_tool("saga_rollback", {"saga": saga, "reason": "changed plans"})
    assert (booked.is_error, said(lost), reserved.is_error) == (False, (True, LOST, None), False)
    assert pidfile.read_text() != first  # a new process: the same ledger file
    assert standing == {"flights": ["FL-0001"], "hotels": ["HT-0001"], "cancellations": 0}
    status = rolled.structured_content or {}
    assert (status["status"], status["steps"]) == ("stuck", STEPS)
    assert ledger(books) == {"flights": [], "hotels": [], "cancellations": 2}


@pytest.mark.slow
async def test_a_restarted_url_upstream_is_used_again_and_calls_while_down_are_refused(
    tmp_path: Path,
) -> None:
    port, books = free_port(), tmp_path / "ledger.db"
    async with AsyncExitStack() as first:
        url = await first.enter_async_context(mock_agency_over_http(port, books))
        served = gateway(url)
        async with Client(served) as client:
            saga = ((await client.call_tool("saga_begin", {})).structured_content or {})["saga"]
            booked = await client.call_tool("book_flight", {"destination": "Oslo", "saga": saga})
            await first.aclose()  # the agency stops; the gateway's session to it does not know yet
            lost = await client.call_tool("reserve_hotel", {"city": "Oslo", "nights": 1, "saga": saga})
            down = await client.call_tool("reserve_hotel", {"city": "Oslo", "nights": 1, "saga": saga})
            while_down = ledger(books)
            async with mock_agency_over_http(port, books):
                with anyio.fail_after(RECONNECT_BOUND):
                    await served.upstreams.links["agency"].wait_connected()
                reserved = await client.call_tool(
                    "reserve_hotel", {"city": "Oslo", "nights": 1, "saga": saga}
                )
                rolled = await client.call_tool("saga_rollback", {"saga": saga, "reason": "changed plans"})
    assert (booked.is_error, said(lost), said(down), reserved.is_error) == (
        False,
        (True, LOST, None),
        (True, DOWN, True),
        False,
    )
    assert while_down == {"flights": ["FL-0001"], "hotels": [], "cancellations": 0}
    status = rolled.structured_content or {}
    refused = {"index": 2, "name": "reserve_hotel#2", "state": "failed", "detail": f"ToolError: {DOWN}"}
    assert (status["status"], status["steps"]) == (
        "stuck",
        [*STEPS[:2], refused, {"index": 3, "name": "reserve_hotel#3", "state": "undone"}],
    )
    assert ledger(books) == {"flights": [], "hotels": [], "cancellations": 2}
