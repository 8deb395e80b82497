"""AegisMCP and the mock agency over real transports: stdio subprocesses and streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from aegis_nb.kernel.errors import SagaRolledBack
from aegis_nb.mock.travel import travel_app, travel_saga, trip_context
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    SagaEvent,
    SagaRolledBackEvent,
    StepStarted,
)
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.session import ToolSession, connect
from tests.servers.launch import ROOT, http_server

pytestmark = pytest.mark.anyio

SERVERS = Path(__file__).parent / "servers"
CARD = "4242424242424242"
EMPTY = {"flights": [], "hotels": [], "charges": [], "balance_cents": 0}

DOC_REPORT_TEXT = "Card Declined! — rolled back: BookFlightStep"


def stdio(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=list(args), cwd=str(ROOT))


def doc_report(structured: dict[str, Any]) -> dict[str, Any]:
    """The structured content with the run id and the measured durations replaced."""
    assert structured["duration_ms"] >= 0
    steps = [{**step, "duration_ms": 0} for step in structured["steps"]]
    report = {**structured["report"], "run_id": "RUN"}
    return {**structured, "run_id": "RUN", "duration_ms": 0, "steps": steps, "report": report}


EXPECTED_DOC_REPORT = {
    "status": "rolled_back",
    "run_id": "RUN",
    "summary": DOC_REPORT_TEXT,
    "metadata": {},
    "steps": [{"index": 0, "name": "BookFlightStep", "duration_ms": 0}],
    "duration_ms": 0,
    "report": {
        "run_id": "RUN",
        "saga": "book_vacation",
        "status": "rolled_back",
        "steps": ["BookFlightStep", "ChargeCardStep"],
        "succeeded": [{"index": 0, "name": "BookFlightStep"}],
        "failed_step": {"index": 1, "name": "ChargeCardStep"},
        "failure_kind": "error",
        "cause": {"type": "ValueError", "message": "Card Declined!"},
        "compensated": [{"index": 0, "name": "BookFlightStep"}],
        "compensation_failures": [],
        "left_standing": [],
    },
}


DOC_PROGRESS = [
    "book_vacation started: BookFlightStep -> ChargeCardStep",
    "step 1 of 2: executing BookFlightStep",
    "step 1 of 2: BookFlightStep done",
    "step 2 of 2: executing ChargeCardStep",
    "step 2 of 2: ChargeCardStep failed: Card Declined!",
    "compensating BookFlightStep",
    "BookFlightStep undone",
    f"book_vacation rolled back: {DOC_REPORT_TEXT}",
]


class ProgressLog:
    """A progress callback that keeps what arrives and says when `expected` notifications are in.

    The client runs each callback in a task of its own, so they may finish after the call returns,
    and (on trio) in any order: the progress value gives the order.
    """

    def __init__(self, expected: int) -> None:
        self.received: list[tuple[float, str | None]] = []
        self.expected = expected
        self.complete = anyio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.received.append((progress, message))
        if len(self.received) == self.expected:
            self.complete.set()

    async def messages(self) -> list[str | None]:
        with anyio.fail_after(10):
            await self.complete.wait()
        return [message for _, message in sorted(self.received)]


async def test_the_documentation_example_served_by_app_run_over_stdio() -> None:
    on_progress = ProgressLog(len(DOC_PROGRESS))

    with tempfile.TemporaryFile("w+") as errlog:
        params = stdio(str(SERVERS / "doc_travel_agent.py"))
        async with Client(stdio_client(params, errlog=errlog)) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            result = await client.call_tool("book_vacation", {}, progress_callback=on_progress)
            messages = await on_progress.messages()
        errlog.seek(0)
        output = errlog.read().splitlines()
    # The steps' print() lines reach the server's output (stderr: stdout carries the protocol), in order.
    assert output == [
        "Booking flight...",
        "Attempting to charge card for FLIGHT_999...",
        "Canceling flight FLIGHT_999...",
    ]
    assert tools == ["book_vacation"]
    assert result.is_error is True
    assert result.content == [TextContent(type="text", text=DOC_REPORT_TEXT)]
    assert result.structured_content is not None
    assert doc_report(result.structured_content) == EXPECTED_DOC_REPORT
    assert messages == DOC_PROGRESS
    assert [value for value, _ in sorted(on_progress.received)] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


async def test_the_documentation_example_served_over_http_by_aegis_nb_serve() -> None:
    on_progress = ProgressLog(len(DOC_PROGRESS))

    async with (
        http_server("serve", "tests.servers.doc_travel_agent:app") as server,
        Client(server.url) as client,
    ):
        tools = [tool.name for tool in (await client.list_tools()).tools]
        result = await client.call_tool("book_vacation", {}, progress_callback=on_progress)
        assert await on_progress.messages() == DOC_PROGRESS
    assert tools == ["book_vacation"]
    assert result.is_error is True
    assert result.content == [TextContent(type="text", text=DOC_REPORT_TEXT)]
    assert result.structured_content is not None
    assert doc_report(result.structured_content) == EXPECTED_DOC_REPORT


class LineReader:
    """The server's stderr through a pipe, read line by line in a worker thread (no polling)."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.errlog = os.fdopen(write_fd, "w")
        self._reader = os.fdopen(read_fd)

    async def wait_for(self, line: str) -> None:
        with anyio.fail_after(30):
            while (got := await anyio.to_thread.run_sync(self._reader.readline)) != f"{line}\n":
                assert got, f"the server exited before printing {line!r}"

    def close(self) -> None:
        self.errlog.close()
        self._reader.close()


