"""`AegisMCP(..., journal=...)`: workflows are journaled, and a crashed run is rolled back at start-up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from aegis_nb import AegisContext, WorkflowEngine
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.definition import SagaEntry
from aegis_nb.saga.durable import SqliteJournal, read_run, read_runs
from aegis_nb.server.app import AegisMCP
from tests.durable_support import Crash, CrashingJournal
from tests.test_journal_sqlite import Hold, Note, lines

pytestmark = pytest.mark.anyio

STEPS = "tests.test_journal_sqlite"
"""The module of the trip's steps, which recovery in a new journal object may rebuild steps from."""


def trip(logfile: Path) -> list[SagaEntry]:
    return [(Note(), (str(logfile),), {}), (Hold(1), (str(logfile),), {})]


def travel(path: Path, logfile: Path, opened: list[str]) -> AegisMCP:
    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[dict[str, Any]]:
        opened.append("open")  # the app's own lifespan runs first: steps may need what it opens
        yield {}
        opened.append("closed")

    app = AegisMCP("travel", journal=SqliteJournal(path, allow_modules=[STEPS]), lifespan=lifespan)

    @app.workflow("book")
    async def book(ctx: AegisContext) -> AegisContext:
        return await app.workflow_engine.execute_saga(trip(logfile), ctx, name="book")

    return app


async def test_the_server_rolls_back_a_crashed_run_before_serving(tmp_path: Path) -> None:
    path, logfile = tmp_path / "j.db", tmp_path / "log"
    with pytest.raises(Crash):  # the previous server process died after both steps succeeded
        await WorkflowEngine(journal=CrashingJournal(SqliteJournal(path), 5)).run_saga(
            trip(logfile), name="book", run_id="crashed"
        )
    opened: list[str] = []
    app = travel(path, logfile, opened)
    async with Client(app) as client:
        assert opened == ["open"]
        assert lines(logfile) == [
            "note crashed/0",
            "hold 1 crashed/1",
            "release 1 crashed/1",
            "unnote crashed/0 noted=True",
        ]
        result = await client.call_tool("book", {})
        assert not result.is_error
    assert opened == ["open", "closed"]
    runs = {run.run_id: run for run in read_runs(path)}
    (served,) = set(runs) - {"crashed"}
    assert (runs["crashed"].status, runs["crashed"].recoveries) == (SagaStatus.ROLLED_BACK, 1)
    assert runs[served].status is SagaStatus.COMMITTED
    assert read_run(path, served).events[0].saga == "book"  # type: ignore[union-attr]


async def test_a_second_start_finds_nothing_to_recover(tmp_path: Path) -> None:
    path, logfile = tmp_path / "j.db", tmp_path / "log"
    app = travel(path, logfile, [])
    for _ in range(2):
        async with Client(app) as client:
            assert not (await client.call_tool("book", {})).is_error
    runs = read_runs(path)
    assert [run.status for run in runs] == [SagaStatus.COMMITTED] * 2
    assert lines(logfile) == [line for r in runs for line in (f"note {r.run_id}/0", f"hold 1 {r.run_id}/1")]


def test_a_journal_given_twice_is_refused(tmp_path: Path) -> None:
    engine = WorkflowEngine(journal=SqliteJournal(tmp_path / "a.db"))
    with pytest.raises(TypeError, match="the engine already journals to <SqliteJournal"):
        AegisMCP("x", engine=engine, journal=tmp_path / "b.db")


APP = AegisMCP("cli-recovery", journal=SqliteJournal("never-opened.db", allow_modules=[STEPS]))
"""An app for `aegis-nb recover`: its engine's policy is used, its own journal file is never opened."""


def test_aegis_nb_recover_takes_an_aegismcp_app(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aegis_nb.cli import main

    path, logfile = tmp_path / "j.db", tmp_path / "log"

    async def crash() -> None:
        with pytest.raises(Crash):
            await WorkflowEngine(journal=CrashingJournal(SqliteJournal(path), 5)).run_saga(
                trip(logfile), name="book", run_id="crashed"
            )

    anyio.run(crash)
    assert main(["recover", "--journal", str(path), "tests.test_recovery_server:APP"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "recovered 1 run(s): 1 rolled back, 0 stuck; 0 left unfinished"
    )
    assert lines(logfile)[-2:] == ["release 1 crashed/1", "unnote crashed/0 noted=True"]
    assert not Path("never-opened.db").exists()
