"""A run's row reaches the journal file with its first event, never before it.

A run opened in the journal (`open_run`) but not yet started must leave no trace if the process dies:
another run's commit in between must not write its row alone. A row without events would read as a
run that crashed after it started, and recovery would end it with a final event and no start (the
kill test's "does not start with SagaStarted", seen once the engine's timing shifted).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from aegis_nb import AegisContext, SagaStarted, StepStarted
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.definition import normalize_saga
from aegis_nb.saga.durable import SqliteJournal, read_run, read_runs


class Noop:
    """A step found by its class: recovery could rebuild it, so the journal accepts the run."""

    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        return None


def started(run_id: str) -> SagaStarted:
    return SagaStarted(run_id, 0, 1.0, "trip", ("Noop",), math.inf, AegisContext())


@pytest.mark.anyio
async def test_a_run_opened_but_not_started_leaves_no_row_when_another_run_commits(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = SqliteJournal(path)
    specs = normalize_saga([Noop()])
    await journal.open_run("opened", "trip", specs)
    await journal.open_run("started", "trip", specs)
    await journal.append(started("started"))  # committed: the batch holds every row queued so far
    journal.abandon()  # the process dies before "opened" journals its start

    assert [(run.run_id, run.status, run.events) for run in read_runs(path)] == [
        ("started", SagaStatus.RUNNING, 1)
    ]


@pytest.mark.anyio
async def test_a_run_row_is_written_with_its_first_event(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    journal = SqliteJournal(path)
    specs = normalize_saga([Noop()])
    await journal.open_run("other", "trip", specs)
    await journal.open_run("run", "trip", specs)
    await journal.append(started("other"))
    await journal.append(started("run"))
    # An in-doubt step's start would be synced; a plain one is queued, and the process dies with it.
    await journal.append(StepStarted("run", 1, 2.0, 0, "Noop"))
    journal.abandon()

    assert [(run.run_id, run.events) for run in read_runs(path)] == [("other", 1), ("run", 1)]
    assert [type(event).__name__ for event in read_run(path, "run").events] == ["SagaStarted"]
