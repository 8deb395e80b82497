"""A journal is opened by one name: a second name (a hard link) is refused, so no run is undone twice.

SQLite keeps a database's write-ahead log and its index beside the name it was opened by
(``<name>-wal``, ``<name>-shm``). Two names of one file are two logs of one journal: each opener
misses what the other committed, and a writer lock taken per name lets both in. So two recoverers,
one through a hard link, both compensated the same runs (issue 25, case 11). Writers, readers and
pruners alike refuse a journal file with more than one name; a symlink is not a second name
(SQLite and the writer lock both follow it to the file).

The crashed writer runs in a child process (`WRITER`): it leaves `UNFINISHED` runs each with one
step done, and what it wrote checkpointed into the file, as SQLite's automatic checkpoint does
every thousand pages. The ledger is the steps' log file: one ``book`` line per effect, one
``cancel`` line per compensation.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import anyio
import pytest

from aegis_nb import AegisContext, WorkflowEngine
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.durable import (
    JournalError,
    JournalUnavailable,
    SqliteJournal,
    prune_runs,
    read_runs,
)
from tests.servers.launch import python_child

pytestmark = pytest.mark.anyio

UNFINISHED = 3
COMMITTED = 2


def log(path: str, line: str) -> None:
    with open(path, "a") as file:
        file.write(line + "\n")


def count_lines(path: str) -> int:
    with open(path) as file:
        return len(file.readlines())


class Book:
    """Books (a ``book`` line in the ledger); its compensation cancels (a ``cancel`` line)."""

    async def execute(self, ctx: AegisContext, ledger: str) -> None:
        log(ledger, f"book {ctx.idempotency_key}")

    async def compensate(self, ctx: AegisContext, ledger: str) -> None:
        log(ledger, f"cancel {ctx.idempotency_key}")


class Crash:
    """The writer dies here, once every unfinished run has reached it, its journal checkpointed."""

    async def execute(self, ctx: AegisContext, journal: str, arrived: str) -> None:
        log(arrived, str(ctx.idempotency_key))
        if count_lines(arrived) < UNFINISHED:
            await anyio.sleep_forever()  # the last one to arrive ends the process
        with sqlite3.connect(journal) as db:
            db.execute("PRAGMA wal_checkpoint(FULL)")
        os._exit(0)

    async def compensate(self, ctx: AegisContext, journal: str, arrived: str) -> None:
        raise AssertionError("a step that never finished is not compensated")


WRITER = f"""
import sys, anyio
from aegis_nb import AegisContext, WorkflowEngine
from aegis_nb.saga.durable import SqliteJournal
from tests.test_journal_one_name import Book, Crash

journal, ledger, arrived = sys.argv[1:]

async def main():
    async with SqliteJournal(journal) as durable:
        engine = WorkflowEngine(journal=durable)
        for _ in range({COMMITTED}):
            await engine.execute_saga([(Book(), (ledger,), {{}})], AegisContext())
        async with anyio.create_task_group() as group:
            for _ in range({UNFINISHED}):
                saga = [(Book(), (ledger,), {{}}), (Crash(), (journal, arrived), {{}})]
                group.start_soon(engine.execute_saga, saga, AegisContext())

anyio.run(main)
"""


def crashed_writer(folder: Path) -> tuple[Path, Path]:
    """A journal a writer died on, `UNFINISHED` runs in flight, and its ledger."""
    journal, ledger = folder / "j.db", folder / "ledger"
    child = python_child("-c", WRITER, str(journal), str(ledger), str(folder / "arrived"), check=False)
    assert (child.returncode, child.stderr) == (0, "")
    return journal, ledger


def effects(ledger: Path) -> tuple[int, int]:
    """(effects made, compensations made) per the ledger."""
    lines = ledger.read_text().split()
    return lines.count("book"), lines.count("cancel")


async def recover(path: Path) -> str:
    """Recover the journal at `path`: the statuses of the runs recovered, or the error refusing it."""
    try:
        async with SqliteJournal(path, steps=[Book(), Crash()]) as journal:
            runs = await WorkflowEngine(journal=journal).recover()
    except JournalError as exc:
        return f"{type(exc).__name__}: {exc}"
    return " ".join(sorted(run.status.value for run in runs))


async def test_two_recoverers_through_a_hard_link_compensate_each_step_once(tmp_path: Path) -> None:
    journal, ledger = crashed_writer(tmp_path)
    assert effects(ledger) == (COMMITTED + UNFINISHED, 0)
    link = tmp_path / "link.db"
    os.link(journal, link)
    outcomes: dict[str, str] = {}

    async def recoverer(path: Path) -> None:
        outcomes[path.name] = await recover(path)

    async with anyio.create_task_group() as group:
        group.start_soon(recoverer, journal)
        group.start_soon(recoverer, link)
    refusal = (
        "JournalUnavailable: journal {!r}: has 2 names (hard links): SQLite keeps a journal's"
        " write-ahead log beside the name it is opened by, so each name would show another journal;"
        " remove the other names and open it by one (a symlink to it is fine)"
    )
    assert outcomes == {"j.db": refusal.format(str(journal)), "link.db": refusal.format(str(link))}
    assert effects(ledger) == (COMMITTED + UNFINISHED, 0)

    link.unlink()
    symlink = tmp_path / "symlink.db"
    symlink.symlink_to(journal)
    async with SqliteJournal(journal, steps=[Book(), Crash()]) as writer:
        assert (
            await recover(symlink)
            == f"JournalInUse: journal {str(symlink)!r}: another process holds {journal}.lock"
        )
        recovered = await WorkflowEngine(journal=writer).recover()
    assert [run.status for run in recovered] == [SagaStatus.ROLLED_BACK] * UNFINISHED
    assert effects(ledger) == (COMMITTED + UNFINISHED, UNFINISHED)  # one compensation per step
    assert await recover(symlink) == ""  # nothing left to recover
    assert effects(ledger) == (COMMITTED + UNFINISHED, UNFINISHED)


async def test_readers_and_pruners_refuse_a_second_name_too(tmp_path: Path) -> None:
    journal, _ = crashed_writer(tmp_path)
    link = tmp_path / "link.db"
    os.link(journal, link)
    for path in (journal, link):
        message = (
            f"journal {str(path)!r}: has 2 names (hard links): SQLite keeps a journal's write-ahead"
            " log beside the name it is opened by, so each name would show another journal; remove"
            " the other names and open it by one (a symlink to it is fine)"
        )
        with pytest.raises(JournalUnavailable) as listing:
            read_runs(path)
        with pytest.raises(JournalUnavailable) as pruning:
            prune_runs(path, 0.0)
        assert (str(listing.value), str(pruning.value)) == (message, message)
    link.unlink()
    assert [run.status for run in read_runs(journal)] == [SagaStatus.COMMITTED] * COMMITTED + [
        SagaStatus.RUNNING
    ] * UNFINISHED


async def test_a_journal_being_created_is_not_taken_for_a_second_name(tmp_path: Path) -> None:
    # A new journal is set up under a staging name and then linked in place: between the link and
    # the removal of the staging name, an opener sees two names, one of them the creator's.
    journal, ledger = crashed_writer(tmp_path)
    os.link(journal, tmp_path / "j.db.new-0a1b2c3d")
    assert len(read_runs(journal)) == COMMITTED + UNFINISHED
    assert await recover(journal) == " ".join([SagaStatus.ROLLED_BACK.value] * UNFINISHED)
    assert effects(ledger) == (COMMITTED + UNFINISHED, UNFINISHED)
