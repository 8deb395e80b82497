"""The SQLite journal: what it writes, what it refuses to start, and every bad journal file.

Real SQLite files in a temporary directory; the steps that must be rebuilt after a crash live at
module level here, so recovery finds them by import path as it would in an application.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from aegis_nb import AegisContext, Secret, WorkflowEngine
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.definition import SagaEntry
from aegis_nb.saga.durable import (
    JournalCorrupt,
    JournalError,
    JournalInUse,
    JournalTooNew,
    JournalTooOld,
    JournalUnavailable,
    LocatorKind,
    RecoveryIncomplete,
    SqliteJournal,
    StepNotRecoverable,
    read_run,
    read_runs,
)
from aegis_nb.saga.functional import FunctionStep, step
from aegis_nb.testing import outline
from tests.conftest import require
from tests.durable_support import Act, Crash, CrashingJournal, World
from tests.servers.launch import python_child

pytestmark = pytest.mark.anyio


# -- steps recovery finds by import path; they log to a file named in their JSON arguments ----------


def log(path: str, line: str) -> None:
    with open(path, "a") as file:
        file.write(line + "\n")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class Note:
    """A no-argument class step: rebuilt as ``Note()``."""

    async def execute(self, ctx: AegisContext, logfile: str) -> AegisContext:
        log(logfile, f"note {ctx.idempotency_key}")
        return ctx.with_metadata({"noted": True})

    async def compensate(self, ctx: AegisContext, logfile: str) -> None:
        log(logfile, f"unnote {ctx.idempotency_key} noted={ctx.metadata['noted']}")


@dataclass
class Hold:
    """A dataclass step with JSON fields: rebuilt as ``Hold(seats=...)``."""

    seats: int
    in_doubt: bool = True

    async def execute(self, ctx: AegisContext, logfile: str) -> None:
        log(logfile, f"hold {self.seats} {ctx.idempotency_key}")

    async def compensate(self, ctx: AegisContext, logfile: str) -> None:
        log(logfile, f"release {self.seats} {ctx.idempotency_key}")


async def _stamp(ctx: AegisContext, logfile: str) -> None:
    log(logfile, f"stamp {ctx.idempotency_key}")


stamp: FunctionStep = step(name="Stamp")(_stamp)


@stamp.compensation
async def unstamp(ctx: AegisContext, logfile: str) -> None:
    log(logfile, f"unstamp {ctx.idempotency_key}")


class Quiet:
    """Does nothing, undoes nothing."""

    async def execute(self, ctx: AegisContext) -> None: ...

    async def compensate(self, ctx: AegisContext) -> None: ...


class Never:
    """Must never run: the journal refuses the saga first."""

    async def execute(self, ctx: AegisContext) -> None:
        raise AssertionError("a refused saga ran a step")

    async def compensate(self, ctx: AegisContext) -> None:
        raise AssertionError("a refused saga ran a compensation")


class Private:
    def __init__(self, seats: int) -> None:
        self._seats = seats

    async def execute(self, ctx: AegisContext) -> None: ...

    async def compensate(self, ctx: AegisContext) -> None: ...


class Holding:
    def __init__(self, world: World) -> None:
        self.world = world

    async def execute(self, ctx: AegisContext) -> None: ...

    async def compensate(self, ctx: AegisContext) -> None: ...


def journal_files(folder: Path) -> tuple[dict[str, int], bytes]:
    """The permission bits of each journal file, and all their bytes together."""
    files = sorted(folder.glob("j.db*"))
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}, b"".join(p.read_bytes() for p in files)


def truncate_to_half(path: Path) -> None:
    size = path.stat().st_size
    assert size > 40_000
    with open(path, "r+b") as file:
        file.truncate(size // 2)


def chattr(flag: str, path: Path) -> bool:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False).returncode == 0


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def make_journal(path: Path, runs: int = 1) -> None:
    """A valid journal with `runs` committed runs."""
    async with SqliteJournal(path) as journal:
        engine = WorkflowEngine(journal=journal)
        for _ in range(runs):
            await engine.execute_saga([Quiet()], AegisContext({"x": "y" * 200}))


# -- what is written --------------------------------------------------------------------------------


async def test_the_files_are_private_and_never_hold_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    logfile = tmp_path / "log"
    async with SqliteJournal(path) as journal:
        engine = WorkflowEngine(journal=journal)
        ctx = AegisContext({"card": Secret("4929-SECRET-1234"), "nested": {"pin": Secret("SECRET-PIN")}})
        await engine.execute_saga([(Note(), (str(logfile),), {})], ctx)
        modes, contents = journal_files(tmp_path)
    assert modes == {"j.db": 0o600, "j.db-wal": 0o600, "j.db-shm": 0o600, "j.db.lock": 0o600}
    assert b"SECRET" not in contents
    # The card's digits with their dash: four digits alone turn up by chance in a clock reading's
    # decimals or a hex run id (one CI run in a few dozen), and no number or id holds a dash.
    assert b"4929-" not in contents


async def test_one_sync_per_step_and_one_more_commit_for_the_start(tmp_path: Path) -> None:
    logfile = str(tmp_path / "log")
    async with SqliteJournal(tmp_path / "j.db") as journal:
        engine = WorkflowEngine(journal=journal)
        await engine.execute_saga([(Note(), (logfile,), {}) for _ in range(10)])
        # The start is committed, not synced; the last step's success is synced with the run's end.
        assert (journal.commits, journal.syncs) == (10 + 1, 10)


async def test_concurrent_sagas_share_their_syncs(tmp_path: Path) -> None:
    logfile = str(tmp_path / "log")
    async with SqliteJournal(tmp_path / "j.db") as journal:
        engine = WorkflowEngine(journal=journal)
        async with anyio.create_task_group() as group:
            for _ in range(100):
                group.start_soon(engine.execute_saga, [(Note(), (logfile,), {}) for _ in range(3)])
        synced_events = 100 * (3 + 2)
        # Unshared, each of these would be a commit of its own. How many share one depends on how
        # fast the disk syncs against how fast the loop queues (26-117 commits on a loaded 2-core
        # machine): a third is far from both, so the test says whether syncs are shared, not how fast.
        assert journal.commits < synced_events / 3
    assert [r.status for r in read_runs(tmp_path / "j.db")] == [SagaStatus.COMMITTED] * 100


async def test_runs_are_listed_and_replayed_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    logfile = str(tmp_path / "log")
    world = World()
    async with SqliteJournal(path, steps=[Act(world, "A"), Act(world, "B")]) as journal:
        engine = WorkflowEngine(journal=journal)
        ok = await engine.run_saga([(Note(), (logfile,), {})], name="ok", run_id="r1")
        failed = await engine.run_saga([Act(world, "A"), Act(world, "B", fail=True)], name="bad", run_id="r2")
        assert [(r.run_id, r.saga, r.status, r.events) for r in await journal.runs()] == [
            ("r1", "ok", SagaStatus.COMMITTED, 4),
            ("r2", "bad", SagaStatus.ROLLED_BACK, 8),
        ]
    assert read_run(path, "r1").events == ok.events
    assert read_run(path, "r2").events == failed.events


# -- refusing to start what recovery could not rebuild -------------------------------------------


def local_class_step() -> object:
    class Local:
        async def execute(self, ctx: AegisContext) -> None: ...

        async def compensate(self, ctx: AegisContext) -> None: ...

    return Local()


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            local_class_step(),
            "its class local_class_step.<locals>.Local is defined inside a function",
        ),
        (
            Private(2),
            "tests.test_journal_sqlite:Private(**['_seats']) does not match its constructor, so it "
            "cannot be rebuilt from its attributes",
        ),
        (Holding(World()), "attribute['world'] is a World, which is not JSON data"),
        (
            (Note(), (Secret("pin"),), {}),
            "its arguments cannot be journaled: args[0] is a Secret, and secrets are never written; "
            "pass it in the context metadata",
        ),
        (
            (Note(), (), {"logfile": object()}),
            "its arguments cannot be journaled: kwargs['logfile'] is a object",
        ),
    ],
)
async def test_a_saga_recovery_could_not_rebuild_is_refused_before_any_step_runs(
    tmp_path: Path, entry: object, problem: str
) -> None:
    path = tmp_path / "j.db"
    async with SqliteJournal(path) as journal:
        engine = WorkflowEngine(journal=journal)
        with pytest.raises(StepNotRecoverable) as caught:
            await engine.execute_saga([Never(), entry], name="trip")
        assert await journal.runs() == ()
    message = str(caught.value)
    assert message.startswith("saga 'trip', step ")
    assert problem in message


async def test_steps_are_located_by_name_object_or_class(tmp_path: Path) -> None:
    world = World()
    registered = Act(world, "Registered")
    journal = SqliteJournal(tmp_path / "j.db", steps=[registered])
    kinds = [
        journal.resolver.locate(s) for s in (registered, Act(world, "Registered"), stamp, Note(), Hold(2))
    ]
    assert [(k.kind, k.target, dict(k.state)) for k in kinds] == [  # type: ignore[union-attr]
        (LocatorKind.NAME, "Registered", {}),
        (LocatorKind.NAME, "Registered", {}),
        (LocatorKind.OBJECT, "tests.test_journal_sqlite:stamp", {}),
        (LocatorKind.CLASS, "tests.test_journal_sqlite:Note", {}),
        (LocatorKind.CLASS, "tests.test_journal_sqlite:Hold", {"seats": 2, "in_doubt": True}),
    ]


async def test_recovery_rebuilds_steps_by_import_path_with_their_arguments(tmp_path: Path) -> None:
    path, logfile = tmp_path / "j.db", tmp_path / "log"
    saga: list[SagaEntry] = [
        (Note(), (str(logfile),), {}),
        (stamp, (str(logfile),), {}),
        (Hold(2), (str(logfile),), {}),
    ]
    # Events: 0 start, 1-2 Note, 3-4 Stamp, 5 Hold started (in doubt: synced), crash at 6 (its success).
    journal = CrashingJournal(SqliteJournal(path), 6)
    with pytest.raises(Crash):
        await WorkflowEngine(journal=journal).run_saga(saga, run_id="r1")
    async with SqliteJournal(path, allow_modules=[__name__]) as restarted:  # the app's modules
        (run,) = await WorkflowEngine(journal=restarted).recover()
    assert run.report.status is SagaStatus.ROLLED_BACK
    assert lines(logfile) == [
        "note r1/0",
        "stamp r1/1",
        "hold 2 r1/2",
        "release 2 r1/2",
        "unstamp r1/1",
        "unnote r1/0 noted=True",
    ]


async def test_a_run_whose_step_is_gone_stays_unfinished_and_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    world = World()
    steps = [Act(world, "A"), Act(world, "B")]
    journal = CrashingJournal(SqliteJournal(path, steps=steps), 3)
    with pytest.raises(Crash):
        await WorkflowEngine(journal=journal).run_saga(steps, run_id="r1")
    async with SqliteJournal(path) as restarted:  # nothing registered this time
        with pytest.raises(RecoveryIncomplete) as caught:
            await WorkflowEngine(journal=restarted).recover()
    assert caught.value.problems == {
        "r1": "step 'A' (name A): no step named 'A' is registered with this journal (registered: none)"
    }
    assert [r.status for r in read_runs(path)] == [SagaStatus.RUNNING]


async def test_a_second_process_cannot_open_a_journal_in_use(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with SqliteJournal(path):
        with pytest.raises(JournalInUse, match=r"another process holds .*j\.db\.lock"):
            await SqliteJournal(path).open()
        assert read_runs(path) == ()  # reading needs no lock


# -- bad journal files ----------------------------------------------------------------------------


async def refused(path: Path) -> JournalError:
    """Start a saga on the journal at `path`; it must fail before any step, leaving the file as it was."""
    before = file_digest(path) if os.path.exists(path) else None  # noqa: ASYNC240
    with pytest.raises(JournalError) as caught:
        await WorkflowEngine(journal=SqliteJournal(path)).execute_saga([Never()])
    if before is not None:
        assert file_digest(path) == before
    assert str(path) in str(caught.value)
    return caught.value


async def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    path.write_bytes(b"these are not the pages you are looking for" * 100)
    error = await refused(path)
    assert isinstance(error, JournalCorrupt)
    assert str(error) == f"journal {str(path)!r}: damaged or not a journal (file is not a database)"


async def test_another_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    error = await refused(path)
    assert (
        str(error)
        == f"journal {str(path)!r}: not an aegis_nb journal: it holds another application's tables (t)"
    )


async def test_a_journal_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    await make_journal(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 3")
    db.close()
    error = await refused(path)
    assert isinstance(error, JournalTooNew)
    assert str(error) == (
        f"journal {str(path)!r}: written by journal schema 3; this aegis_nb reads up to schema 2"
    )


async def test_a_journal_in_the_first_development_layout_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    await make_journal(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 1")
    db.close()
    error = await refused(path)  # which also checks that the file is left as it was
    assert isinstance(error, JournalTooOld)
    assert str(error) == (
        f"journal {str(path)!r}: written by journal schema 1, a development layout from before "
        "aegis_nb 0.1.0; this aegis_nb reads schema 2: finish its runs with the version that wrote it"
    )


async def test_a_truncated_journal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    await make_journal(path, runs=60)
    truncate_to_half(path)
    error = await refused(path)
    assert isinstance(error, JournalCorrupt)
    # SQLite's own words in the parentheses depend on where the cut fell; ours do not.
    assert re.fullmatch(rf"journal {re.escape(repr(str(path)))}: damaged or not a journal \(.+\)", str(error))


async def test_a_record_that_does_not_decode_is_named(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    world = World()
    steps = [Act(world, "A"), Act(world, "B")]
    with pytest.raises(Crash):
        await WorkflowEngine(journal=CrashingJournal(SqliteJournal(path, steps=steps), 3)).run_saga(
            steps, run_id="r1"
        )
    db = sqlite3.connect(path)
    db.execute('UPDATE events SET body = \'{"v": 1, "type": "StepSucceeded"\' WHERE seq = 2')
    db.commit()
    db.close()
    before = file_digest(path)
    async with SqliteJournal(path, steps=steps) as journal:
        with pytest.raises(JournalCorrupt) as caught:
            await WorkflowEngine(journal=journal).recover()
    assert str(caught.value).startswith(f"journal {str(path)!r}, record run r1 event 2: not valid JSON")
    assert file_digest(path) == before
    assert world.undos == {}


async def test_a_record_from_a_newer_schema_is_named(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    await make_journal(path)
    db = sqlite3.connect(path)
    db.execute("UPDATE events SET body = replace(body, '\"v\":1', '\"v\":7') WHERE seq = 1")
    db.commit()
    db.close()
    (run,) = read_runs(path)
    with pytest.raises(JournalTooNew) as caught:
        read_run(path, run.run_id)
    assert str(caught.value) == (
        f"journal {str(path)!r}, record run {run.run_id} event 1: written by schema 7; "
        "this aegis_nb reads up to schema 1"
    )


async def test_a_journal_on_a_read_only_path_fails_before_any_step(tmp_path: Path) -> None:
    error = await refused(Path("/proc/aegis-journal.db"))
    assert isinstance(error, JournalUnavailable)
    assert str(error) == (
        "journal '/proc/aegis-journal.db': cannot create the file (No such file or directory)"
    )


async def test_a_read_only_journal_file_fails_before_any_step(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    await make_journal(path)
    # root ignores permission bits; an immutable file it cannot write
    require(chattr("+i", path), "chattr +i (an immutable file)")
    try:
        error = await refused(path)
    finally:
        assert chattr("-i", path)
    assert isinstance(error, JournalUnavailable)
    assert str(error) == (
        f"journal {str(path)!r}: could not write the journal: not writable here "
        "(attempt to write a readonly database)"
    )


FULL_DISK_CHILD = """
import resource, signal, sys, anyio
from aegis_nb import WorkflowEngine
from aegis_nb.saga.durable import JournalUnavailable, SqliteJournal
from tests.test_journal_sqlite import Never
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
async def main():
    try:
        await WorkflowEngine(journal=SqliteJournal(sys.argv[1])).execute_saga([Never()])
    except JournalUnavailable as exc:
        print(exc)
