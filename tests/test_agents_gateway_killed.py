"""A journaled gateway SIGKILLed in the middle of an agent's saga, and started again on the same
journal, rolls that saga back before it serves: the flight and hotel the agent had booked are
cancelled, the ledger ends clean, the journal lists the run as rolled back by recovery, and the old
handle is refused (its agent's calls are gone with the process)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from subprocess import PIPE

import anyio
import pytest
from anyio.abc import Process
from mcp import Client

from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.durable import read_runs
from tests.agents_support import EMPTY_AFTER_TWO_CANCELLATIONS, ledger_of, policy_file
from tests.servers.launch import ROOT, Lines, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@asynccontextmanager
async def gateway_process(policy: Path, journal: Path) -> AsyncIterator[tuple[Process, str]]:
    """``aegis-nb gateway POLICY --journal J`` over HTTP: its process (ours to kill) and its URL."""
    port = free_port()
    command = [
        sys.executable,
        *("-m", "aegis_nb.cli", "gateway", str(policy), "--journal", str(journal)),
        *("--transport", "http", "--port", str(port)),
    ]
    process = await anyio.open_process(
        command, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=PIPE
    )
    try:
        assert process.stderr is not None
        await Lines(process.stderr).wait_containing("Uvicorn running on")
        yield process, f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(10, shield=True):
                await process.wait()
        if process.returncode is None:
            process.kill()


async def test_a_gateway_killed_mid_saga_rolls_the_saga_back_when_it_starts_again(tmp_path: Path) -> None:
    ledger, journal = tmp_path / "ledger.db", tmp_path / "journal.db"
    policy = policy_file(tmp_path, ledger)
    async with gateway_process(policy, journal) as (process, url):
        # The client is left open-ended on purpose: its server dies under it.
        client = Client(url)
        await client.__aenter__()
        begun = await client.call_tool("saga_begin", {})
        saga = (begun.structured_content or {})["saga"]
        await client.call_tool("book_flight", {"destination": "Lisbon", "saga": saga})
        await client.call_tool("reserve_hotel", {"city": "Lisbon", "nights": 2, "saga": saga})
        process.send_signal(signal.SIGKILL)
        await process.wait()
    killed = process.returncode
    standing = ledger_of(ledger)
    (open_run,) = read_runs(journal)
    async with gateway_process(policy, journal) as (_, url), Client(url) as agent:
        # Start-up recovery runs before the first request is served.
        listed = await agent.call_tool("list_bookings", {})
        stale = await agent.call_tool("saga_status", {"saga": saga})
    assert killed == -signal.SIGKILL
    assert (len(standing["flights"]), len(standing["hotels"])) == (1, 1)
    assert open_run.status is SagaStatus.RUNNING
    assert (listed.structured_content or {})["flights"] == []
    assert ledger_of(ledger) == EMPTY_AFTER_TWO_CANCELLATIONS
    (recovered,) = read_runs(journal)
    assert (recovered.run_id, recovered.status, recovered.recoveries) == (
        open_run.run_id,
        SagaStatus.ROLLED_BACK,
        1,
    )
    assert stale.is_error is True
    assert "".join(getattr(block, "text", "") for block in stale.content) == (
        "no open saga for this handle: it is unknown, expired, or not this client's"
    )
    # Its server was killed: closing the session may fail, and must not hang the test.
    with anyio.CancelScope(shield=True), anyio.move_on_after(5), contextlib.suppress(Exception):
        await client.__aexit__(None, None, None)
