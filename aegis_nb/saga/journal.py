"""`Journal`: what the engine writes each run's events to before it acts; `InMemoryJournal`, one in memory.

The durable journal (`SqliteJournal`, in `saga.durable`) implements the same protocol.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from aegis_nb.kernel.report import SagaReport
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.events import FINAL_EVENT_TYPES, SagaEvent
from aegis_nb.saga.history import fold_report


class Journal(Protocol):
    """Durable (or in-memory) record of every run's events, written before the engine acts."""

    async def open_run(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        """Called before a run's first event. A durable journal checks here that recovery could
        rebuild these steps (identity, JSON arguments) and raises, so that nothing runs otherwise."""
        ...

    async def add_steps(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        """Steps a dynamic saga adds while it runs, before any of them starts: checked as `open_run`
        checks its steps, and kept with the run, so recovery can rebuild them too."""
        ...

    async def append(self, event: SagaEvent) -> None:
        """Record `event`; return only once it is as durable as this journal promises.

        A cancellation never cuts a write off: one that arrives meanwhile is raised only once the
        event is recorded, so the engine knows the journal has it. A write that fails raises
        `JournalError` (a run whose write failed writes no more).
        """
        ...

    def close_run(self, run_id: str) -> None:
        """The run's call is over, finished or not: what the journal holds of it is now for recovery."""
        ...


class InMemoryJournal:
    """Keeps every run's events in order, for tests, notebooks and replay. Not durable."""

    def __init__(self) -> None:
        self._runs: dict[str, list[SagaEvent]] = {}

    async def open_run(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        """Nothing to check: an in-memory journal never outlives its steps."""

    async def add_steps(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        """Nothing to check, for the same reason as `open_run`."""

    async def append(self, event: SagaEvent) -> None:
        self._runs.setdefault(event.run_id, []).append(event)

    def close_run(self, run_id: str) -> None:
        """Nothing to release: an in-memory journal has no recovery to hand a run to."""

    def run_ids(self) -> tuple[str, ...]:
        """Run ids in the order their first event arrived."""
        return tuple(self._runs)

    def events(self, run_id: str) -> tuple[SagaEvent, ...]:
        """The events of one run, in order; `KeyError` for an unknown run."""
        return tuple(self._runs[run_id])

    def report(self, run_id: str) -> SagaReport:
        """The report of one run, rebuilt from its events."""
        return fold_report(self._runs[run_id])

    def unfinished(self) -> Iterator[str]:
        """Run ids whose last event is not final (what recovery would have to finish)."""
        for run_id, events in self._runs.items():
            if not isinstance(events[-1], FINAL_EVENT_TYPES):
                yield run_id
