"""The travel agent with a journal, killed mid-trip: started again, it rolls the trip back first.

A child process serves `travel_app(..., journal=...)` in process and books a trip whose charge hangs;
once the flight and the hotel are booked and the charge has begun, the test kills it with SIGKILL.
The ledger (a SQLite file) then holds a flight and a hotel that nobody paid for. A new app on the
same files must cancel them on start-up, before it serves its first call, by finding its three
steps again through the journal.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from subprocess import PIPE

import anyio
import pytest
from mcp import Client

from aegis_nb.cli import main
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.mock import Ledger
from aegis_nb.saga.durable import read_run, read_runs
from aegis_nb.server.app import AegisMCP
from aegis_nb.testing import outline
from tests.servers.durable_travel import app
from tests.servers.launch import ROOT, Lines

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CHILD = Path(__file__).parent / "servers" / "durable_travel.py"


async def kill_mid_trip(ledger: Path, journal: Path) -> None:
    """Run the child until its charge has begun, then SIGKILL it."""
    process = await anyio.open_process(
        [sys.executable, str(CHILD), str(ledger), str(journal)], cwd=ROOT, stdout=PIPE
    )
    try:
        assert process.stdout is not None
        await Lines(process.stdout).wait_for("charging")
    finally:
        process.kill()
        await process.wait()


async def test_a_killed_travel_agent_rolls_the_trip_back_when_it_starts_again(tmp_path: Path) -> None:
    ledger, journal = tmp_path / "ledger.db", tmp_path / "journal.db"
    await kill_mid_trip(ledger, journal)

    left = Ledger(ledger).state()
    assert (len(left.flights), len(left.hotels), len(left.charges)) == (1, 1, 0)
    (run,) = read_runs(journal)
    assert run.status is SagaStatus.RUNNING

    async with Client(app(ledger, journal)) as client:
        # Start-up recovery ran before this first call was served.
        bookings = (await client.call_tool("list_bookings", {})).structured_content
    assert bookings is not None
    assert (bookings["flights"], bookings["hotels"], bookings["charges"]) == ([], [], [])
    assert Ledger(ledger).state().is_empty
    recovered = read_run(journal, run.run_id)
    assert recovered.status is SagaStatus.ROLLED_BACK
    assert [outline(event) for event in recovered.events] == [
        ("SagaStarted",),
        ("StepStarted", "BookFlight"),
        ("StepSucceeded", "BookFlight"),
        ("StepStarted", "ReserveHotel"),
        ("StepSucceeded", "ReserveHotel"),
        ("StepStarted", "ChargeCard"),
        # The next process: the charge was in flight, and may have happened, so it is refunded by key.
        ("StepFailed", "ChargeCard"),
        ("CompensationStarted", "ChargeCard"),
        ("CompensationSucceeded", "ChargeCard"),
        ("CompensationStarted", "ReserveHotel"),
        ("CompensationSucceeded", "ReserveHotel"),
        ("CompensationStarted", "BookFlight"),
        ("CompensationSucceeded", "BookFlight"),
        ("SagaRolledBackEvent",),
    ]


def app_from_environment() -> AegisMCP:
    """What `aegis-nb recover` loads in the test below: the travel app on the files the test names."""
    return app(Path(os.environ["AEGIS_TEST_LEDGER"]), Path(os.environ["AEGIS_TEST_JOURNAL"]))


def test_aegis_nb_recover_compensates_through_the_sessions_the_app_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger, journal = tmp_path / "ledger.db", tmp_path / "journal.db"
    anyio.run(kill_mid_trip, ledger, journal)
    monkeypatch.setenv("AEGIS_TEST_LEDGER", str(ledger))
    monkeypatch.setenv("AEGIS_TEST_JOURNAL", str(journal))

    # The app's steps reach the agency through the session its lifespan opens: recovery from the
    # command line enters that lifespan (without serving) so that they can compensate.
    command = ["recover", "--journal", str(journal), "tests.test_travel_recovery:app_from_environment"]
    assert main(command) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "recovered 1 run(s): 1 rolled back, 0 stuck; 0 left unfinished"
    )
    assert Ledger(ledger).state().is_empty
    (run,) = read_runs(journal)
    assert run.status is SagaStatus.ROLLED_BACK