anyio.run(main)
"""


def test_a_journal_on_a_full_disk_fails_before_any_step(tmp_path: Path) -> None:
    """The child may write no byte past 8 KiB, as on a full disk; the step (which asserts) never runs."""
    path = tmp_path / "j.db"
    anyio.run(make_journal, path)
    before = file_digest(path)
    child = python_child("-c", FULL_DISK_CHILD, str(path))
    assert child.stdout.startswith(f"journal {str(path)!r}: ")
    assert "disk I/O error" in child.stdout or "disk is full" in child.stdout
    assert child.stderr == ""
    assert file_digest(path) == before


async def test_a_journal_failing_mid_run_fails_the_saga_and_recovery_finishes_it(tmp_path: Path) -> None:
    """The engine never acts on an event it could not write: the run waits on disk for recovery."""
    path = tmp_path / "j.db"
    world = World()

    class LoseTheDisk:
        journal: SqliteJournal | None = None

        async def execute(self, ctx: AegisContext) -> None:
            assert self.journal is not None
            self.journal.abandon()

        async def compensate(self, ctx: AegisContext) -> None:
            raise AssertionError("not undone live: its success was never written")

    lose = LoseTheDisk()
    journal = lose.journal = SqliteJournal(path, steps=[Act(world, "A"), lose])
    with pytest.raises(JournalError, match="the journal is closed"):
        await WorkflowEngine(journal=journal).execute_saga([Act(world, "A"), lose])
    assert world.live != {}
    assert world.undos == {}
    async with SqliteJournal(path, steps=[Act(world, "A")]) as restarted:
        (run,) = await WorkflowEngine(journal=restarted).recover()
    assert [outline(e) for e in run.events][-3:] == [
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
    assert world.live == {}


async def test_a_journal_failing_during_recovery_raises_its_error_and_the_run_stays(tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    class LoseTheDiskOnUndo:
        name = "A"
        journal: SqliteJournal | None = None

        async def execute(self, ctx: AegisContext) -> None: ...

        async def compensate(self, ctx: AegisContext) -> None:
            assert self.journal is not None
            self.journal.abandon()

    step = LoseTheDiskOnUndo()
    journal = CrashingJournal(SqliteJournal(path, steps=[step]), 5)
    with pytest.raises(Crash):  # 0 start, 1-2 A succeeded, 3-4 Quiet, 5 commit: dies there
        await WorkflowEngine(journal=journal).run_saga([step, Quiet()])
    restarted = step.journal = SqliteJournal(path, steps=[step])
    with pytest.raises(JournalError, match="the journal is closed"):
        await WorkflowEngine(journal=restarted).recover()
    assert [r.status for r in read_runs(path)] == [SagaStatus.RUNNING]


async def test_an_empty_file_is_refused_not_set_up(tmp_path: Path) -> None:
    # A writer sets a new journal up under another name before linking it in place, so it never
    # leaves an empty one: an empty file was truncated or put there (tests/test_journal_trust.py).
    path = tmp_path / "j.db"
    path.touch(mode=0o600)
    with pytest.raises(JournalCorrupt, match=r"is empty \(0 bytes\)"):
        await SqliteJournal(path).open()
    assert path.stat().st_size == 0


# Regression guard: the writer lock holds a journal opened through a symlink to its target.
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
