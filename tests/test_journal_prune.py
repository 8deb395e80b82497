"""``aegis-nb runs --prune BEFORE`` deletes finished runs last updated before a date, never unfinished ones.

Committed, rolled-back and stuck runs older than the date go, with every event of theirs; a run a
crash left unfinished stays however old it is, and so do runs that finished since. The command says
what it removed as ``aegis-nb runs`` lists runs, and what is left; ``--dry-run`` says the same and
changes nothing. It runs beside a live writer that keeps starting and finishing runs. A date that is
not one, or options that do not go together, are refused in one line before the journal is opened.
"""

from __future__ import annotations

import datetime
import sqlite3
from pathlib import Path

import anyio
import pytest

from aegis_nb import AegisContext, WorkflowEngine
from aegis_nb.kernel.errors import SagaCompensationFailed, SagaRolledBack
from aegis_nb.saga.durable import SqliteJournal, prune_runs, read_run, read_runs
from aegis_nb.saga.durable import store as journal_store
from aegis_nb.saga.durable.runs import parse_instant
from aegis_nb.saga.retry import RetryPolicy
from tests.durable_support import Crash, CrashingJournal


class Book:
    """A step that succeeds and undoes itself."""

    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Decline:
    """A step that fails: the saga rolls back."""

    async def execute(self, ctx: AegisContext) -> None:
        raise RuntimeError("card declined")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Stubborn:
    """A step whose undo always fails: a later failure leaves the saga stuck."""

    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        raise RuntimeError("cannot cancel")


def utc(text: str) -> float:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC).timestamp()


def set_time(path: Path, run_id: str, when: str) -> None:
    """Date a run as if it had been written then (the journal stamps rows with the wall clock)."""
    db = sqlite3.connect(path)
    with db:
        db.execute(
            "UPDATE runs SET created = ?, updated = ? WHERE run_id = ?", (utc(when), utc(when), run_id)
        )
    db.close()


async def write_runs(path: Path, dated: dict[str, str]) -> None:
    """One run of each final status and one a crash left unfinished, dated as `dated` says."""
    async with SqliteJournal(path) as journal:
        engine = WorkflowEngine(compensation_retry=RetryPolicy(attempts=1), journal=journal)
        sagas = {
            "old-commit": [Book(), Book()],
            "old-rollback": [Book(), Decline()],
            "old-stuck": [Stubborn(), Decline()],
            "new-commit": [Book()],
        }
        outcomes = [
            type((await engine.run_saga(saga, name="trip", run_id=run_id)).error)
            for run_id, saga in sagas.items()
        ]
        assert outcomes == [type(None), SagaRolledBack, SagaCompensationFailed, type(None)]
    # Killed at its fourth event, as its second step starts: it stays running, its first step done.
    crashing = WorkflowEngine(journal=CrashingJournal(SqliteJournal(path), 3))
    with pytest.raises(Crash):
        await crashing.run_saga([Book(), Book()], name="trip", run_id="old-unfinished")
    for run_id, when in dated.items():
        set_time(path, run_id, when)


DATED = {
    "old-unfinished": "2026-09-01 06:00:00",
    "old-commit": "2026-10-01 12:00:00",
    "old-rollback": "2026-10-15 08:30:00",
    "old-stuck": "2026-10-20 23:59:59",
    "new-commit": "2026-11-15 09:00:00",
}

REMOVED = [
    "run           saga  status       events  recovered  updated (UTC)",
    "old-commit    trip  committed         6          -  2026-10-01 12:00:00",
    "old-rollback  trip  rolled_back       8          -  2026-10-15 08:30:00",
    "old-stuck     trip  stuck             8          -  2026-10-20 23:59:59",
]


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    anyio.run(write_runs, path, DATED)
    return path


