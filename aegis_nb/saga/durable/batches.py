"""`BatchWriter`: the journal's rows waiting to be written, and the thread that writes them.

Rows gather between writes. A lone run takes them and writes on the event loop (`take_if_idle`);
with concurrent runs, a worker thread writes batch after batch: as soon as one is written and synced
it takes every row that came meanwhile, without waiting for the event loop (which is busy running the
sagas those rows come from), and tells the loop, without blocking, that the batch is written. Rows
that may ride along (`Durability.QUEUED` in the journal) wait for the next batch that must be written.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import sniffio

from aegis_nb.saga.durable.errors import JournalError
from aegis_nb.saga.durable.store import Row

Write = Callable[[list[Row], bool], Mapping[str, JournalError]]
"""Write rows in one transaction, synced or not; returns the runs whose rows the file refused
(`JournalFile.write`)."""

Written = Callable[[list[Row], "Batch"], None]
"""Called on the event loop once a batch is written (or failed): the journal settles its runs."""


class Batch:
    """Rows written in one transaction; every task with a row in it waits for `written`.

    `error` fails the whole batch (nothing of it was written); `refused` names runs whose rows alone
    were left out, while the rest of the batch was written.
    """

    __slots__ = ("error", "refused", "written")

    def __init__(self) -> None:
        self.written = anyio.Event()
        self.error: JournalError | None = None
        self.refused: Mapping[str, JournalError] = {}


class BatchWriter:
    """Pending rows, guarded by one lock, and a worker thread started on the first concurrent write."""

    def __init__(
        self, write: Write, written: Written, failed: Callable[[BaseException], JournalError]
    ) -> None:
        self._write = write
        self._written = written
        self._failed = failed
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._rows: list[Row] = []
        self._sync = False  # whether the next batch must be synced
        self._batch: Batch | None = None  # the next batch, once a row must be written
        self._busy = False  # the thread is writing a batch
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._notify: Callable[..., object] | None = None
        # Runs the file refused rows of: their later rows are refused too, or the run would have a
        # hole where the refused row was (its next rows may already be queued when it hears of it).
        self._refused: dict[str, JournalError] = {}

    # -- on the event loop ---------------------------------------------------------------------

    def queue(self, row: Row) -> None:
        """Add a row that rides along with the next batch."""
        with self._lock:
            self._rows.append(row)

    def take_if_idle(self, row: Row | None) -> list[Row] | None:
        """Every pending row and `row`, for the caller to write now; None while a batch is due or
        being written (the caller must then `submit`, so rows stay in order)."""
        with self._lock:
            if self._busy or self._batch is not None:
                return None
            rows = self._rows
            if row is not None:
                rows.append(row)
            self._rows, self._sync = [], False
            return rows

    def submit(self, row: Row | None, *, sync: bool) -> Batch:
        """Add `row` to the next batch and have the thread write it; wait on the batch returned."""
        with self._lock:
            if row is not None:
                self._rows.append(row)
            self._sync = self._sync or sync
            batch = self._batch
            if batch is None:
                batch = self._batch = Batch()
            if self._thread is None:
                self._start()
            self._wake.notify()
            return batch

    def write(self, rows: list[Row], sync: bool) -> Mapping[str, JournalError]:
        """Write `rows` in one transaction, less the rows of runs refused before; returns every run
        whose rows were left out, with its error. Called by the thread, or on the loop by a lone run."""
        with self._lock:
            earlier = {row.run_id: self._refused[row.run_id] for row in rows if row.run_id in self._refused}
        kept = [row for row in rows if row.run_id not in earlier] if earlier else rows
        refused = self._write(kept, sync)
        if refused:
            with self._lock:
                self._refused.update(refused)
        return {**earlier, **refused} if earlier else refused

    def forget(self, run_id: str) -> None:
        """The run is over: a refusal of it is no longer needed."""
        with self._lock:
            self._refused.pop(run_id, None)

    def has_pending(self) -> bool:
        """Some row is not written yet."""
        with self._lock:
            return bool(self._rows) or self._busy or self._batch is not None

    def stop(self) -> None:
        """Write what is due, then end the thread (blocking: call it from a worker thread)."""
        with self._lock:
            self._stopping = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            self._thread, self._stopping = None, False

    def drop(self) -> None:
        """Forget every pending row and end the thread after its current write, as a crash would."""
        with self._lock:
            self._rows, self._sync, self._batch = [], False, None
            self._stopping = True
            self._wake.notify()

    def _start(self) -> None:
        self._notify = _loop_caller()
        self._thread = threading.Thread(target=self._run, name="aegis-journal-writer", daemon=True)
        self._thread.start()

    # -- on the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._batch is None and not self._stopping:
                    self._wake.wait()
                batch = self._batch
                if batch is None:
                    return  # stopping, nothing due
                rows, sync = self._rows, self._sync
                self._rows, self._sync, self._batch, self._busy = [], False, None, True
            try:
                batch.refused = self.write(rows, sync)
            except BaseException as exc:  # whatever it was, the waiting tasks must hear of it
                batch.error = self._failed(exc)
            with self._lock:
                self._busy = False
            self._announce(rows, batch)

    def _announce(self, rows: list[Row], batch: Batch) -> None:
        notify = self._notify
        assert notify is not None
        # RuntimeError: the event loop is gone (the journal was abandoned), so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            notify(self._written, rows, batch)


def _loop_caller() -> Callable[..., Any]:
    """Schedule ``fn(*args)`` on the running event loop from another thread, without waiting."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    import asyncio

    return asyncio.get_running_loop().call_soon_threadsafe
