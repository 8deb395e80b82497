"""What the SQLite journal syncs, what it only commits, what rides along, and on which thread it writes.

A hook on the journal's file records every transaction: whether it was synced (fdatasync of the
log: survives a power loss) or only committed (survives the process being killed), and which
events it held. The sagas here use steps the journal can rebuild (`tests.durable_support.Act`,
registered by name).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from aegis_nb import AegisContext, SagaRolledBack, WorkflowEngine
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.durable import JournalError, JournalUnavailable, SqliteJournal, read_runs
from aegis_nb.saga.durable.store import EventRow, NewRun, Row
from tests.durable_support import Act, World

pytestmark = pytest.mark.anyio

Write = tuple[str, tuple[str, ...]]
"""One transaction: ``"sync"`` or ``"commit"``, and its rows as ``"SagaStarted"``, ``"StepStarted A"``..."""


def row_name(row: Row) -> str:
    if isinstance(row, NewRun):
        return "NewRun"
    if isinstance(row, EventRow):
        body = json.loads(row.body)
        return " ".join([body["type"], *([body["step"]] if "step" in body else [])])
    return type(row).__name__


@dataclass
class Transactions:
    """Records each transaction the journal's file writes, and on which thread."""

    writes: list[Write] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)

    def watch(self, journal: SqliteJournal) -> None:
        file = journal._file
        assert file is not None
        write = file.write

        def recording(rows: Sequence[Row], sync: bool = True) -> Mapping[str, JournalError]:
            refused = write(rows, sync)
            self.writes.append(("sync" if sync else "commit", tuple(row_name(r) for r in rows)))
            self.threads.append(threading.get_ident())
            return refused

        file.write = recording  # type: ignore[method-assign]


async def journal_watched(path: Path, world: World) -> tuple[SqliteJournal, Transactions]:
    journal = SqliteJournal(path, steps=[Act(world, n) for n in "ABC"])
    await journal.open()
    transactions = Transactions()
    transactions.watch(journal)
    return journal, transactions


async def test_plain_steps_sync_once_each_and_the_start_is_committed_not_synced(tmp_path: Path) -> None:
    world = World()
    journal, tx = await journal_watched(tmp_path / "j.db", world)
    async with journal:
        await WorkflowEngine(journal=journal).execute_saga([Act(world, n) for n in "ABC"])
    assert tx.writes == [
        ("commit", ("NewRun", "SagaStarted")),
        ("sync", ("StepStarted A", "StepSucceeded A")),
        ("sync", ("StepStarted B", "StepSucceeded B")),
        ("sync", ("StepStarted C", "StepSucceeded C", "SagaCommitted")),
    ]


async def test_an_in_doubt_step_start_is_synced_and_carries_the_success_before_it(tmp_path: Path) -> None:
    world = World()
    journal, tx = await journal_watched(tmp_path / "j.db", world)
    async with journal:
        saga = [Act(world, "A"), Act(world, "B", in_doubt=True), Act(world, "C")]
        await WorkflowEngine(journal=journal).execute_saga(saga)
    assert tx.writes == [
        ("commit", ("NewRun", "SagaStarted")),
        ("sync", ("StepStarted A", "StepSucceeded A", "StepStarted B")),
        ("sync", ("StepSucceeded B",)),
        ("sync", ("StepStarted C", "StepSucceeded C", "SagaCommitted")),
    ]


async def test_an_in_doubt_first_step_writes_the_start_with_its_own_synced_start(tmp_path: Path) -> None:
    world = World()
    journal, tx = await journal_watched(tmp_path / "j.db", world)
    async with journal:
        await WorkflowEngine(journal=journal).execute_saga([Act(world, "A", in_doubt=True), Act(world, "B")])
    assert tx.writes == [
        ("sync", ("NewRun", "SagaStarted", "StepStarted A")),
        ("sync", ("StepSucceeded A",)),
        ("sync", ("StepStarted B", "StepSucceeded B", "SagaCommitted")),
    ]


async def test_a_failure_and_each_compensation_outcome_are_synced_before_anything_acts(
    tmp_path: Path,
) -> None:
    world = World()
    journal, tx = await journal_watched(tmp_path / "j.db", world)
    async with journal:
        with pytest.raises(SagaRolledBack):
            await WorkflowEngine(journal=journal).execute_saga(
                [Act(world, "A"), Act(world, "B"), Act(world, "C", fail=True)]
            )
    assert tx.writes == [
        ("commit", ("NewRun", "SagaStarted")),
        ("sync", ("StepStarted A", "StepSucceeded A")),
        ("sync", ("StepStarted B", "StepSucceeded B")),
        ("sync", ("StepStarted C", "StepFailed C")),
        ("sync", ("CompensationStarted B", "CompensationSucceeded B")),
        ("sync", ("CompensationStarted A", "CompensationSucceeded A")),
        ("sync", ("SagaCompensated",)),  # SagaRolledBackEvent, under its 0.1.0 wire name
    ]


