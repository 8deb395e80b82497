"""`AegisMCP` workflows whose sagas run on Temporal: the same tool, result, report and progress as
in-process; a run that outlives the server which started it (SIGKILLed mid-saga), answered for by
a restarted server's ``workflow_status``; and a worker SIGKILLed mid-compensation, replaced by another
that finishes the rollback. Effects are checked on the mock agency's ledger, a SQLite file that
every process writes by idempotency key. Asyncio only (temporalio runs on asyncio alone).
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from tests.conftest import STRICT

if not STRICT:  # on a developer machine without the `temporal` extra, skip; under CI, fail
    pytest.importorskip("temporalio")

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, RequestParamsMeta
from temporalio.client import Client as TemporalClient

from aegis_nb import AegisContext, RetryPolicy
from aegis_nb.mock import Ledger
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.results import workflow_output_schema
from aegis_nb.server.temporal_runs import RUN_ID_META_KEY, STATUS_TOOL
from aegis_nb.temporal import TemporalSagaRunner, saga_worker
from tests.temporal_support import (
    GatedHotel,
    LedgerHotel,
    anyio_backend,
    calls,
    client,
    ledger_app,
    read_until,
    temporal_address,
    worker_process,
)

__all__ = ["anyio_backend", "client", "temporal_address"]  # fixtures, imported so pytest finds them here

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parent.parent


def fresh_ledger(tmp_path: Path) -> str:
    path = str(tmp_path / "ledger.db")
    Ledger(path).close()  # creates the schema before two processes race to
    return path


def meta(run_id: str) -> RequestParamsMeta:
    return cast(RequestParamsMeta, {RUN_ID_META_KEY: run_id})


def without_times(structured: dict[str, Any] | None) -> dict[str, Any]:
    """The structured result with its durations (which vary) taken out, the rest whole."""
    assert structured is not None
    result = {key: value for key, value in structured.items() if key != "duration_ms"}
    result["steps"] = [{k: v for k, v in step.items() if k != "duration_ms"} for step in result["steps"]]
    return result


def ledger_counts(path: str) -> tuple[int, int, int, int, int]:
    """Live flights, hotels and charges; cancellations and refunds."""
    with closing(Ledger(path)) as books:
        state = books.state()
    return len(state.flights), len(state.hotels), len(state.charges), state.cancellations, state.refunds


COMMITTED_STEPS = [
    {"index": 0, "name": "BookFlight"},
    {"index": 1, "name": "ReserveHotel"},
    {"index": 2, "name": "ChargeCard"},
]


def committed(run_id: str) -> dict[str, Any]:
    return {
        "status": "committed",
        "run_id": run_id,
        "metadata": {
            "traveller": "ada",
            "flight_id": "FL-0001",
            "hotel_id": "HT-0001",
            "charge_id": "CH-0001",
        },
        "steps": COMMITTED_STEPS,
    }


async def test_a_served_workflow_runs_on_temporal_with_the_same_tool_result_and_progress(
    client: TemporalClient, tmp_path: Path
) -> None:
    ledger = fresh_ledger(tmp_path)
    queue = f"served-{uuid.uuid4().hex}"
    on_temporal = ledger_app(TemporalSagaRunner(client, queue), ledger)
    in_process = ledger_app(None, str(tmp_path / "unused.db"))
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    async with saga_worker(client, queue), Client(on_temporal) as mcp:
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        result = await mcp.call_tool(
            "book_trip", {}, meta=meta("trip-commits-" + queue), progress_callback=on_progress
        )
        status = await mcp.call_tool(STATUS_TOOL, {"run_id": "trip-commits-" + queue})
    async with Client(in_process) as local:
        local_tools = {tool.name: tool for tool in (await local.list_tools()).tools}

    # The same tool: name, description, input and output schemas; and one tool more, the status tool.
    assert sorted(tools) == ["book_trip", STATUS_TOOL]
    assert tools["book_trip"].model_dump() == local_tools["book_trip"].model_dump()
    assert tools["book_trip"].output_schema == workflow_output_schema()
    assert result.is_error is False
    assert without_times(result.structured_content) == committed("trip-commits-" + queue)
    # The status tool answers with what the call returned, timed by the workflow rather than the call.
    assert status.structured_content is not None
    assert result.structured_content is not None
    assert {**status.structured_content, "duration_ms": None} == {
        **result.structured_content,
        "duration_ms": None,
    }
    assert messages == [
        "book_trip started: BookFlight -> ReserveHotel -> ChargeCard",
        "step 1 of 3: executing BookFlight",
        "step 1 of 3: BookFlight done",
        "step 2 of 3: executing ReserveHotel",
        "step 2 of 3: ReserveHotel done",
        "step 3 of 3: executing ChargeCard",
        "step 3 of 3: ChargeCard done",
        "book_trip committed",
    ]
    assert ledger_counts(ledger) == (1, 1, 1, 0, 0)


async def test_a_rolled_back_run_gives_the_rollback_report_from_the_call_and_from_the_status_tool(
    client: TemporalClient, tmp_path: Path
) -> None:
    ledger = fresh_ledger(tmp_path)
    queue = f"served-{uuid.uuid4().hex}"
    app = ledger_app(TemporalSagaRunner(client, queue, compensation_retry=RetryPolicy.never()), ledger)
    run_id = "trip-declined-" + queue
    async with saga_worker(client, queue), Client(app) as mcp:
        result = await mcp.call_tool("book_trip", {"declined": True}, meta=meta(run_id))
        status = await mcp.call_tool(STATUS_TOOL, {"run_id": run_id})

    assert result.is_error is True
    assert [block.model_dump()["text"] for block in result.content] == [
        "Card Declined! — rolled back: ReserveHotel, BookFlight"
    ]
    assert without_times(result.structured_content) == {
        "status": "rolled_back",
        "run_id": run_id,
        "metadata": {},
        "steps": COMMITTED_STEPS[:2],
        "summary": "Card Declined! — rolled back: ReserveHotel, BookFlight",
        "report": {
            "run_id": run_id,
            "saga": "book_trip",
            "status": "rolled_back",
            "steps": ["BookFlight", "ReserveHotel", "ChargeCard"],
            "succeeded": COMMITTED_STEPS[:2],
            "failed_step": COMMITTED_STEPS[2],
            "failure_kind": "error",
            "cause": {"type": "ToolError", "message": "Card Declined!"},
            "compensated": COMMITTED_STEPS[1::-1],
            "compensation_failures": [],
            "left_standing": [],
        },
    }
    assert without_times(status.structured_content) == without_times(result.structured_content)
    assert (status.is_error, status.content, status.meta) == (True, result.content, result.meta)
    assert ledger_counts(ledger) == (0, 0, 0, 2, 0)


async def test_the_status_tool_says_running_with_the_steps_done_and_refuses_an_unknown_run(
    client: TemporalClient, tmp_path: Path
) -> None:
    ledger = fresh_ledger(tmp_path)
    queue = f"served-{uuid.uuid4().hex}"
    entered, release = anyio.Event(), anyio.Event()
    app = ledger_app(TemporalSagaRunner(client, queue, steps=[LedgerHotel(ledger)]), ledger)
    run_id = "trip-running-" + queue
    worker = saga_worker(client, queue, steps=[GatedHotel(ledger, entered, release)])
    async with worker, Client(app) as mcp, anyio.create_task_group() as tasks:

        async def call() -> None:
            await mcp.call_tool("book_trip", {}, meta=meta(run_id))

        tasks.start_soon(call)
        await entered.wait()
        running = await mcp.call_tool(STATUS_TOOL, {"run_id": run_id})
        unknown = await mcp.call_tool(STATUS_TOOL, {"run_id": "no-such-run"})
        release.set()
        ended = await mcp.call_tool(STATUS_TOOL, {"run_id": run_id, "wait": True})

    assert without_times(running.structured_content) == {
        "status": "running",
        "run_id": run_id,
        "metadata": {},
        "steps": COMMITTED_STEPS[:1],
    }
    assert (unknown.is_error, [block.model_dump()["text"] for block in unknown.content]) == (
        True,
        ["no saga run 'no-such-run' is known here"],
    )
    assert (unknown.meta or {}).get("aegis-nb/refused") is True  # nothing ran, nothing to undo
    assert without_times(ended.structured_content) == committed(run_id)


async def test_a_dynamic_saga_in_a_workflow_on_temporal_is_refused_with_the_reason(
    client: TemporalClient,
) -> None:
    app = AegisMCP("dynamic", temporal=TemporalSagaRunner(client, "never-polled"))

    @app.workflow("plan")
    async def plan(ctx: AegisContext) -> AegisContext:
        async with app.workflow_engine.saga(ctx):
            pass  # pragma: no cover -- refused before the block runs
        return ctx  # pragma: no cover

    async with Client(app) as mcp:
        result = await mcp.call_tool("plan", {})
    assert result.is_error is True
    assert [block.model_dump()["text"] for block in result.content] == [
        "workflow 'plan' failed: SagaDefinitionError: a dynamic saga (engine.saga) cannot run on "
        "Temporal: a Temporal workflow is code the worker replays, and a dynamic saga's steps are "
        "decided by the caller's code as it runs; use a list saga (with parallel groups if need be), "
        "or serve this workflow in-process (@app.workflow(temporal=None))"
    ]


# -- kills --------------------------------------------------------------------------------------


@asynccontextmanager
async def served(address: str, queue: str, ledger: str, pidfile: Path) -> AsyncIterator[Client]:
    """`ledger_app` on Temporal in a server process of its own, over stdio (its pid in `pidfile`)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tests.temporal_support", "serve", address, queue, ledger, str(pidfile)],
        cwd=str(ROOT),
    )
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 -- opening the null device does not block
        async with Client(stdio_client(params, errlog=errlog)) as mcp:
            yield mcp


