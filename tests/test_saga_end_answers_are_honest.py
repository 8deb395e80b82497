"""``saga_commit`` and ``saga_rollback`` answer ``is_error`` whenever the saga did not end as asked.

A commit that lost to a rollback or to the TTL, a rollback that lost to a commit, and a rollback that
ended stuck (something left standing) are errors, their text saying how the saga did end and their
structure its status; the end that was asked for is not. An agent that reads only ``is_error`` (most
frameworks do) is told the truth. Each answer is asserted whole, through a real MCP client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent
from pydantic_core import to_json

from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.mock import TravelAgency
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.app import AegisMCP
from aegis_nb.testing import EventCapture
from tests.saga_handles_support import FakeClock
from tests.test_gateway_policy_errors import SHIPPED

pytestmark = pytest.mark.anyio


class Desk:
    """An `AegisMCP` booking desk: a compensable booking whose undo works, and one whose undo fails."""

    def __init__(self) -> None:
        self.ledger: dict[str, str] = {}
        self.events = EventCapture()
        engine = WorkflowEngine(compensation_retry=RetryPolicy.never(), sinks=[self.events])
        app = self.app = AegisMCP("desk", engine=engine)

        async def cancel(arguments: Mapping[str, Any], result: Mapping[str, Any] | None, key: str) -> None:
            del self.ledger[key]

        async def cannot_cancel(
            arguments: Mapping[str, Any], result: Mapping[str, Any] | None, key: str
        ) -> None:
            raise RuntimeError("the desk is closed")

        @app.tool(compensate=cancel)
        async def book(what: str, idempotency_key: str = "") -> dict[str, Any]:
            """Book `what`."""
            self.ledger[idempotency_key] = what
            return {"booked": what}

        @app.tool(compensate=cannot_cancel)
        async def book_for_good(what: str, idempotency_key: str = "") -> dict[str, Any]:
            """Book `what`; its undo always fails."""
            self.ledger[idempotency_key] = what
            return {"booked": what}


def whole(result: CallToolResult) -> tuple[bool, str, dict[str, Any] | None, dict[str, Any] | None]:
    """The answer as one value: is_error, text, structure, and _meta without the server's stamp."""
    text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
    meta = {k: v for k, v in (result.meta or {}).items() if k != "io.modelcontextprotocol/serverInfo"}
    return result.is_error, text, result.structured_content, meta or None


def ended(
    run_id: str, status: str, steps: list[dict[str, Any]], reason: str | None, summary: str | None
) -> dict[str, Any]:
    return {
        "status": status,
        "run_id": run_id,
        "name": "agent_saga",
        "steps": steps,
        "ttl_seconds": 600.0,
        "idle_seconds_left": None,
        "deadline_seconds_left": None,
        "reason": reason,
        "summary": summary,
    }


async def begin(client: Client) -> tuple[str, str]:
    ticket = (await client.call_tool("saga_begin", {})).structured_content
    assert ticket is not None
    return ticket["saga"], ticket["run_id"]


async def test_a_commit_that_lost_to_a_rollback_is_an_error_and_says_how_the_saga_ended() -> None:
    desk = Desk()
    async with Client(desk.app) as client:
        saga, run_id = await begin(client)
        await client.call_tool("book", {"what": "flight", "saga": saga})
        rolled_back = await client.call_tool("saga_rollback", {"saga": saga, "reason": "too dear"})
        commit = await client.call_tool("saga_commit", {"saga": saga})
    status = ended(
        run_id,
        "rolled_back",
        [{"index": 0, "name": "book", "state": "undone"}],
        "too dear",
        "too dear — rolled back: book",
    )
    assert whole(rolled_back) == (False, to_json(status).decode(), status, None)
    assert whole(commit) == (
        True,
        "the saga was not committed: it ended rolled_back (too dear): too dear — rolled back: book",
        status,
        None,
    )
    assert desk.ledger == {}


async def test_a_rollback_that_lost_to_a_commit_is_an_error_and_the_commit_stands() -> None:
    desk = Desk()
    async with Client(desk.app) as client:
        saga, run_id = await begin(client)
        await client.call_tool("book", {"what": "flight", "saga": saga})
        committed = await client.call_tool("saga_commit", {"saga": saga})
        again = await client.call_tool("saga_commit", {"saga": saga})
        rollback = await client.call_tool("saga_rollback", {"saga": saga, "reason": "too late"})
    status = ended(run_id, "committed", [{"index": 0, "name": "book", "state": "live"}], None, None)
    assert (committed.is_error, committed.structured_content, again.is_error) == (False, status, False)
    assert whole(rollback) == (True, "the saga was not rolled back: it ended committed", status, None)
    assert desk.ledger == {f"{run_id}/0": "flight"}


async def test_a_rollback_that_ended_stuck_is_an_error_naming_what_stands() -> None:
    desk = Desk()
    async with Client(desk.app) as client:
        saga, run_id = await begin(client)
        await client.call_tool("book", {"what": "hotel", "saga": saga})
        await client.call_tool("book_for_good", {"what": "flight", "saga": saga})
        rollback = await client.call_tool("saga_rollback", {"saga": saga, "reason": "changed plans"})
    assert rollback.structured_content is not None
    summary = rollback.structured_content["summary"]
    assert "book_for_good" in summary
    assert whole(rollback) == (
        True,
        f"the saga was not rolled back: it ended stuck (changed plans): {summary}",
        ended(
            run_id,
            "stuck",
            [
                {"index": 0, "name": "book", "state": "undone"},
                {
                    "index": 1,
                    "name": "book_for_good",
                    "state": "stuck",
                    "detail": "RuntimeError: the desk is closed",
                },
            ],
            "changed plans",
            summary,
        ),
        None,
    )
    assert desk.ledger == {f"{run_id}/1": "flight"}


async def test_a_commit_that_lost_to_the_ttl_is_an_error_through_the_gateway_too() -> None:
    agency = TravelAgency()
    clock = FakeClock()
    engine = WorkflowEngine(compensation_retry=RetryPolicy.never())
    gateway = Gateway(
        parse_policy(SHIPPED.read_text(), "policy.toml"),
        upstreams={"agency": agency.server},
        engine=engine,
        clock=clock,
        saga_ttl=30.0,
    )
    async with gateway, Client(gateway) as client:
        saga, run_id = await begin(client)
        await client.call_tool("book_flight", {"destination": "Paris", "saga": saga})
        clock.now += 30
        await gateway.handles.expire()
        commit = await client.call_tool("saga_commit", {"saga": saga})
    assert commit.structured_content is not None
    summary = commit.structured_content["summary"]
    assert whole(commit) == (
        True,
        f"the saga was not committed: it ended rolled_back (idle past its TTL): {summary}",
        {
            **ended(
                run_id,
                "rolled_back",
                [{"index": 0, "name": "book_flight", "state": "undone"}],
                "idle past its TTL",
                summary,
            ),
            "ttl_seconds": 30.0,
        },
        None,
    )
    assert summary == "idle past its TTL — rolled back: book_flight"
    assert agency.state().to_json()["flights"] == []