def events_table(path: Path) -> list[tuple[object, ...]]:
    """Every event row with its run id, and every event whose run is gone (there must be none)."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT r.run_id, e.seq, e.body FROM events e LEFT JOIN runs r USING (run_no) ORDER BY e.rowid"
        ).fetchall()
    finally:
        db.close()
    return rows


def test_prune_removes_old_finished_runs_says_which_and_keeps_the_unfinished_one(
    journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = {run_id: read_run(journal, run_id) for run_id in ("old-unfinished", "new-commit")}
    before = events_table(journal)

    assert main_runs(journal, "--prune", "2026-11-01") == 0

    assert capsys.readouterr().out.splitlines() == [
        "removed 3 finished runs last updated before 2026-11-01 00:00:00 UTC:",
        *REMOVED,
        "left 2 runs: 1 running, 1 committed (1 unfinished run never pruned)",
    ]
    assert [run.run_id for run in read_runs(journal)] == ["old-unfinished", "new-commit"]
    assert {run_id: read_run(journal, run_id) for run_id in kept} == kept
    # Exactly the kept runs' rows are left, in their order, and no event outlived its run.
    assert events_table(journal) == [row for row in before if row[0] in kept]


def test_a_dry_run_says_what_it_would_remove_and_changes_nothing(
    journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = events_table(journal), read_runs(journal)

    assert main_runs(journal, "--prune", "2026-11-01", "--dry-run") == 0

    assert capsys.readouterr().out.splitlines() == [
        "would remove 3 finished runs last updated before 2026-11-01 00:00:00 UTC:",
        *REMOVED,
        "would leave 2 runs: 1 running, 1 committed (1 unfinished run never pruned)",
    ]
    assert (events_table(journal), read_runs(journal)) == before


def test_an_unfinished_run_is_kept_however_old_and_a_date_with_an_offset_is_read_as_given(
    journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2026-12-01 01:00 at UTC+02:00 is 2026-11-30 23:00 UTC: after every run.
    assert main_runs(journal, "--prune", "2026-12-01T01:00+02:00") == 0

    out = capsys.readouterr().out.splitlines()
    assert out[0] == "removed 4 finished runs last updated before 2026-11-30 23:00:00 UTC:"
    assert out[-1] == "left 1 run: 1 running (1 unfinished run never pruned)"
    assert [run.run_id for run in read_runs(journal)] == ["old-unfinished"]
    assert main_runs(journal, "--prune", "2026-12-01") == 0
    assert capsys.readouterr().out.splitlines() == [
        "removed no runs: none finished and last updated before 2026-12-01 00:00:00 UTC",
        "left 1 run: 1 running (1 unfinished run never pruned)",
    ]


def test_the_date_is_a_strict_boundary_to_the_second(
    journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_runs(journal, "--prune", "2026-10-20T23:59:59") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:-1] == REMOVED[:3]  # old-stuck was updated at that very second: not before it
    assert out[-1] == "left 3 runs: 1 running, 1 committed, 1 stuck (1 unfinished run never pruned)"


@pytest.mark.parametrize(
    "value",
    ["yesterday", "2026-13-01", "2026-11-31", "01/11/2026", ""],
)
def test_a_date_that_is_not_one_is_refused_before_the_journal_is_opened(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(SystemExit) as exit_info:
        main_runs(missing, "--prune", value)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "aegis-nb runs: error: argument --prune: expected an ISO date or date and time, such as "
        f"2026-11-30, 2026-11-30T18:00 (UTC) or 2026-11-30T18:00+01:00, got {value!r}"
    )
    assert not missing.exists()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (
            ("--dry-run",),
            "aegis-nb runs: --dry-run goes with --prune BEFORE (it shows what would be removed)",
        ),
        (
            ("--prune", "2026-11-01", "--run", "old-commit"),
            "aegis-nb runs: --prune removes runs, --run replays one: give one of them",
        ),
    ],
)
def test_options_that_do_not_go_together_are_refused_and_nothing_is_removed(
    journal: Path, options: tuple[str, ...], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = events_table(journal)
    assert main_runs(journal, *options) == 2
    assert capsys.readouterr() == ("", error + "\n")
    assert events_table(journal) == before


def test_pruning_a_missing_journal_says_so_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.db"
    assert main_runs(missing, "--prune", "2026-11-01") == 2
    assert capsys.readouterr() == ("", f"aegis-nb runs: journal '{missing}': no such journal file\n")
    assert list(tmp_path.iterdir()) == []


def test_parse_instant_reads_dates_times_and_offsets_as_utc_seconds() -> None:
    assert [
        parse_instant(text)
        for text in ("2026-11-30", "2026-11-30T18:00", "2026-11-30 18:00:00Z", "2026-11-30T19:00+01:00")
    ] == [
        utc("2026-11-30 00:00:00"),
        utc("2026-11-30 18:00:00"),
        utc("2026-11-30 18:00:00"),
        utc("2026-11-30 18:00:00"),
    ]


class Gate:
    """A step that waits until the test opens its gate: its run is live while the prune runs.

    Registered with the journal by name (it holds an event, which is no JSON attribute).
    """

    def __init__(self, gate: anyio.Event) -> None:
        self.gate = gate

    async def execute(self, ctx: AegisContext) -> None:
        await self.gate.wait()

    async def compensate(self, ctx: AegisContext) -> None:
        return None


@pytest.mark.anyio
async def test_prune_runs_beside_a_live_writer_that_keeps_writing(
    journal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Chunks of two runs, so the prune's transactions interleave with the writer's commits.
    monkeypatch.setattr(journal_store, "_PRUNE_CHUNK", 2)
    gate = Gate(anyio.Event())
    new = [f"live-{n}" for n in range(20)]
    async with SqliteJournal(journal, steps=[gate]) as writer:
        engine = WorkflowEngine(journal=writer)

        async def run(run_id: str, *steps: object) -> None:
            await engine.run_saga(list(steps), name="trip", run_id=run_id)

        async with anyio.create_task_group() as group:
            group.start_soon(run, "held", Book(), gate)
            for run_id in new:
                group.start_soon(run, run_id, Book(), Book())
            # The old runs were dated before 2026-11-01; every run of this writer is newer.
            pruned = await anyio.to_thread.run_sync(prune_runs, journal, utc("2026-11-01 00:00:00"))
            gate.gate.set()
    assert [run.run_id for run in pruned.removed] == ["old-commit", "old-rollback", "old-stuck"]
    runs = {run.run_id: (run.status.value, run.events) for run in read_runs(journal)}
    assert runs == {
        "old-unfinished": ("running", 3),
        "new-commit": ("committed", 4),
        "held": ("committed", 6),
        **dict.fromkeys(new, ("committed", 6)),
    }
    assert {row[0] for row in events_table(journal)} == set(runs)


def main_runs(path: Path, *options: str) -> int:
    from aegis_nb.cli import main

    return main(["runs", "--journal", str(path), *options])