@pytest.mark.parametrize("stop", ["cancel", "timeout"])
async def test_a_client_that_stops_waiting_over_stdio_still_gets_the_world_rolled_back(stop: str) -> None:
    output = LineReader()
    try:
        params = stdio(str(SERVERS / "hanging_agent.py"))
        async with Client(stdio_client(params, errlog=output.errlog)) as client:
            if stop == "cancel":
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(client.call_tool, "book_vacation", {})
                    await output.wait_for("Reserving hotel...")
                    tasks.cancel_scope.cancel()
            else:
                with pytest.raises(MCPError, match=r"^Request 'tools/call' timed out$"):
                    await client.call_tool("book_vacation", {}, read_timeout_seconds=0.5)
            # No response comes; the server still undoes the flight.
            await output.wait_for("Canceling flight FLIGHT_999...")
    finally:
        output.close()


@pytest.mark.parametrize("stop", ["cancel", "timeout"])
async def test_a_client_that_stops_waiting_over_http_still_gets_the_world_rolled_back(stop: str) -> None:
    async with (
        http_server("serve", "tests.servers.hanging_agent:app", capture_stdout=True) as server,
        Client(server.url) as client,
    ):
        assert server.stdout is not None
        if stop == "cancel":
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(client.call_tool, "book_vacation", {})
                await server.stdout.wait_for("Reserving hotel...")
                tasks.cancel_scope.cancel()
        else:
            with pytest.raises(MCPError, match=r"^Request 'tools/call' timed out$"):
                await client.call_tool("book_vacation", {}, read_timeout_seconds=0.5)
        await server.stdout.wait_for("Canceling flight FLIGHT_999...")


@asynccontextmanager
async def agency_session(transport: str) -> AsyncIterator[ToolSession]:
    """A session on `aegis-nb mock` in a subprocess, over `transport`."""
    if transport == "stdio":
        async with connect(stdio("-m", "aegis_nb.cli", "mock")) as session:
            yield session
    else:
        async with http_server("mock") as server, connect(server.url) as session:
            yield session


