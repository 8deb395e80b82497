"""`SqliteJournal`: the durable journal. Write-ahead, group-committed, one SQLite file per journal.

What must survive a crash is synced before the engine acts on it: a run's start (with the step
records recovery needs; so a full disk stops the run before any step), every step's outcome (with
its context snapshot on success), every compensation's outcome and the run's end; an in-doubt
step's start too, since recovery must then undo it. Some events ride along with the next sync
instead, because losing them in a crash changes nothing recovery does: a plain step's start, a
compensation attempt's start, and the last step's success, which the engine follows at once with
the run's end (a crash before that sync is a crash before the step's outcome was recorded). A
single saga of n steps so pays n + 1 syncs: one per step, and one for its start.

Concurrent runs share the file and its syncs: while one batch is being written (in a worker thread,
never on the event loop), new rows queue up, and the next batch writes them all in one transaction.
The task that waits longest writes the next batch, so a hundred sagas pay for one sync per round,
not a hundred.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import anyio

from aegis_nb.kernel.records import record
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.durable.codec import encode_event, json_problem
from aegis_nb.saga.durable.errors import JournalError, JournalUnavailable, StepNotRecoverable
from aegis_nb.saga.durable.locator import StepLocator, StepResolver
from aegis_nb.saga.durable.runs import JournaledRun, decode_run, encode_steps
from aegis_nb.saga.durable.store import EventRow, JournalFile, NewRun, RecoveryMark, Row, RunInfo
from aegis_nb.saga.events import (
    CompensationStarted,
    SagaCommitted,
    SagaCompensated,
    SagaEvent,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)

_STATUS: Mapping[type, SagaStatus] = {
    StepFailed: SagaStatus.COMPENSATING,
    StepTimedOut: SagaStatus.COMPENSATING,
    CompensationStarted: SagaStatus.COMPENSATING,
    SagaCommitted: SagaStatus.COMMITTED,
    SagaCompensated: SagaStatus.ROLLED_BACK,
    SagaStuck: SagaStatus.STUCK,
}
_FINAL: tuple[type, ...] = (SagaCommitted, SagaCompensated, SagaStuck)


@record
class _LiveRun:
    """What the journal must know of a run in progress: its in-doubt steps and its last step."""

    in_doubt: frozenset[int]
    last: int

    def rides_along(self, event: SagaEvent) -> bool:
        """True when `event` may wait for the next sync (see the module docstring)."""
        if isinstance(event, StepStarted):
            return event.index not in self.in_doubt
        return isinstance(event, StepSucceeded) and event.index == self.last


class _Waiter:
    """A task waiting for its row to be committed (or to be told to commit the next batch)."""

    __slots__ = ("done", "error", "wake")

    def __init__(self) -> None:
        self.wake = anyio.Event()
        self.done = False
        self.error: JournalError | None = None


class SqliteJournal:
    """A durable journal in the SQLite file at `path` (created with mode 0600 on first use).

    `steps` registers step objects recovery cannot rebuild on its own (those holding clients or
    connections), by their name or under the given keys. Nothing happens on construction: the file
    is opened on first use, so an app can build its journal at import time.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        steps: Iterable[object] | Mapping[str, object] = (),
        main_module: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.resolver = StepResolver(steps, main_module=main_module)
        self._file: JournalFile | None = None
        self._opening: anyio.Lock | None = None
        self._rows: list[Row] = []
        self._waiters: list[_Waiter] = []
        self._writing = False
        self._live: dict[str, _LiveRun] = {}
        self._broken: dict[str, JournalError] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<SqliteJournal {str(self.path)!r}>"

    @property
    def commits(self) -> int:
        """Transactions (each one sync) written so far by this journal object."""
        return 0 if self._file is None else self._file.commits

    # -- lifecycle -------------------------------------------------------------------------------

    async def open(self) -> None:
        """Open (or create) the file now; otherwise the first run or recovery does it."""
        if self._file is not None:
            return
        if self._closed:
            raise JournalError(self.path, "the journal is closed")
        if self._opening is None:
            self._opening = anyio.Lock()
        async with self._opening:
            if self._file is None:
                self._file = await anyio.to_thread.run_sync(JournalFile.open_writer, self.path)

    async def aclose(self) -> None:
        """Write what is pending, then close the file and release the writer lock (a later use reopens)."""
        if self._file is None:
            return
        with anyio.CancelScope(shield=True):
            if self._rows or self._writing:
                await self._commit(None)  # joins (or writes) the last batch
            file, self._file = self._file, None  # a later use opens the file again
            if file is not None:
                file.close()

    def abandon(self) -> None:
        """Close without writing what is pending, as a crash would (for crash-window tests)."""
        file, self._file, self._closed = self._file, None, True
        self._rows, self._waiters = [], []
        if file is not None:
            file.close()

    async def __aenter__(self) -> SqliteJournal:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- the Journal protocol ----------------------------------------------------------------------

    async def open_run(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        """Refuse the run unless recovery could rebuild every step; then queue the run's row."""
        specs = tuple(specs)
        locators = tuple(self._locate(saga, spec) for spec in specs)
        await self.open()
        self._live[run_id] = _LiveRun(frozenset(s.index for s in specs if s.in_doubt), len(specs) - 1)
        self._rows.append(NewRun(run_id, saga, encode_steps(specs, locators)))

    async def append(self, event: SagaEvent) -> None:
        """Record `event`; return once it is synced, or queued when a crash could not make it matter."""
        run_id = event.run_id
        broken = self._broken.get(run_id)
        if broken is not None:
            raise broken.again()
        if self._file is None:
            await self.open()
        kind = type(event)
        row = EventRow(run_id, event.seq, encode_event(event), _STATUS.get(kind))
        live = self._live.pop(run_id, None) if kind in _FINAL else self._live.get(run_id)
        if kind is CompensationStarted or (live is not None and live.rides_along(event)):
            self._rows.append(row)
            return
        await self._commit(row)

    # -- reading (recovery, listing, replay) -------------------------------------------------------

    async def runs(self) -> tuple[RunInfo, ...]:
        """Every run with its status, oldest first."""
        file = await self._opened()
        return await anyio.to_thread.run_sync(file.runs)

    async def run(self, run_id: str) -> JournaledRun:
        """One run, decoded; `KeyError` if there is none."""
        file = await self._opened()
        stored = await anyio.to_thread.run_sync(file.run, run_id)
        return decode_run(self.path, stored)

    async def unfinished(self) -> tuple[JournaledRun, ...]:
        """Every run that neither committed, rolled back nor got stuck, oldest first."""
        file = await self._opened()
        ids = await anyio.to_thread.run_sync(file.unfinished)
        return tuple([await self.run(run_id) for run_id in ids])

    def is_live(self, run_id: str) -> bool:
        """True while `run_id` runs through this journal object: recovery must leave it alone."""
        return run_id in self._live

    async def mark_recovering(self, run_id: str) -> None:
        """Count a recovery of `run_id` (written with its first recovery event); it is live until done."""
        await self.open()
        self._live[run_id] = _LiveRun(frozenset(), -1)
        self._rows.append(RecoveryMark(run_id))

    async def _opened(self) -> JournalFile:
        await self.open()
        assert self._file is not None
        return self._file

    # -- checking ----------------------------------------------------------------------------------

    def _locate(self, saga: str, spec: StepSpec) -> StepLocator:
        where = f"saga {saga!r}, step {spec.name!r} (saga entry {spec.index})"
        located = self.resolver.locate(spec.step)
        if isinstance(located, str):
            raise StepNotRecoverable(
                f"{where}: {self.path} could not rebuild this step after a crash: {located}"
            )
        problem = json_problem(list(spec.args), "args") or json_problem(dict(spec.kwargs), "kwargs")
        if problem:
            raise StepNotRecoverable(f"{where}: its arguments cannot be journaled: {problem}")
        return located

    # -- group commit ------------------------------------------------------------------------------

    async def _commit(self, row: Row | None) -> None:
        """Add `row` to the next batch and wait until that batch is written (writing it if first)."""
        if row is not None:
            self._rows.append(row)
        waiter = _Waiter()
        self._waiters.append(waiter)
        # Shielded: a batch holds other runs' rows, and the engine must not act on an unwritten one.
        with anyio.CancelScope(shield=True):
            if self._writing:
                await waiter.wake.wait()
            else:
                self._writing = True
            if not waiter.done:
                await self._write_batch()
        if waiter.error is not None:
            raise waiter.error.again()

    async def _write_batch(self) -> None:
        rows, waiters = self._rows, self._waiters
        self._rows, self._waiters = [], []
        error: JournalError | None = JournalUnavailable(self.path, "the write was interrupted")
        file = self._file
        try:
            if file is None:
                raise JournalError(self.path, "the journal is closed")
            await anyio.to_thread.run_sync(file.write, rows)
            error = None
        except JournalError as exc:
            error = exc
        except Exception as exc:  # a bug below us: still fail the runs, loudly
            error = JournalUnavailable(self.path, f"could not write the journal ({exc!r})")
        finally:
            # Whatever happened, every waiter hears of it and the queue moves on: none hangs.
            if error is not None:
                for row in rows:
                    # A lost ride-along row would leave a hole in its run: that run writes no more.
                    self._broken.setdefault(row.run_id, error)
            for waiter in waiters:
                waiter.done, waiter.error = True, error
                waiter.wake.set()
            if self._waiters:
                self._waiters[0].wake.set()  # the oldest waiter writes the next batch
            else:
                self._writing = False
