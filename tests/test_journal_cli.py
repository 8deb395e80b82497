"""`aegis-nb runs` and `aegis-nb recover` on a real journal file."""

from __future__ import annotations

import os
import re
import resource
import signal
from pathlib import Path

import anyio
import pytest

from aegis_nb import WorkflowEngine
from aegis_nb.cli import main
from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.definition import SagaEntry
from aegis_nb.saga.durable import SqliteJournal, read_runs
from tests.durable_support import Crash, CrashingJournal
from tests.servers.launch import aegis_nb
from tests.test_journal_sqlite import Hold, Note, lines, log

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