@pytest.mark.slow
@pytest.mark.parametrize("declined", [False, True], ids=["commits", "rolls-back"])
async def test_a_server_killed_mid_saga_leaves_the_run_to_the_workers_and_a_new_server_reports_it(
    client: TemporalClient, temporal_address: str, tmp_path: Path, declined: bool
) -> None:
    ledger = fresh_ledger(tmp_path)
    queue = f"served-kill-{uuid.uuid4().hex}"
    run_id = f"trip-{uuid.uuid4().hex}"
    pidfile = tmp_path / "server.pid"
    entered, release = anyio.Event(), anyio.Event()

    async def call(mcp: Client) -> None:
        await mcp.call_tool("book_trip", {"declined": declined}, meta=meta(run_id))

    worker = saga_worker(
        client, queue, steps=[GatedHotel(ledger, entered, release)], max_concurrent_activities=4
    )
    with anyio.fail_after(60):
        async with worker:
            async with (
                served(temporal_address, queue, ledger, pidfile) as mcp,
                anyio.create_task_group() as tasks,
            ):
                tasks.start_soon(call, mcp)
                await entered.wait()  # flight booked, hotel booked, its step still running
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
                tasks.cancel_scope.cancel()  # the call is lost with its server
            release.set()  # the hotel's step ends on the worker, and the saga goes on without a server
            async with served(temporal_address, queue, ledger, pidfile) as again:
                status = await again.call_tool(STATUS_TOOL, {"run_id": run_id, "wait": True})

    assert calls(ledger) == [
        "execute BookFlight",
        "execute ReserveHotel",
        "execute ChargeCard",
        *(["compensate ReserveHotel", "compensate BookFlight"] if declined else []),
    ]
    if declined:
        assert isinstance(status, CallToolResult)
        assert status.is_error is True
        assert without_times(status.structured_content)["status"] == "rolled_back"
        assert without_times(status.structured_content)["report"]["compensated"] == COMMITTED_STEPS[1::-1]
        assert ledger_counts(ledger) == (0, 0, 0, 2, 0)
    else:
        assert status.is_error is False
        assert without_times(status.structured_content) == committed(run_id)
        assert ledger_counts(ledger) == (1, 1, 1, 0, 0)


