"""`aegis-nb runs` / `recover` and the journal file as a user meets them: wrong paths, wrong files,
damaged files, a read-only folder, a listing of many runs, and which run a recovery rolled back."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import anyio
import pytest

from aegis_nb import WorkflowEngine
from aegis_nb.cli import main
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
from tests.test_journal_cli import crashed_journal, table
from tests.test_journal_sqlite import Hold, Never, Note, chattr, file_digest

ENGINE = WorkflowEngine(journal=SqliteJournal("never-opened.db", allow_modules=["tests.test_journal_sqlite"]))
"""The "app" `aegis-nb recover` loads (its steps are found by import path in the module it allows)."""


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


# -- the --journal and --run options ----------------------------------------------------------------


@pytest.mark.parametrize("command", [["runs"], ["recover", "tests.test_review_production_paths:ENGINE"]])
def test_an_empty_journal_option_is_refused_by_name_not_as_the_current_folder(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, *command, "--journal", "")
    assert (status, out) == (2, "")
    assert err == f"aegis-nb {command[0]}: bad --journal: empty path (name the journal file)\n"


@pytest.mark.parametrize("command", [["runs"], ["recover", "tests.test_review_production_paths:ENGINE"]])
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


# -- files that are not journals ----------------------------------------------------------------------


def test_the_ledger_application_id_is_the_mock_ledgers() -> None:
    assert LEDGER_APPLICATION_ID == LEDGER_ID


@pytest.mark.parametrize("command", [["runs"], ["recover", "tests.test_review_production_paths:ENGINE"]])
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


def test_a_damaged_journal_is_reported_as_damaged_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.db"
    crashed_journal(path, tmp_path / "log")
    damage_the_run_index(path)
    # The run is listed (the table is whole), so "no run 'half'" would be a lie: the index is damaged.
    for command in (["runs", "--run", "half"], ["recover", "tests.test_review_production_paths:ENGINE"]):
        status, out, err = cli(capsys, command[0], "--journal", str(path), *command[1:])
        assert (status, out) == (2, "")
        assert err.startswith(f"aegis-nb {command[0]}: journal {str(path)!r}: damaged: ")
        assert err.count("\n") == 1
        assert "***" not in err
    with pytest.raises(JournalCorrupt):
        anyio.run(lambda: WorkflowEngine(journal=SqliteJournal(path)).recover())


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


# -- what the listing and the recovery say -----------------------------------------------------------


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


def test_recover_names_the_run_on_every_line_so_concurrent_runs_can_be_told_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.db"
    two_crashed_runs(path, tmp_path / "log")
    status, out, err = cli(
        capsys, "recover", "--journal", str(path), "tests.test_review_production_paths:ENGINE"
    )
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
