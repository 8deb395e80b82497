"""`aegis-nb runs` and `aegis-nb recover` on a real journal file, and the journal file as a user meets it.

Wrong paths (empty, a folder, a missing file), wrong files (a mock ledger, another application's
database, an empty file), damaged files, a read-only folder, a listing of many runs, which run a
recovery rolled back, and a bad ``module:app``: each is one line on stderr and a usage exit, never a
traceback, and nothing is created or changed.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import sqlite3
from pathlib import Path

import anyio
import pytest

from aegis_nb import WorkflowEngine
from aegis_nb.cli import main
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.mock.ledger import APPLICATION_ID as LEDGER_ID
from aegis_nb.mock.ledger import Ledger
from aegis_nb.saga.definition import SagaEntry
from aegis_nb.saga.durable import JournalCorrupt, JournalUnavailable, SqliteJournal, read_runs
from aegis_nb.saga.durable.runs import runs_table
from aegis_nb.saga.durable.sqlitefile import LEDGER_APPLICATION_ID
from aegis_nb.saga.durable.store import RunInfo
from tests.conftest import require
from tests.durable_support import Crash, CrashingJournal
from tests.servers.launch import aegis_nb
from tests.test_journal_sqlite import Hold, Never, Note, chattr, file_digest, lines, log

ENGINE = WorkflowEngine(journal=SqliteJournal("never-opened.db", allow_modules=["tests.test_journal_sqlite"]))
"""The "app" `aegis-nb recover` loads: its steps are found by import path in the module its journal
allows (the journal's own file is never opened)."""


def crashed_journal(path: Path, logfile: Path) -> None:
    """One committed run ("done"), and one ("half") killed as its last step's success was being written."""

    async def scenario() -> None:
        saga: list[SagaEntry] = [(Note(), (str(logfile),), {}), (Hold(1), (str(logfile),), {})]
        async with SqliteJournal(path) as journal:
            await WorkflowEngine(journal=journal).run_saga(saga, name="trip", run_id="done")
        with pytest.raises(Crash):
            # 0 start, 1-2 Note, 3 Hold started (in doubt, so synced), 4 Hold succeeded (rides along
            # with the commit), 5 commit: dies there, so the journal ends at Hold's start.
            await WorkflowEngine(journal=CrashingJournal(SqliteJournal(path), 5)).run_saga(
                saga, name="trip", run_id="half"
            )

    anyio.run(scenario)


def table(text: str) -> list[list[str]]:
    """The listing without its last column (wall-clock times) and its closing count of runs."""
    return [line.split()[:-2] for line in text.splitlines()[:-1]]


def test_recover_rolls_back_the_unfinished_run_and_runs_lists_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, logfile = tmp_path / "j.db", tmp_path / "log"
    crashed_journal(path, logfile)
    assert main(["runs", "--journal", str(path)]) == 0
    assert table(capsys.readouterr().out) == [
        ["run", "saga", "status", "events", "recovered"],
        ["done", "trip", "committed", "6", "-"],
        ["half", "trip", "running", "4", "-"],
    ]

    assert main(["recover", "--journal", str(path), "tests.test_journal_cli:ENGINE"]) == 0
    assert capsys.readouterr().out.splitlines()[:5] == [
        "[half]   x  Hold interrupted: the process running the saga stopped before the run finished (0.0 ms)",
        "[half]   <~ Hold.compensate()",
        "[half]   ~> Hold undone (" + capsys_ms(path, "half", 6),
        "[half]   <~ Note.compensate()",
        "[half]   ~> Note undone (" + capsys_ms(path, "half", 8),
    ]
    assert lines(logfile)[-2:] == ["release 1 half/1", "unnote half/0 noted=True"]

    assert main(["runs", "--journal", str(path)]) == 0
    assert table(capsys.readouterr().out)[1:] == [
        ["done", "trip", "committed", "6", "-"],
        ["half", "trip", "rolled_back", "10", "1x"],
    ]
    assert main(["recover", "--journal", str(path), "tests.test_journal_cli:ENGINE"]) == 0
    assert capsys.readouterr().out == "recovered 0 run(s): 0 rolled back, 0 stuck; 0 left unfinished\n"


def capsys_ms(path: Path, run_id: str, seq: int) -> str:
    from aegis_nb.saga.durable import read_run

    event = read_run(path, run_id).events[seq]
    return f"{event.duration * 1000:.1f} ms)"  # type: ignore[union-attr]


def test_runs_replays_one_run_event_by_event(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "j.db"
    crashed_journal(path, tmp_path / "log")
    assert main(["runs", "--journal", str(path), "--run", "half"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in out] == [
        "saga trip started: Note -> Hold",
        "  -> Note.execute()",
        "  <- Note ok",
        "  -> Hold.execute()",
    ]


def test_runs_on_a_missing_journal_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.db"
    assert main(["runs", "--journal", str(path)]) == 2
    assert capsys.readouterr().err == f"aegis-nb runs: journal {str(path)!r}: no such journal file\n"
    assert not path.exists()


def test_recover_refuses_a_journal_another_process_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.db"
    crashed_journal(path, tmp_path / "log")

    async def hold_and_recover() -> int:
        async with SqliteJournal(path):
            return await anyio.to_thread.run_sync(
                main, ["recover", "--journal", str(path), "tests.test_journal_cli:ENGINE"]
            )

    assert anyio.run(hold_and_recover) == 2
    assert capsys.readouterr().err == (
        f"aegis-nb recover: journal {str(path)!r}: another process holds {path}.lock\n"
    )
    assert [r.status.value for r in read_runs(path)] == ["committed", "running"]


class FillTheDisk:
    """Undoing it leaves its process no byte more to write, as when the disk fills up mid-recovery.

    Only where ``FILL_THE_DISK=1`` (a child process): a later recovery in this one undoes it as usual.
    """

    in_doubt = True  # its start is synced, so the crash below leaves it owed a compensation

    async def execute(self, ctx: AegisContext, logfile: str) -> None:
        log(logfile, f"fill {ctx.idempotency_key}")

    async def compensate(self, ctx: AegisContext, logfile: str) -> None:
        log(logfile, f"unfill {ctx.idempotency_key}")
        if os.environ.get("FILL_THE_DISK") == "1":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))


def test_recover_stopped_part_way_by_its_journal_exits_1_and_the_next_recover_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a refusal (2): recovery had begun. What it undid stays undone; the rest waits on disk."""
    path, logfile = tmp_path / "j.db", tmp_path / "log"

    async def crash() -> None:
        saga: list[SagaEntry] = [(Note(), (str(logfile),), {}), (FillTheDisk(), (str(logfile),), {})]
        # 0 start, 1-2 Note, 3 FillTheDisk started (synced), 4-5: dies at the commit
        with pytest.raises(Crash):
            await WorkflowEngine(journal=CrashingJournal(SqliteJournal(path), 5)).run_saga(
                saga, name="trip", run_id="half"
            )

    anyio.run(crash)
    child = aegis_nb("recover", "--journal", str(path), "tests.test_journal_cli:ENGINE", FILL_THE_DISK="1")
    assert (child.returncode, child.stderr, child.stdout.splitlines()) == (
        1,
        f"aegis-nb recover: stopped part-way: journal {str(path)!r}: could not write the journal "
        "(disk I/O error)\n",
        [
            "[half]   x  FillTheDisk interrupted: the process running the saga stopped before the run "
            "finished (0.0 ms)",
            "[half]   <~ FillTheDisk.compensate()",
        ],
    )
    assert lines(logfile) == ["note half/0", "fill half/1", "unfill half/1"]
    assert [r.status.value for r in read_runs(path)] == ["compensating"]  # unfinished, owed its rollback

    assert main(["recover", "--journal", str(path), "tests.test_journal_cli:ENGINE"]) == 0
    assert re.sub(r"\d+\.\d ms", "_ ms", capsys.readouterr().out).splitlines() == [
        "[half]   <~ FillTheDisk.compensate()",  # again: whether its first run ended is not on disk
        "[half]   ~> FillTheDisk undone (_ ms)",
        "[half]   <~ Note.compensate()",
        "[half]   ~> Note undone (_ ms)",
        "[half] saga trip rolled back in _ ms: the process running the saga stopped before the run "
        "finished — rolled back: FillTheDisk, Note",
        "recovered 1 run(s): 1 rolled back, 0 stuck; 0 left unfinished",
    ]
    assert lines(logfile)[3:] == ["unfill half/1", "unnote half/0 noted=True"]
    assert [r.status.value for r in read_runs(path)] == ["rolled_back"]


# -- the journal file as a user meets it: wrong paths, wrong files, damaged files ------------------


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


# Regression guard: an empty --journal is refused by name, not taken for the current folder.
@pytest.mark.parametrize("command", [["runs"], ["recover", "tests.test_journal_cli:ENGINE"]])
def test_an_empty_journal_option_is_refused_by_name_not_as_the_current_folder(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, *command, "--journal", "")
    assert (status, out) == (2, "")
    assert err == f"aegis-nb {command[0]}: bad --journal: empty path (name the journal file)\n"


# Regression guard: a folder given as the journal is called a folder, and nothing is created in it.
@pytest.mark.parametrize("command", [["runs"], ["recover", "tests.test_journal_cli:ENGINE"]])
def test_a_folder_given_as_the_journal_is_called_a_folder(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, *command, "--journal", str(tmp_path))
    assert (status, out) == (2, "")
    assert err == (
        f"aegis-nb {command[0]}: journal {str(tmp_path)!r}: is a directory, not a journal file: "
        "name the file in it\n"
    )
    assert os.listdir(tmp_path) == []


# Regression guard: the library (read_runs, SqliteJournal) names an empty path and a folder alike.
@pytest.mark.anyio
async def test_the_library_names_an_empty_path_and_a_folder_too(tmp_path: Path) -> None:
    with pytest.raises(JournalUnavailable) as caught:
        read_runs("")
    assert str(caught.value) == "journal '': empty path: name the journal file"
    with pytest.raises(ValueError, match="the journal path is empty"):
        SqliteJournal("")
    with pytest.raises(JournalUnavailable) as caught:
        await WorkflowEngine(journal=SqliteJournal(tmp_path)).execute_saga([Never()])
    assert (
        str(caught.value)
        == f"journal {str(tmp_path)!r}: is a directory, not a journal file: name the file in it"
    )


# Regression guard: an empty --run is refused, not taken for no filter.
def test_an_empty_run_id_is_refused_rather_than_listing_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.db"
    crashed_journal(path, tmp_path / "log")
    assert cli(capsys, "runs", "--journal", str(path), "--run", "") == (
        2,
        "",
        "aegis-nb runs: bad --run: empty run id (leave --run out to list every run)\n",
    )


# Regression guard: an unknown --run says how to list the runs (the path quoted).
def test_an_unknown_run_id_says_how_to_list_the_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "my runs.db"
    crashed_journal(path, tmp_path / "log")
    assert cli(capsys, "runs", "--journal", str(path), "--run", "nope") == (
        2,
        "",
        f"aegis-nb runs: no run 'nope' in {path} (aegis-nb runs --journal '{path}' lists them)\n",
    )


# Regression guard: the journal knows the mock ledger's application id.
def test_the_ledger_application_id_is_the_mock_ledgers() -> None:
    assert LEDGER_APPLICATION_ID == LEDGER_ID


# Regression guard: a mock ledger given as the journal is named a ledger and left untouched.
@pytest.mark.parametrize("command", [["runs"], ["recover", "tests.test_journal_cli:ENGINE"]])
def test_a_mock_ledger_given_as_the_journal_is_called_a_ledger(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    before = file_digest(path)
    status, out, err = cli(capsys, *command, "--journal", str(path))
    assert (status, out) == (2, "")
    assert err == (
        f"aegis-nb {command[0]}: journal {str(path)!r}: not an aegis_nb journal: "
        "it is an aegis-nb mock ledger (aegis-nb mock --ledger)\n"
    )
    assert file_digest(path) == before


# Regression guard: another application's database is named by its tables.
def test_another_applications_database_is_named_by_its_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT)")
        db.execute("INSERT INTO orders DEFAULT VALUES")
    db.close()
    assert cli(capsys, "runs", "--journal", str(path)) == (
        2,
        "",
        f"aegis-nb runs: journal {str(path)!r}: not an aegis_nb journal: "
        "it holds another application's tables (orders)\n",
    )


# Regression guard: an empty file is refused, not listed as a journal with no runs.
def test_an_empty_file_is_refused_not_listed_as_no_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A writer never leaves an empty file (tests/test_journal_trust.py): it was truncated or put there.
    path = tmp_path / "j.db"
    path.touch()
    for command in (["runs"], ["runs", "--run", "r1"]):
        assert cli(capsys, *command, "--journal", str(path)) == (
            2,
            "",
            f"aegis-nb runs: journal {str(path)!r}: is empty (0 bytes), which a journal never is: "
            "it was truncated or put there; delete it to start a new journal\n",
        )


def damage_the_run_index(path: Path) -> None:
    """Overwrite the page of the index that finds a run by its id (the table itself stays readable)."""
    with sqlite3.connect(path) as db:
        (page,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_runs_1'"
        ).fetchone()
        (size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    with open(path, "r+b") as file:
        file.seek((page - 1) * size + 8)
        file.write(b"X" * 64)


# Regression guard: a damaged journal is one line saying so, not "no run" or a traceback.
def test_a_damaged_journal_is_reported_as_damaged_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.db"
    crashed_journal(path, tmp_path / "log")
    damage_the_run_index(path)
    # The run is listed (the table is whole), so "no run 'half'" would be a lie: the index is damaged.
    for command in (["runs", "--run", "half"], ["recover", "tests.test_journal_cli:ENGINE"]):
        status, out, err = cli(capsys, command[0], "--journal", str(path), *command[1:])
        assert (status, out) == (2, "")
        assert err.startswith(f"aegis-nb {command[0]}: journal {str(path)!r}: damaged: ")
        assert err.count("\n") == 1
        assert "***" not in err
    with pytest.raises(JournalCorrupt):
        anyio.run(lambda: WorkflowEngine(journal=SqliteJournal(path)).recover())


# Regression guard: a journal in a folder this user cannot write can still be listed.
def test_a_journal_in_a_read_only_folder_can_still_be_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "j.db"
    crashed_journal(path, tmp_path / "log")
    # root ignores permission bits; an immutable folder it cannot write
    require(chattr("+i", folder), "chattr +i (an immutable folder)")
    try:
        status, out, err = cli(capsys, "runs", "--journal", str(path))
    finally:
        assert chattr("-i", folder)
    assert (status, err) == (0, "")
    assert table(out)[1:3] == [["done", "trip", "committed", "6", "-"], ["half", "trip", "running", "4", "-"]]


# Regression guard: the listing fits long ids and names on one line each and counts runs by status.
def test_the_listing_fits_long_run_ids_and_names_and_counts_the_runs_by_status() -> None:
    def info(run_id: str, saga: str, status: SagaStatus, events: int, recoveries: int = 0) -> RunInfo:
        return RunInfo(run_id, saga, status, events, 0.0, 86_400.0 + 3_723, recoveries)

    runs = [
        info("order-2026-11-30T12:00:00Z-retry-3", "book-a-business-trip-to-lisbon", SagaStatus.COMMITTED, 8),
        info("r2", "trip\nwith a newline", SagaStatus.ROLLED_BACK, 12, 1),
        info("r3", "trip", SagaStatus.RUNNING, 3),
    ]
    assert runs_table(runs) == [
        "run                                 saga                            status       events  recovered"
        "  updated (UTC)",
        "order-2026-11-30T12:00:00Z-retry-3  book-a-business-trip-to-lisbon  committed         8          -"
        "  1970-01-02 01:02:03",
        "r2                                  trip with a newline             rolled_back      12         1x"
        "  1970-01-02 01:02:03",
        "r3                                  trip                            running           3          -"
        "  1970-01-02 01:02:03",
        "3 runs: 1 running, 1 committed, 1 rolled_back; 1 unfinished: running now, or left by a crash"
        " (aegis-nb recover rolls those back)",
    ]


def two_crashed_runs(path: Path, logfile: Path) -> None:
    """Runs "a" and "b", each killed as its last step's success was being written."""

    async def scenario() -> None:
        for run_id in ("a", "b"):
            saga: list[SagaEntry] = [(Note(), (str(logfile),), {}), (Hold(1), (str(logfile),), {})]
            with pytest.raises(Crash):
                await WorkflowEngine(journal=CrashingJournal(SqliteJournal(path), 5)).run_saga(
                    saga, name="trip", run_id=run_id
                )

    anyio.run(scenario)


# Regression guard: recover prefixes each line with its run, so concurrent runs can be told apart.
def test_recover_names_the_run_on_every_line_so_concurrent_runs_can_be_told_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.db"
    two_crashed_runs(path, tmp_path / "log")
    status, out, err = cli(capsys, "recover", "--journal", str(path), "tests.test_journal_cli:ENGINE")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    for run_id in "ab":
        said = [line.split(" (")[0] for line in lines if line.startswith(f"[{run_id}] ")]
        assert said[:5] == [
            f"[{run_id}]   x  Hold interrupted: the process running the saga stopped before the run finished",
            f"[{run_id}]   <~ Hold.compensate()",
            f"[{run_id}]   ~> Hold undone",
            f"[{run_id}]   <~ Note.compensate()",
            f"[{run_id}]   ~> Note undone",
        ]
        assert re.fullmatch(
            rf"\[{run_id}\] saga trip rolled back in [0-9.]+ ms: the process running the saga stopped "
            "before the run finished — rolled back: Hold, Note",
            said[5],
        )
        assert len(said) == 6
    assert lines[-1] == "recovered 2 run(s): 2 rolled back, 0 stuck; 0 left unfinished"
    assert len(lines) == 13


# -- aegis-nb recover on a bad journal or app ------------------------------------------------------


def empty_journal(path: Path) -> Path:
    async def create() -> None:
        async with SqliteJournal(path):
            pass

    anyio.run(create)
    return path


# Regression guard: recover on a mistyped journal path says so and creates no file.
def test_recover_on_a_missing_journal_says_so_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "jounral.db"
    assert main(["recover", "--journal", str(path), "tests.test_journal_cli:ENGINE"]) == 2
    assert capsys.readouterr() == ("", f"aegis-nb recover: journal {str(path)!r}: no such journal file\n")
    assert list(tmp_path.iterdir()) == []


# Regression guard: a module:app factory that needs arguments is one line, not a traceback.
def test_recover_with_a_factory_that_needs_arguments_fails_in_one_line(tmp_path: Path) -> None:
    journal = empty_journal(tmp_path / "j.db")
    done = aegis_nb("recover", "--journal", str(journal), "aegis_nb.mock.travel:travel_saga")
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "aegis-nb recover: 'aegis_nb.mock.travel:travel_saga' is not an AegisMCP app or WorkflowEngine,"
        " nor a factory of one: travel_saga() missing 3 required positional arguments: 'session',"
        " 'destination', and 'nights'\n",
    )


# Regression guard: recover loads module:app as serve does, with the same one-line errors.
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "aegis-nb recover: expected module:app, got 'no_colon'"),
        (
            "no_such_module_xyz:app",
            "aegis-nb recover: cannot import 'no_such_module_xyz': No module named 'no_such_module_xyz'",
        ),
        ("json:nothing", "aegis-nb recover: module 'json' has no attribute 'nothing'"),
        (
            "json:JSONDecoder",
            "aegis-nb recover: 'json:JSONDecoder' is a JSONDecoder, not an AegisMCP app or WorkflowEngine",
        ),
        (
            "json:dumps",
            "aegis-nb recover: 'json:dumps' is not an AegisMCP app or WorkflowEngine, nor a factory of one:"
            " dumps() missing 1 required positional argument: 'obj'",
        ),
    ],
)
def test_recover_loads_its_app_as_serve_does(
    tmp_path: Path, spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = empty_journal(tmp_path / "j.db")
    assert main(["recover", "--journal", str(journal), spec]) == 2
    assert capsys.readouterr() == ("", message + "\n")