def live(ledger: dict[str, Any]) -> dict[str, Any]:
    return {key: ledger[key] for key in EMPTY}


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_travel_saga_over_the_mock_agency_in_another_process(transport: str) -> None:
    engine = WorkflowEngine(compensation_retry=RetryPolicy(attempts=3, initial_delay=0.0))
    async with agency_session(transport) as agency:
        # A declined card leaves the ledger empty.
        await agency.call_tool("set_faults", {"plan": {"charge_card": {"declined": True}}})
        with pytest.raises(SagaRolledBack) as declined:
            await engine.execute_saga(travel_saga(agency, "Lisbon", 3), trip_context(CARD))
        assert declined.value.report.summary() == ("Card Declined! — rolled back: ReserveHotel, BookFlight")
        assert live(await agency.call_tool("list_bookings")) == EMPTY

        # A hotel slower than the deadline leaves it empty.
        await agency.call_tool("set_faults", {"plan": {"reserve_hotel": {"latency": 30}}})
        with pytest.raises(SagaRolledBack) as slow:
            await engine.execute_saga(travel_saga(agency, "Lisbon", 3), trip_context(CARD).with_timeout(1.0))
        assert slow.value.report.failure_kind is not None
        assert slow.value.report.failure_kind.value == "timeout"
        assert live(await agency.call_tool("list_bookings")) == EMPTY

        # A compensation that fails twice, then succeeds, leaves it empty; the events show the retries.
        await agency.call_tool(
            "set_faults", {"plan": {"charge_card": {"declined": True}, "cancel_hotel": {"fail_next": 2}}}
        )
        events: list[SagaEvent] = []
        with pytest.raises(SagaRolledBack):
            await engine.execute_saga(
                travel_saga(agency, "Lisbon", 3), trip_context(CARD), sinks=[events.append]
            )
        attempts = [
            (type(e).__name__, e.attempt)
            for e in events
            if isinstance(e, CompensationStarted | CompensationFailed | CompensationSucceeded)
            and e.step == "ReserveHotel"
        ]
        assert attempts == [
            ("CompensationStarted", 1),
            ("CompensationFailed", 1),
            ("CompensationStarted", 2),
            ("CompensationFailed", 2),
            ("CompensationStarted", 3),
            ("CompensationSucceeded", 3),
        ]
        assert live(await agency.call_tool("list_bookings")) == EMPTY

        # Success leaves a flight, a hotel and a charge.
        await agency.call_tool("set_faults", {"plan": {}})
        final = await engine.execute_saga(travel_saga(agency, "Lisbon", 3), trip_context(CARD))
        ledger = await agency.call_tool("list_bookings")
    assert live(ledger) == {
        "flights": [final.metadata["flight"]],
        "hotels": [final.metadata["hotel"]],
        "charges": [final.metadata["charge"]],
        "balance_cents": final.metadata["charge"]["amount_cents"],
    }
    # Two undone bookings per failed run, except the slow hotel that was never made.
    assert (ledger["cancellations"], ledger["refunds"]) == (5, 0)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_client_cancel_mid_saga_leaves_the_remote_ledger_empty(transport: str) -> None:
    hotel_started, rolled_back = anyio.Event(), anyio.Event()

    def watch(event: SagaEvent) -> None:
        if isinstance(event, StepStarted) and event.step == "ReserveHotel":
            hotel_started.set()
        if isinstance(event, SagaRolledBackEvent):
            rolled_back.set()

    async with agency_session(transport) as agency:
        await agency.call_tool("set_faults", {"plan": {"reserve_hotel": {"latency": 30}}})
        app = travel_app(session=agency)
        app.workflow_engine.subscribe(watch)
        async with Client(app) as client, anyio.create_task_group() as tasks:
            tasks.start_soon(
                client.call_tool, "book_trip", {"destination": "Lisbon", "nights": 3, "card_number": CARD}
            )
            await hotel_started.wait()
            tasks.cancel_scope.cancel()
        await rolled_back.wait()
        ledger = await agency.call_tool("list_bookings")
    assert live(ledger) == EMPTY
    assert ledger["cancellations"] == 1
