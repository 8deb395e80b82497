"""A pydantic-ai `Agent`, its model scripted (`FunctionModel`, no network), books a trip through the
gateway in front of the mock agency (a stdio upstream) and through an `AegisMCP` app whose tools are
compensable, each served over stdio and over streamable HTTP: when the card is declined the model
calls ``saga_rollback``, the ledger ends empty and the model's answer quotes the rollback; when it
retries the charge with another card inside the saga it commits, with exactly that trip booked; and
a saga the model abandons is rolled back at its TTL (waited for on the engine's event, not a sleep).
Failures reach the model as failed tool returns (``tool_error_behavior='failed'``) or, by default,
as retry requests: the scripted model reads both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ToolReturnPart

from aegis_nb.gateway import Gateway, load_policy
from aegis_nb.mock import DECLINED_TEST_CARD, Ledger, TravelAgency
from aegis_nb.notebook.trip_agent import Seen, TripAgent, seen_in
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent, SagaRolledBackEvent
from aegis_nb.server.app import AegisMCP
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
    policy_file,
    serve_arguments,
    status_steps,
    stdio_command,
    trip_in,
)
from tests.servers.compensable_agency import build
from tests.servers.launch import http_server
from tests.test_gateway_policy_errors import SHIPPED

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """asyncio only: pydantic-ai runs its agent in `asyncio.create_task` (no trio)."""
    return "asyncio"


@asynccontextmanager
async def served(transport: str, arguments: list[str]) -> AsyncIterator[MCPToolset[Any]]:
    """A toolset on ``aegis-nb ARGUMENTS`` served in a process of its own."""
    if transport == "stdio":
        command, args = stdio_command(arguments)
        stdio = StdioTransport(command, args, env=child_environment(), cwd=str(ROOT))
        yield MCPToolset(stdio, tool_error_behavior="failed", init_timeout=INIT_TIMEOUT)
        return
    async with http_server(*arguments) as server:
        yield MCPToolset(server.url, tool_error_behavior="failed", init_timeout=INIT_TIMEOUT)


async def run_agent(agent: TripAgent, toolset: MCPToolset[Any]) -> tuple[tuple[Seen, ...], str]:
    """Run the agent to its answer; what it saw (from its own transcript) and what it answered."""
    result = await Agent(agent.function_model(), toolsets=[toolset]).run("Book me a trip.")
    return tuple(seen_in(result.all_messages())), result.output


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("served_by", list(Served), ids=lambda s: s.value)
async def test_a_declined_card_and_the_models_rollback_leave_the_ledger_empty(
    served_by: Served, transport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.db"
    async with served(transport, serve_arguments(served_by, tmp_path, ledger, monkeypatch)) as toolset:
        seen, answer = await run_agent(DECLINED_AGENT, toolset)
    assert moves(seen) == DECLINED_MOVES
    assert status_steps(seen, "saga_rollback") == DECLINED_STEPS
    assert answer == DECLINED_ANSWER
    assert ledger_of(ledger) == EMPTY_AFTER_TWO_CANCELLATIONS


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("served_by", list(Served), ids=lambda s: s.value)
async def test_the_model_retries_a_declined_charge_inside_the_saga_and_commits(
    served_by: Served, transport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.db"
    async with served(transport, serve_arguments(served_by, tmp_path, ledger, monkeypatch)) as toolset:
        seen, answer = await run_agent(RETRYING_AGENT, toolset)
    assert moves(seen) == RETRIED_MOVES
    assert status_steps(seen, "saga_commit") == RETRIED_STEPS
    assert answer == "Your trip to Rome is booked: flight FL-0001, hotel HT-0001, charge CH-0001."
    assert trip_in(ledger_of(ledger)) == committed_trip("FL-0001", "HT-0001", "CH-0001")


@pytest.mark.slow
@pytest.mark.parametrize("served_by", list(Served), ids=lambda s: s.value)
async def test_a_saga_the_model_abandons_is_rolled_back_at_its_ttl(served_by: Served, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    rolled_back = anyio.Event()

    def sink(event: SagaEvent) -> None:
        if isinstance(event, SagaRolledBackEvent):
            rolled_back.set()

    # In process, so the test can wait on the engine's own event (the gateway's agency is still a
    # stdio child); the toolset is held open around the run, so the server's sagas outlive the run.
    server: AegisMCP
    if served_by is Served.GATEWAY:
        server = Gateway(load_policy(policy_file(tmp_path, ledger)), engine=WorkflowEngine(sinks=[sink]))
    else:
        server = build(Ledger(ledger))
        server.workflow_engine.subscribe(sink)
    agent = TripAgent(cards=(DECLINED_TEST_CARD,), abandon=True, ttl_seconds=0.2)
    toolset = MCPToolset(server, tool_error_behavior="failed", init_timeout=INIT_TIMEOUT)
    async with toolset:
        seen, answer = await run_agent(agent, toolset)
        standing = ledger_of(ledger)
        with anyio.fail_after(30):
            await rolled_back.wait()
        status = await toolset.direct_call_tool("saga_status", {"saga": seen[0].content["saga"]})
    assert moves(seen) == DECLINED_MOVES[:-1]  # no saga_rollback: the model gave up and answered
    assert answer == "I stopped: charge_card failed (Card Declined!)."
    assert (len(standing["flights"]), len(standing["hotels"])) == (1, 1)  # standing until the TTL
    assert (status["status"], status["reason"]) == ("rolled_back", "idle past its TTL")
    assert status["steps"] == [
        {"index": 0, "name": "book_flight", "state": "undone"},
        {"index": 1, "name": "reserve_hotel", "state": "undone"},
        {"index": 2, "name": "charge_card", "state": "failed", "detail": "ToolError: Card Declined!"},
    ]
    assert ledger_of(ledger) == EMPTY_AFTER_TWO_CANCELLATIONS


async def test_by_default_a_declined_charge_is_a_retry_request_and_the_model_still_rolls_back() -> None:
    # tool_error_behavior left at 'retry': the failure reaches the model as a retried tool return.
    agency = TravelAgency()
    gateway = Gateway(load_policy(SHIPPED), upstreams={"agency": agency.server})
    result = await Agent(DECLINED_AGENT.function_model(), toolsets=[MCPToolset(gateway)]).run("A trip.")
    failed = [
        part.outcome
        for message in result.all_messages()
        for part in getattr(message, "parts", ())
        if isinstance(part, ToolReturnPart) and part.tool_name == "charge_card"
    ]
    assert (failed, moves(tuple(seen_in(result.all_messages())))) == (["retried"], DECLINED_MOVES)
    assert result.output == DECLINED_ANSWER
    assert agency.state().to_json() == EMPTY_AFTER_TWO_CANCELLATIONS
