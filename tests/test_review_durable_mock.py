"""Review fixes in the durable journal, its recovery, the mock ledger and the command line.

Each test names the behaviour it checks; each failed before its fix.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from aegis_nb import AegisContext, RetryPolicy, WorkflowEngine
from aegis_nb.cli import main
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.mock.ledger import BookingKind, Ledger, LedgerError
from aegis_nb.saga.durable import JournalInUse, SqliteJournal, read_run, read_runs
from aegis_nb.saga.events import SagaCommitted
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.testing import outline
from tests.durable_support import Act, Crash, CrashingJournal, World

FAST = RetryPolicy(attempts=2, initial_delay=0.0)


def statuses(path: Path) -> dict[SagaStatus, int]:
    counts: dict[SagaStatus, int] = {}
    for info in read_runs(path):
        counts[info.status] = counts.get(info.status, 0) + 1
    return counts


# -- recovery beside live runs and beside another recovery -------------------------------------------


@pytest.mark.anyio
async def test_recovering_while_sagas_commit_never_undoes_a_live_or_committed_run(tmp_path: Path) -> None:
    # A recovery read a run as unfinished, the run then committed, and the recovery undid it: the
    # journal showed SagaCommitted followed by compensations, while the caller had its success.
    path = tmp_path / "runs.db"
    world = World()
    steps = [Act(world, "A"), Act(world, "B")]
    recovered: list[SagaRun] = []
    async with SqliteJournal(path, steps=steps) as journal:
        engine = WorkflowEngine(journal=journal, compensation_retry=FAST)

        async def recover_again_and_again() -> None:
            for _ in range(50):
                recovered.extend(await engine.recover())

        async with anyio.create_task_group() as group:
            group.start_soon(recover_again_and_again)
            for _ in range(50):
                group.start_soon(engine.execute_saga, [(s, (), {}) for s in steps], AegisContext())
    assert recovered == []
    assert statuses(path) == {SagaStatus.COMMITTED: 50}
    assert (len(world.live), world.undo_calls) == (100, {})
    for info in read_runs(path):
        events = read_run(path, info.run_id).events
        assert isinstance(events[-1], SagaCommitted)


async def crashed_runs(path: Path, world: World, steps: list[Act], count: int) -> None:
    """`count` runs whose process died after their second step succeeded (before the third began)."""
    for number in range(count):
        journal = CrashingJournal(SqliteJournal(path, steps=steps), crash_at=5)
        engine = WorkflowEngine(journal=journal, compensation_retry=FAST)
        with pytest.raises(Crash):
            await engine.run_saga([(s, (), {}) for s in steps], name="trip", run_id=f"run{number:02}")


@pytest.mark.anyio
async def test_two_recoveries_at_once_undo_each_crashed_run_exactly_once(tmp_path: Path) -> None:
    # Both recoveries took every run: each step was undone twice and the second recovery's events
    # collided with the first's (UNIQUE constraint), leaving runs unfinished or the recovery failed.
    path = tmp_path / "runs.db"
    world = World()
    steps = [Act(world, "A"), Act(world, "B"), Act(world, "C")]
    await crashed_runs(path, world, steps, 40)
    results: list[tuple[str, ...]] = []
    async with SqliteJournal(path, steps=steps) as journal:
        engine = WorkflowEngine(journal=journal, compensation_retry=FAST)

        async def recover() -> None:
            results.append(tuple(run.run_id for run in await engine.recover()))

        async with anyio.create_task_group() as group:
            group.start_soon(recover)
            group.start_soon(recover)
    assert sorted(results) == [(), tuple(f"run{n:02}" for n in range(40))]
    keys = {f"run{n:02}/{i}" for n in range(40) for i in (0, 1)}
    assert (world.live, world.undo_calls, world.undos) == ({}, dict.fromkeys(keys, 1), dict.fromkeys(keys, 1))
    assert statuses(path) == {SagaStatus.ROLLED_BACK: 40}
    assert [info.recoveries for info in read_runs(path)] == [1] * 40
    assert [outline(e) for e in read_run(path, "run00").events[5:]] == [
        ("CompensationStarted", "B"),
        ("CompensationSucceeded", "B"),
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]


# -- the writer lock --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_journal_opened_through_a_symlink_is_in_use_while_its_target_is_open(tmp_path: Path) -> None:
    # The lock file was named after the path given, so a second writer (which would recover the
    # first's live runs) got in through any symlink to the journal.
    target = tmp_path / "runs.db"
    link = tmp_path / "link.db"
    async with SqliteJournal(target):
        link.symlink_to(target)
        with pytest.raises(JournalInUse) as refused:
            await SqliteJournal(link).open()
    assert str(refused.value) == f"journal {str(link)!r}: another process holds {target}.lock"


# -- the mock ledger's file -------------------------------------------------------------------------


def tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return sorted(name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))


def test_a_ledger_refuses_another_applications_database_and_leaves_it_untouched(tmp_path: Path) -> None:
    # It used to add its tables (and switch the file to WAL); a `bookings` table of the other
    # application's then failed every call with sqlite3.OperationalError instead.
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE bookings (id INTEGER PRIMARY KEY, guest TEXT)")
    before = path.read_bytes()
    with pytest.raises(LedgerError) as refused:
        Ledger(path)
    assert str(refused.value) == (
        f"cannot open {str(path)!r} as a ledger: it holds another application's tables (bookings); "
        "give the ledger a file of its own"
    )
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


@pytest.mark.anyio
async def test_a_ledger_refuses_a_saga_journal(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SqliteJournal(path):
        pass
    with pytest.raises(LedgerError) as refused:
        Ledger(path)
    assert str(refused.value) == (
        f"cannot open {str(path)!r} as a ledger: it is an aegis_nb saga journal; "
        "give the ledger a file of its own"
    )
    assert tables(path) == ["events", "runs"]


def test_a_ledger_written_before_ledgers_were_stamped_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with closing(Ledger(path)) as ledger:
        ledger.book(BookingKind.FLIGHT, "Oslo", "AE101", 20_000)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA application_id = 0")  # as earlier versions left the file
    with closing(Ledger(path)) as reopened:
        assert [b.id for b in reopened.state().flights] == ["FL-0001"]
    assert tables(path) == ["bookings", "charges", "sqlite_sequence", "voided_keys"]


def test_amounts_that_are_not_whole_cents_are_refused_and_the_ledger_stays_readable() -> None:
    # 10.5 cents was stored as it was, and every later state() raised ValueError.
    ledger = Ledger()
    refusals = []
    for act in (
        lambda: ledger.charge(10.5, "4242"),  # type: ignore[arg-type]
        lambda: ledger.book(BookingKind.HOTEL, "Rome", "Hotel Rome", 9_000, nights=1.5),  # type: ignore[arg-type]
        lambda: ledger.book(BookingKind.FLIGHT, "Rome", "AE1", True),
    ):
        with pytest.raises(LedgerError) as refused:
            act()
        refusals.append(str(refused.value))
    assert refusals == [
        "a charge must be an int, got 10.5",
        "a stay's nights must be an int, got 1.5",
        "a booking's price must be an int, got True",
    ]
    assert ledger.state().is_empty


# -- the command line -------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["mock", "serve"])
@pytest.mark.parametrize(
    ("port", "message"),
    [("99999", "a port is 0-65535, got 99999"), ("eighty", "expected a port number, got 'eighty'")],
)
def test_a_port_out_of_range_is_a_usage_error_not_a_traceback(
    command: str, port: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, "--transport", "http", "--port", port] + (
        ["some.module:app"] if command == "serve" else []
    )
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1] == f"aegis-nb {command}: error: argument --port: {message}"
    )
