"""`SqliteJournal`: the durable journal. Write-ahead, group-committed, one SQLite file per journal.

Each event is, before the engine acts on it, at one of three levels (see `store` for the two kinds
of commit):

- synced (committed and fsynced: survives a power loss): every step's success that the next step
  acts upon, an in-doubt step's start (recovery must undo it), every failure, every compensation's
  outcome and the run's end, so the caller never hears of an outcome a power loss could forget;
- committed, not synced (survives the process being killed, not a power loss): the run's start
  with the step records recovery needs, so a full disk stops the run before any step runs;
- queued (written with the next commit, lost with the process before it): a plain step's start,
  a compensation attempt's start, and a step's success when the next event is synced anyway (the
  last step's, followed by the run's end; or before an in-doubt step's start).

Nothing at the lower levels changes what recovery does if it is lost: a run whose start is lost
had only plain steps in flight, whose effects a crash before their outcome is recorded leaves in
any case (that is what ``in_doubt`` is for); a lost compensation start only means the compensation
runs again, as it may anyway. A power loss loses a tail of commits, never a middle (SQLite's log
is checksummed), and the next sync makes every earlier commit durable. So a process kill loses
only queued events; a power loss also loses committed ones since the last sync. A single saga of
n plain steps pays n syncs (n - 1 successes and its end) and n + 1 commits. A dynamic saga (steps
added as it runs, `add_steps`) pays one more: no step is known to be its last, so every success is
synced; each step's record rides along with the write before its first event.

A lone run writes on the event loop: one commit, synced or not, costs less than the two thread
hand-offs (~0.1 ms each on the machines here) it would otherwise need. As soon as a second run
is live in the journal, every write goes to a worker thread, so no run waits on the loop while
another's sync runs. Concurrent runs share the file and its syncs: while one batch is being
written, new rows queue up, and the next batch writes them all in one transaction (synced if any
of them must be). The first task to wait for the next batch writes it, as soon as the one in
flight is written; the others wait on the batch. So a hundred sagas pay for one sync per round,
not a hundred.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType

import anyio
import anyio.lowlevel

from aegis_nb.kernel.report import SagaStatus
from aegis_nb.kernel.shielding import run_shielded
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.durable.batches import Batch, BatchWriter
from aegis_nb.saga.durable.codec import dumps, json_problem
from aegis_nb.saga.durable.errors import JournalError, JournalUnavailable, StepNotRecoverable
from aegis_nb.saga.durable.eventtext import encode_event
from aegis_nb.saga.durable.locator import (
    LocatorKind,
    StepLocator,
    StepResolver,
    one_object_per_registered_name,
)
from aegis_nb.saga.durable.runs import JournaledRun, decode_run, encode_steps, steps_text
from aegis_nb.saga.durable.steprecord import StepRecord
from aegis_nb.saga.durable.store import EventRow, JournalFile, NewRun, RecoveryMark, Row, RunInfo, StepsRow
from aegis_nb.saga.events import (
    FINAL_EVENT_TYPES,
    CompensationStarted,
    SagaEvent,
    SagaStarted,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)

_STATUS: Mapping[type, SagaStatus] = {
    StepFailed: SagaStatus.COMPENSATING,
    StepTimedOut: SagaStatus.COMPENSATING,
    CompensationStarted: SagaStatus.COMPENSATING,
    **{final: final.status for final in FINAL_EVENT_TYPES},
}


class Durability(enum.IntEnum):
    """How durable an event is when `SqliteJournal.append` returns (see the module docstring)."""

    QUEUED = 0
    """Written with the next commit: lost if the process dies first."""
    COMMITTED = 1
    """Committed: survives the process being killed; a power loss may lose it until the next sync."""
    SYNCED = 2
    """Committed and fsynced: survives a power loss."""


@dataclass(frozen=True, slots=True)
class _LiveRun:
    """What the journal must know of a run in progress: its in-doubt steps and its last step.

    A dynamic saga's last step is not known (`last` is -1): each success is then synced, since no
    run's end is sure to follow it.
    """

    in_doubt: frozenset[int]
    last: int

    def durability(self, event: SagaEvent) -> Durability:
        """How durable `event` must be before the engine acts on it (see the module docstring)."""
        if isinstance(event, StepStarted):
            return Durability.SYNCED if event.index in self.in_doubt else Durability.QUEUED
        if isinstance(event, StepSucceeded):
            # The next event is synced anyway: the run's end, or an in-doubt step's start.
            followed = event.index == self.last or event.index + 1 in self.in_doubt
            return Durability.QUEUED if followed else Durability.SYNCED
        if isinstance(event, SagaStarted):
            # Before an in-doubt first step, its synced start follows at once and writes this too.
            return Durability.QUEUED if 0 in self.in_doubt else Durability.COMMITTED
        return durability_of(event)


@dataclass(frozen=True, slots=True)
class _AddedSteps:
    """A dynamic saga's steps so far: each record's JSON text, and the steps found by registered name
    (two objects must not share one name across the whole run, as within a list)."""

    saga: str
    records: tuple[str, ...] = ()
    named: tuple[tuple[StepSpec, StepLocator], ...] = ()


def durability_of(event: SagaEvent) -> Durability:
    """How durable an event of a run the journal does not follow (a recovery) must be."""
    return Durability.QUEUED if type(event) is CompensationStarted else Durability.SYNCED


class SqliteJournal:
    """A durable journal in the SQLite file at `path` (created with mode 0600 on first use).

    `steps` registers step objects recovery cannot rebuild on its own (those holding clients or
    connections), by their name or under the given keys. `allow_modules` names the app's modules
    (prefixes) whose step classes and objects recovery may rebuild even when this process has not
    run them yet, as ``aegis-nb recover`` and start-up recovery have not (see `StepResolver`).
    Nothing happens on construction: the file is opened on first use, so an app can build its
    journal at import time.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        steps: Iterable[object] | Mapping[str, object] = (),
        main_module: str | None = None,
        allow_modules: Iterable[str] = (),
    ) -> None:
        if os.fspath(path) == "":
            # Path("") is the current folder: refused now, not as "not a regular file" at first use.
            raise ValueError("the journal path is empty: name the SQLite file to journal to")
        self.path = Path(path)
        self.resolver = StepResolver(steps, main_module=main_module, allow_modules=allow_modules)
        self._file: JournalFile | None = None
        self._opening: anyio.Lock | None = None
        self._pending = BatchWriter(self._write, self._settle, self._write_error)
        self._live: dict[str, _LiveRun] = {}
        # A run's row, held back until its first event: queued on its own, another run's commit
        # could write it alone, and a crash would then leave a run that seems to have started.
        self._unstarted: dict[str, NewRun] = {}
        self._added: dict[str, _AddedSteps] = {}  # the dynamic sagas among the live runs
        self._broken: dict[str, JournalError] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<SqliteJournal {str(self.path)!r}>"

    @property
    def commits(self) -> int:
        """Transactions written so far by this journal object (since it last opened its file)."""
        return 0 if self._file is None else self._file.commits

    @property
    def syncs(self) -> int:
        """Of those, the ones synced to disk: one fdatasync of the log each."""
        return 0 if self._file is None else self._file.syncs

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
            if self._pending.has_pending():
                await self._commit(None)  # writes what is pending, on its own or with the batch due
            await anyio.to_thread.run_sync(self._pending.stop)
            file, self._file = self._file, None  # a later use opens the file again
            if file is not None:
                file.close()

    def abandon(self) -> None:
        """Close without writing what is pending, as a crash would (for crash-window tests)."""
        file, self._file, self._closed = self._file, None, True
        self._pending.drop()
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
        """Refuse the run unless recovery could rebuild every step; its row goes with its first event."""
        specs = tuple(specs)
        locators = tuple(self._locate(saga, spec) for spec in specs)
        one_object_per_registered_name(saga, specs, locators)
        await self.open()
        self._live[run_id] = _LiveRun(frozenset(s.index for s in specs if s.in_doubt), len(specs) - 1)
        self._unstarted[run_id] = NewRun(run_id, saga, encode_steps(specs, locators))
        if not specs:  # a dynamic saga: its steps come through `add_steps`
            self._added[run_id] = _AddedSteps(saga)

    async def add_steps(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        """Check steps a dynamic saga adds (a step, or a group's members) as `open_run` checks a list's,
        before they run, and keep them with the run, so recovery rebuilds them.

        The run's records are rewritten with the next write, which is at the latest the first step's
        start: never after an event of theirs (rows are written in the order queued).
        """
        specs = tuple(specs)
        locators = tuple(self._locate(saga, spec) for spec in specs)
        added = self._added.get(run_id, _AddedSteps(saga))
        named = tuple(
            (spec, found)
            for spec, found in zip(specs, locators, strict=True)
            if found.kind is LocatorKind.NAME
        )
        if named:
            every = (*added.named, *named)
            one_object_per_registered_name(saga, [spec for spec, _ in every], [found for _, found in every])
        records = (
            *added.records,
            *(
                dumps(StepRecord.of(spec, found).to_json())
                for spec, found in zip(specs, locators, strict=True)
            ),
        )
        self._added[run_id] = _AddedSteps(saga, records, (*added.named, *named))
        live = self._live.get(run_id, _LiveRun(frozenset(), -1))
        self._live[run_id] = replace(live, in_doubt=live.in_doubt | {s.index for s in specs if s.in_doubt})
        text = steps_text(records)
        if (unstarted := self._unstarted.get(run_id)) is not None:
            self._unstarted[run_id] = replace(unstarted, steps=text)  # its row is not written yet
        else:
            self._pending.queue(StepsRow(run_id, text))

    async def append(self, event: SagaEvent) -> None:
        """Record `event`; return once it is as durable as the engine needs (see the module docstring).

        Not cut off by cancellation: the write runs to its end in `run_shielded`, and a cancellation
        that arrived meanwhile is raised after it, so the caller knows the journal has the event.
        """
        run_id = event.run_id
        broken = self._broken.get(run_id)
        if broken is not None:
            raise broken.again()
        row = EventRow(run_id, event.seq, encode_event(event), _STATUS.get(type(event)))
        if (new_run := self._unstarted.pop(run_id, None)) is not None:
            self._pending.queue(new_run)  # in the same batch as `row`: nothing yields in between
        live = self._live.get(run_id)
        level = durability_of(event) if live is None else live.durability(event)
        if level is Durability.QUEUED and self._file is not None:  # never a run's end: always synced
            self._pending.queue(row)
            return
        await run_shielded(self._write_row(row, level))

    def close_run(self, run_id: str) -> None:
        """The run's call is over. Until now it was live, and recovery left it alone: had it read
        the run before its end was on disk, it would have undone a run about to commit."""
        self._live.pop(run_id, None)
        self._unstarted.pop(run_id, None)
        self._added.pop(run_id, None)
        self._broken.pop(run_id, None)
        self._pending.forget(run_id)

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
        """Every run that neither committed, rolled back nor got stuck, oldest first.

        Read on the event loop, and returned without yielding to other tasks after the read: a
        run of this journal cannot end between the read and the caller's `is_live` check, which
        would take a run that just committed for one a crash left unfinished.
        """
        file = await self._opened()
        return tuple([decode_run(self.path, stored) for stored in file.unfinished()])

    def is_live(self, run_id: str) -> bool:
        """True while `run_id` runs through this journal object: recovery must leave it alone."""
        return run_id in self._live

    async def mark_recovering(self, run_id: str) -> None:
        """Count a recovery of `run_id` (written with its first recovery event); it is live until done.

        The run is claimed before anything yields, so a recovery running beside this one skips it.
        """
        self._live[run_id] = _LiveRun(frozenset(), -1)
        try:
            await self.open()
        except BaseException:
            del self._live[run_id]
            raise
        self._pending.queue(RecoveryMark(run_id))

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
        # Most steps take no arguments: checked per step of every run, so skip the empty ones.
        problem = json_problem(list(spec.args), "args") if spec.args else None
        if problem is None and spec.kwargs:
            problem = json_problem(dict(spec.kwargs), "kwargs")
        if problem:
            raise StepNotRecoverable(f"{where}: its arguments cannot be journaled: {problem}")
        return located

    # -- group commit ------------------------------------------------------------------------------

    async def _write_row(self, row: EventRow, level: Durability) -> None:
        """`append`'s shielded part: open the file if need be, then queue or commit `row`."""
        if self._file is None:
            await self.open()
        if level is Durability.QUEUED:
            self._pending.queue(row)
        else:
            await self._commit(row, level)

    async def _commit(self, row: Row | None, level: Durability = Durability.SYNCED) -> None:
        """Write `row` with every pending row, and return once they are written.

        A row the file refused (`JournalFile.write`'s constraint check) fails its own run only.
        """
        refused: Mapping[str, JournalError]
        if len(self._live) <= 1:
            # Tasks ready to run go first: one may start a run, and then this one is not alone.
            await anyio.lowlevel.cancel_shielded_checkpoint()
            rows = self._pending.take_if_idle(row) if len(self._live) <= 1 else None
            if rows is not None:
                # Alone: no other run's step can wait on the loop behind this write.
                try:
                    refused = self._pending.write(rows, level is Durability.SYNCED)
                except BaseException as exc:
                    error = self._write_error(exc)
                    self._settle_rows(rows, error, {})
                    if isinstance(exc, Exception):
                        raise error from None
                    raise
                self._settle_rows(rows, None, refused)
                _raise_refusal(row, refused)
                return
        batch = self._pending.submit(row, sync=level is Durability.SYNCED)
        await _written(batch)
        if batch.error is not None:
            raise batch.error.again()
        _raise_refusal(row, batch.refused)

    def _write(self, rows: list[Row], sync: bool) -> Mapping[str, JournalError]:
        return self._opened_file().write(rows, sync)

    def _write_error(self, exc: BaseException) -> JournalError:
        """A write's failure as the runs in its batch see it."""
        if isinstance(exc, JournalError):
            return exc
        if not isinstance(exc, Exception):
            return JournalUnavailable(self.path, "the write was interrupted")
        return JournalUnavailable(self.path, f"could not write the journal ({exc!r})")  # a bug below: loudly

    def _settle(self, rows: list[Row], batch: Batch) -> None:
        """On the event loop, once the writer thread wrote (or failed to write) `batch`."""
        self._settle_rows(rows, batch.error, batch.refused)
        batch.written.set()

    def _settle_rows(
        self, rows: list[Row], error: JournalError | None, refused: Mapping[str, JournalError]
    ) -> None:
        """After a failed write: a lost ride-along row would leave a hole in its run, so that run
        writes no more. A failed batch stops every run in it; a refused run stops alone."""
        for run_id, refusal in refused.items():
            self._broken.setdefault(run_id, refusal)
        if error is not None:
            for row in rows:
                self._broken.setdefault(row.run_id, error)

    def _opened_file(self) -> JournalFile:
        if self._file is None:
            raise JournalError(self.path, "the journal is closed")
        return self._file


def _raise_refusal(row: Row | None, refused: Mapping[str, JournalError]) -> None:
    """Raise the refusal of `row`'s run, if the file refused that run's rows."""
    if row is not None and row.run_id in refused:
        raise refused[row.run_id].again()


async def _written(batch: Batch) -> None:
    """Wait until `batch` is written, even if cancelled meanwhile: the engine must not act on a row
    the journal does not have yet. (Shielding only once cancelled: a cancel scope per wait costs more
    than the rest of the wait.)"""
    try:
        await batch.written.wait()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await batch.written.wait()
        raise