async def test_the_start_is_in_the_file_before_the_first_step_runs_though_not_yet_synced(
    tmp_path: Path,
) -> None:
    """Committed means another connection (or a restarted process) already reads it: a kill keeps it."""
    path = tmp_path / "j.db"
    seen: list[tuple[list[SagaStatus], int]] = []

    class Look:
        journal: SqliteJournal | None = None

        async def execute(self, ctx: AegisContext) -> None:
            assert self.journal is not None
            seen.append(([r.status for r in read_runs(path)], self.journal.syncs))

        async def compensate(self, ctx: AegisContext) -> None: ...

    look = Look()
    async with SqliteJournal(path, steps=[look]) as journal:
        look.journal = journal
        await WorkflowEngine(journal=journal).execute_saga([look])
        assert journal.syncs == 1  # the step's success, with the run's end
    assert seen == [([SagaStatus.RUNNING], 0)]


class Gate:
    """Holds each run at its first step until `runs` runs have reached it (so all are live at once)."""

    name = "Gate"

    def __init__(self, runs: int) -> None:
        self.runs = runs
        self.arrived = 0
        self.all_live = anyio.Event()

    async def execute(self, ctx: AegisContext) -> None:
        self.arrived += 1
        if self.arrived == self.runs:
            self.all_live.set()
        await self.all_live.wait()

    async def compensate(self, ctx: AegisContext) -> None: ...


async def test_a_lone_run_writes_on_the_loop_and_concurrent_runs_on_a_worker_thread(tmp_path: Path) -> None:
    world, gate = World(), Gate(2)
    journal = SqliteJournal(tmp_path / "j.db", steps=[Act(world, "A"), gate])
    loop_thread = threading.get_ident()
    async with journal:
        tx = Transactions()
        tx.watch(journal)
        engine = WorkflowEngine(journal=journal)
        await engine.execute_saga([Act(world, "A")])
        lone = len(tx.writes)
        assert set(tx.threads) == {loop_thread}
        async with anyio.create_task_group() as group:
            for _ in range(2):
                group.start_soon(engine.execute_saga, [gate, Act(world, "A")])
    together = list(zip(tx.writes, tx.threads, strict=True))[lone:]
    gated = [thread for (_, rows), thread in together if "StepSucceeded Gate" in rows]
    assert gated, together
    assert loop_thread not in gated
    assert [r.status for r in read_runs(tmp_path / "j.db")] == [SagaStatus.COMMITTED] * 3


async def test_the_log_is_written_out_to_its_checkpoint_size_when_the_journal_opens(tmp_path: Path) -> None:
    """So a commit overwrites blocks the log already has instead of growing it (a cheaper sync)."""
    world = World()
    async with SqliteJournal(tmp_path / "j.db", steps=[Act(world, "A")]) as journal:
        assert journal.commits == 0
        assert (tmp_path / "j.db-wal").stat().st_size >= 1000 * (4096 + 24)  # SQLite's defaults
        await WorkflowEngine(journal=journal).execute_saga([Act(world, "A")])
    assert [r.status for r in read_runs(tmp_path / "j.db")] == [SagaStatus.COMMITTED]


async def test_a_batch_failing_on_the_writer_thread_fails_every_run_in_it_before_they_act(
    tmp_path: Path,
) -> None:
    """Two runs wait on one batch the worker thread cannot write: both hear of it, neither goes on."""
    world, gate = World(), Gate(2)
    journal = SqliteJournal(tmp_path / "j.db", steps=[gate, Act(world, "A")])
    failures: list[str] = []
    async with journal:
        file = journal._file
        assert file is not None
        write = file.write

        def losing_the_disk(rows: Sequence[Row], sync: bool = True) -> Mapping[str, JournalError]:
            if any(row_name(row) == "StepSucceeded Gate" for row in rows):
                raise OSError("the disk went away")
            return write(rows, sync)

        file.write = losing_the_disk  # type: ignore[method-assign]
        engine = WorkflowEngine(journal=journal)

        async def run() -> None:
            try:
                await engine.execute_saga([gate, Act(world, "A")])
            except JournalUnavailable as error:
                failures.append(error.problem)

        async with anyio.create_task_group() as group:
            for _ in range(2):
                group.start_soon(run)
    assert failures == ["could not write the journal (OSError('the disk went away'))"] * 2
    assert world.done == {}  # step A never ran: the engine acted on no unwritten success
    assert [r.status for r in read_runs(tmp_path / "j.db")] == [SagaStatus.RUNNING] * 2
