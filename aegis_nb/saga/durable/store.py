"""The journal file: one SQLite database in WAL mode, opened, checked, written and read synchronously.

The async `SqliteJournal` calls this on the event loop (a lone run) or from a worker thread;
`aegis-nb runs` calls it directly. Each write is one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``),
synced or not, as the caller asks: ``synchronous=FULL`` makes the commit one fdatasync of the
write-ahead log (it then survives a power loss, with every earlier commit), ``synchronous=NORMAL``
leaves it in the operating system's page cache (it survives the process being killed, not a power
loss). Either way SQLite keeps the file consistent: a power loss can only lose a tail of unsynced
commits. The file is created with mode 0600 (SQLite gives its ``-wal`` and ``-shm`` files the same
mode). A writer holds an exclusive lock on ``<file>.lock`` for as long as it is open, so a second
process cannot recover runs that are still live in the first.

Opening checks before writing anything: a file that is not an aegis_nb journal, is damaged or
truncated, or was written by a newer schema raises a `JournalError` and is left exactly as it was.
So does a journal others could have written (group- or world-writable, another user's, in a folder
others may write into) or an empty file (`sqlitefile.check_trusted`): reading it too, since what
``aegis-nb runs`` shows of it could be anyone's.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.durable.errors import JournalCorrupt, JournalError, JournalUnavailable
from aegis_nb.saga.durable.sqlitefile import (
    APPLICATION_ID,
    FILE_SCHEMA,
    check_folders,
    check_header,
    check_integrity,
    check_trusted,
    connect,
    create_file,
    lock_writer,
    pragma,
    preallocate_log,
    quote,
    run_setup,
    sqlite_error,
    user_version,
)

# Events are stored in the order they are written, with an index to read one run's events back: a
# batch then appends to a few pages at the end of the file. Keyed by a random run id instead, the
# events of a hundred concurrent runs land on a hundred pages, all of which each commit rewrites.
_SCHEMA = f"""
CREATE TABLE runs (
    run_no INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    saga TEXT NOT NULL,
    status TEXT NOT NULL,
    steps TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    recoveries INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_status ON runs (status, created);
CREATE TABLE events (
    run_no INTEGER NOT NULL REFERENCES runs (run_no),
    seq INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE UNIQUE INDEX events_by_run ON events (run_no, seq);
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {FILE_SCHEMA};
"""

UNFINISHED: tuple[str, ...] = (SagaStatus.RUNNING.value, SagaStatus.COMPENSATING.value)
FINISHED: tuple[str, ...] = tuple(status.value for status in SagaStatus if status.is_final)

_PRUNE_CHUNK = 500
"""Runs deleted per transaction when pruning: a live writer waits for one chunk, not the whole prune."""


# -- rows written in one batch ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run's row: its saga name and the JSON of what recovery needs to rebuild its steps."""

    run_id: str
    saga: str
    steps: str


@dataclass(frozen=True, slots=True)
class EventRow:
    """One encoded event; `status` is the run's new status when this event changes it."""

    run_id: str
    seq: int
    body: str
    status: SagaStatus | None


@dataclass(frozen=True, slots=True)
class StepsRow:
    """A run's step records, rewritten whole: a dynamic saga adds steps as it runs."""

    run_id: str
    steps: str


@dataclass(frozen=True, slots=True)
class RecoveryMark:
    """Count one more recovery of the run (shown by ``aegis-nb runs``)."""

    run_id: str


Row = NewRun | StepsRow | EventRow | RecoveryMark


# -- what reading gives back ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run as listed by ``aegis-nb runs``: status from the journal, times in wall-clock seconds."""

    run_id: str
    saga: str
    status: SagaStatus
    events: int
    created: float
    updated: float
    recoveries: int


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run's row and its encoded events, in order, as read from the file."""

    run_id: str
    saga: str
    status: SagaStatus
    steps: str
    events: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class Pruned:
    """What pruning removed (or, in a dry run, would remove), and how many runs are left, by status."""

    before: float
    dry_run: bool
    removed: tuple[RunInfo, ...]
    left: Mapping[SagaStatus, int]


class JournalFile:
    """An open journal file. Thread-safe: one lock serializes every use of the connection."""

    def __init__(self, path: Path, db: sqlite3.Connection, lock_fd: int | None) -> None:
        self.path = path
        self._db = db
        self._lock_fd = lock_fd
        self._lock = threading.Lock()
        self._synchronous = True  # the connection is opened with synchronous=FULL
        self._empty = False  # read-only, of a database a writer created and died before its schema
        self.commits = 0
        self.syncs = 0

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def open_writer(cls, path: Path) -> JournalFile:
        """Open (creating if missing, mode 0600) for writing, holding the writer lock.

        A journal others could have written, or an empty file, is refused (`check_trusted`)
        before anything is created beside it or opened.
        """
        check_folders(path)  # before anything is created in it
        created = create_file(path, _SCHEMA)
        check_trusted(path, created=created)
        lock_fd = lock_writer(path)
        try:
            db = connect(path, f"file:{quote(path)}?mode=rw")
            try:
                if not created:
                    check_header(path, db)
                    check_integrity(path, db)
                pragma(path, db, "PRAGMA journal_mode=WAL", expect="wal")
                pragma(path, db, "PRAGMA synchronous=FULL")
                if user_version(path, db) == 0:  # an empty database an older version left
                    run_setup(path, db, lambda: db.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;"))
                preallocate_log(path, db)
            except BaseException:
                db.close()
                raise
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(path, db, lock_fd)

    @classmethod
    def open_reader(cls, path: Path) -> JournalFile:
        """Open an existing journal read-only (no lock: a live writer may keep writing).

        Refused like a writer's (`check_trusted`) when others could have written it: listing its runs
        would show their words as the journal's.
        """
        check_trusted(path)
        try:
            db, empty = _open_checked(path, f"file:{quote(path)}?mode=ro")
        except JournalUnavailable:
            # Reading a WAL file takes a `-shm` file beside it, which a read-only folder refuses.
            # Without a `-wal` file no writer has it open (a writer keeps one), so the file is all
            # there is, and SQLite may read it as immutable, creating nothing.
            if os.path.exists(f"{path}-wal"):
                raise
            db, empty = _open_checked(path, f"file:{quote(path)}?mode=ro&immutable=1")
        file = cls(path, db, None)
        file._empty = empty
        return file

    @classmethod
    def open_pruner(cls, path: Path) -> JournalFile:
        """Open an existing journal to delete finished runs, without the writer lock.

        A live writer may hold the lock: it never writes to a finished run again, and SQLite's own
        locking (each side waits up to 5 s for the other's transaction) keeps the two apart. Refused
        like a reader's when others could have written the file.
        """
        check_trusted(path)
        db, empty = _open_checked(path, f"file:{quote(path)}?mode=rw")
        file = cls(path, db, None)
        file._empty = empty
        return file

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    # -- writing ---------------------------------------------------------------------------------

    def write(self, rows: Sequence[Row], sync: bool = True) -> Mapping[str, JournalError]:
        """Write `rows` in one transaction; on failure nothing of them is written.

        With `sync`, the commit is one fdatasync of the log and survives a power loss (so does every
        commit before it); without, it survives the process being killed, not the machine failing.
        A run whose rows break a constraint (an event numbered twice) is left out, its rows rolled
        back to a savepoint, while the others' rows are written: the runs refused so are returned,
        each with its error, so that one run's bad row never fails another's.
        """
        now = time.time()
        with self._lock:
            db = self._db
            try:
                if sync is not self._synchronous:  # applies to the next commit on this connection
                    db.execute("PRAGMA synchronous=FULL" if sync else "PRAGMA synchronous=NORMAL")
                    self._synchronous = sync
                try:
                    self._transaction(lambda: _insert(db, rows, now))
                    refused: dict[str, JournalError] = {}
                except sqlite3.IntegrityError:
                    refused = {}
                    self._transaction(lambda: refused.update(self._insert_each_run(rows, now)))
            except sqlite3.Error as exc:
                raise sqlite_error(self.path, exc, "could not write") from exc
            self.commits += 1
            self.syncs += sync
        return refused

    def _transaction(self, work: Callable[[], object]) -> None:
        """``BEGIN IMMEDIATE``, `work`, ``COMMIT``; rolled back if `work` raises ; caller holds the lock."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            work()
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

    def _insert_each_run(self, rows: Sequence[Row], now: float) -> dict[str, JournalError]:
        """Insert each run's rows under a savepoint of its own; returns the runs that were refused."""
        db = self._db
        by_run: dict[str, list[Row]] = {}
        for row in rows:
            by_run.setdefault(row.run_id, []).append(row)
        refused: dict[str, JournalError] = {}
        for run_id, own in by_run.items():
            db.execute("SAVEPOINT run")
            try:
                _insert(db, own, now)
            except sqlite3.IntegrityError as exc:
                db.execute("ROLLBACK TO run")
                refused[run_id] = JournalUnavailable(
                    self.path, f"refused the events of run {run_id} ({exc}); other runs were written"
                )
            db.execute("RELEASE run")
        return refused

    # -- reading ---------------------------------------------------------------------------------

    def runs(self) -> tuple[RunInfo, ...]:
        """Every run, oldest first."""
        if self._empty:
            return ()
        rows = self._query(
            "SELECT r.run_id, r.saga, r.status, r.created, r.updated, r.recoveries,"
            " (SELECT count(*) FROM events e WHERE e.run_no = r.run_no)"
            " FROM runs r ORDER BY r.created, r.run_id"
        )
        return tuple(
            RunInfo(
                run_id=str(run_id),
                saga=str(saga),
                status=_status(self.path, run_id, status),
                events=int(count),
                created=float(created),
                updated=float(updated),
                recoveries=int(recoveries),
            )
            for run_id, saga, status, created, updated, recoveries, count in rows
        )

    def prune(self, before: float, *, dry_run: bool = False) -> Pruned:
        """Delete the finished runs last updated before `before` (wall-clock seconds), oldest first,
        with their events; return them. Unfinished runs are never touched. `dry_run`: only find them.

        Deleted a chunk per transaction, each run checked again in it, so a live writer is held up
        by one chunk at a time and a run that changed since it was found is left alone.
        """
        if self._empty:
            return Pruned(before, dry_run, (), MappingProxyType({}))
        finals = ", ".join("?" * len(FINISHED))
        found = self._query(
            "SELECT r.run_no, r.run_id, r.saga, r.status, r.created, r.updated, r.recoveries,"
            " (SELECT count(*) FROM events e WHERE e.run_no = r.run_no)"
            f" FROM runs r WHERE r.status IN ({finals}) AND r.updated < ? ORDER BY r.created, r.run_id",
            (*FINISHED, before),
        )
        removed = tuple(
            RunInfo(
                run_id=str(run_id),
                saga=str(saga),
                status=_status(self.path, run_id, status),
                events=int(count),
                created=float(created),
                updated=float(updated),
                recoveries=int(recoveries),
            )
            for _, run_id, saga, status, created, updated, recoveries, count in found
        )
        if not dry_run:
            numbers = [int(row[0]) for row in found]
            for start in range(0, len(numbers), _PRUNE_CHUNK):
                self._delete_runs(numbers[start : start + _PRUNE_CHUNK], before)
        counts = dict(self._query("SELECT status, count(*) FROM runs GROUP BY status"))
        if dry_run:
            for run in removed:
                counts[run.status.value] -= 1
        left = {_status(self.path, "?", status): int(n) for status, n in counts.items() if n > 0}
        return Pruned(before, dry_run, removed, MappingProxyType(left))

    def _delete_runs(self, numbers: Sequence[int], before: float) -> None:
        """Delete these runs and their events, in one transaction, if they are still finished and old."""
        marks = ", ".join("?" * len(numbers))
        finals = ", ".join("?" * len(FINISHED))
        # Checked again: another prune may have deleted a run meanwhile and a new run taken its number.
        still = f"run_no IN ({marks}) AND status IN ({finals}) AND updated < ?"
        params = (*numbers, *FINISHED, before)
        with self._lock:
            db = self._db
            try:
                self._transaction(
                    lambda: (
                        db.execute(
                            f"DELETE FROM events WHERE run_no IN (SELECT run_no FROM runs WHERE {still})",
                            params,
                        ),
                        db.execute(f"DELETE FROM runs WHERE {still}", params),
                    )
                )
            except sqlite3.Error as exc:
                raise sqlite_error(self.path, exc, "could not prune") from exc
            self.commits += 1

    def unfinished(self) -> tuple[StoredRun, ...]:
        """Every run whose last recorded status is not final, with its events, oldest first.

        Read under one hold of the lock, so no write lands between listing the runs and reading
        their events: a run that ends meanwhile must not be read as unfinished with its end in it.
        """
        marks = ", ".join("?" * len(UNFINISHED))
        with self._lock:
            rows = self._execute(
                f"SELECT run_id FROM runs WHERE status IN ({marks}) ORDER BY created, run_id", UNFINISHED
            )
            return tuple(self._read_run(str(run_id)) for (run_id,) in rows)

    def run(self, run_id: str) -> StoredRun:
        """One run's row and events; `KeyError` if the journal has no such run."""
        with self._lock:
            return self._read_run(run_id)

    def _read_run(self, run_id: str) -> StoredRun:
        if self._empty:
            raise KeyError(run_id)
        found = self._execute("SELECT run_no, saga, status, steps FROM runs WHERE run_id = ?", (run_id,))
        if not found:
            check_integrity(self.path, self._db)  # a damaged index finds nothing either: say which
            raise KeyError(run_id)
        run_no, saga, status, steps = found[0]
        events = self._execute("SELECT seq, body FROM events WHERE run_no = ? ORDER BY seq", (run_no,))
        return StoredRun(
            run_id,
            str(saga),
            _status(self.path, run_id, status),
            str(steps),
            tuple((int(seq), str(body)) for seq, body in events),
        )

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._execute(sql, params)

    def _execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Run one query; the caller holds the lock."""
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise sqlite_error(self.path, exc, "could not read") from exc


# -- helpers ----------------------------------------------------------------------------------------


def _insert(db: sqlite3.Connection, rows: Sequence[Row], now: float) -> None:
    """Insert `rows` (new runs, recovery marks, events and the status changes they make)."""
    runs = [(r.run_id, r.saga, SagaStatus.RUNNING.value, r.steps) for r in rows if isinstance(r, NewRun)]
    events = [(r.run_id, r.seq, r.body) for r in rows if isinstance(r, EventRow)]
    statuses = [(r.status.value, r.run_id) for r in rows if isinstance(r, EventRow) and r.status]
    marks = [(r.run_id,) for r in rows if isinstance(r, RecoveryMark)]
    if runs:
        db.executemany(
            "INSERT INTO runs (run_id, saga, status, steps, created, updated)"
            f" VALUES (?, ?, ?, ?, {now!r}, {now!r})",
            runs,
        )
    steps = [(r.steps, r.run_id) for r in rows if isinstance(r, StepsRow)]
    if steps:  # before the events: a step's records reach the file before, or with, its first event
        db.executemany("UPDATE runs SET steps = ? WHERE run_id = ?", steps)
    if marks:
        db.executemany("UPDATE runs SET recoveries = recoveries + 1 WHERE run_id = ?", marks)
    db.executemany(
        "INSERT INTO events (run_no, seq, body) VALUES ((SELECT run_no FROM runs WHERE run_id = ?), ?, ?)",
        events,
    )
    if statuses:
        db.executemany(f"UPDATE runs SET status = ?, updated = {now!r} WHERE run_id = ?", statuses)


def _status(path: Path, run_id: object, value: object) -> SagaStatus:
    try:
        return SagaStatus(value)
    except ValueError:
        raise JournalCorrupt(path, f"unknown status {value!r}", record=f"run {run_id}") from None


def _open_checked(path: Path, uri: str) -> tuple[sqlite3.Connection, bool]:
    """A connection to `uri` whose header `check_header` accepted, and whether the database is empty."""
    db = connect(path, uri)
    try:
        return db, check_header(path, db)
    except BaseException:
        db.close()
        raise


def prune_runs(path: Path | str, before: float, *, dry_run: bool = False) -> Pruned:
    """Delete the journal's finished runs last updated before `before`, oldest first; return them.

    Safe beside a live writer (see `JournalFile.open_pruner`); `dry_run` only finds them.
    """
    if os.fspath(path) == "":  # Path("") is ".": the error would name the current folder
        raise JournalUnavailable(path, "empty path: name the journal file")
    file = JournalFile.open_pruner(Path(path))
    try:
        return file.prune(before, dry_run=dry_run)
    finally:
        file.close()


@contextlib.contextmanager
def reading(path: Path | str) -> Iterator[JournalFile]:
    """``with reading(path) as file:`` a read-only view, closed afterwards."""
    if os.fspath(path) == "":  # Path("") is ".": the error would name the current folder
        raise JournalUnavailable(path, "empty path: name the journal file")
    file = JournalFile.open_reader(Path(path))
    try:
        yield file
    finally:
        file.close()