@pytest.mark.slow
async def test_a_worker_killed_mid_compensation_is_replaced_and_the_rollback_finished(
    client: TemporalClient, temporal_address: str, tmp_path: Path
) -> None:
    ledger = fresh_ledger(tmp_path)
    queue = f"served-kill-{uuid.uuid4().hex}"
    run_id = f"trip-{uuid.uuid4().hex}"
    # Heartbeats on every activity, a second apart: a lost worker is noticed within a second.
    runner = TemporalSagaRunner(
        client, queue, heartbeat_timeout=1.0, heartbeat_after=0, compensation_retry=RetryPolicy.never()
    )
    app = ledger_app(runner, ledger)
    with anyio.fail_after(60):
        async with Client(app) as mcp, anyio.create_task_group() as tasks:
            results: list[CallToolResult] = []

            async def call() -> None:
                results.append(await mcp.call_tool("book_trip", {"declined": True}, meta=meta(run_id)))

            async with worker_process(temporal_address, queue, hang="compensate") as first:
                tasks.start_soon(call)
                await read_until(first, "blocked")  # the hotel is cancelled, its worker hangs
                first.send_signal(signal.SIGKILL)
                await first.wait()
            async with worker_process(temporal_address, queue, hang="0"):
                status = await mcp.call_tool(STATUS_TOOL, {"run_id": run_id, "wait": True})
        # The task group has waited for the call too: its answer comes from the same outcome.

    (result,) = results
    # The hotel's compensation ran twice (once per worker); the flight's once, on the second.
    assert calls(ledger) == [
        "execute BookFlight",
        "execute ReserveHotel",
        "execute ChargeCard",
        "compensate ReserveHotel",
        "compensate ReserveHotel",
        "compensate BookFlight",
    ]
    assert result.is_error is True
    assert without_times(status.structured_content) == without_times(result.structured_content)
    structured = without_times(result.structured_content)
    assert (structured["status"], structured["report"]["compensated"]) == (
        "rolled_back",
        COMMITTED_STEPS[1::-1],
    )
    assert ledger_counts(ledger) == (0, 0, 0, 2, 0)
