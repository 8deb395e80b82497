"""The in-memory journal: it holds each run's events and rebuilds its report; recovery needs a durable one."""

from __future__ import annotations

import pytest

from aegis_nb import InMemoryJournal, SagaStatus, WorkflowEngine
from aegis_nb.saga import fold_report
from tests.steps import Calls, travel

pytestmark = pytest.mark.anyio


async def test_the_in_memory_journal_records_each_run_and_rebuilds_its_report() -> None:
    journal = InMemoryJournal()
    engine = WorkflowEngine(journal=journal)
    ok = await engine.run_saga(travel(Calls()), name="ok")
    bad = await engine.run_saga(travel(Calls(), fail="declined"), name="bad")

    assert journal.run_ids() == (ok.run_id, bad.run_id)
    assert journal.events(bad.run_id) == bad.events
    assert journal.report(bad.run_id) == bad.report
    assert journal.report(ok.run_id) == ok.report == fold_report(ok.events)
    assert ok.report.status is SagaStatus.COMMITTED
    assert list(journal.unfinished()) == []


async def test_recover_needs_a_durable_journal() -> None:
    for journal in (None, InMemoryJournal()):
        with pytest.raises(TypeError, match="recover\\(\\) needs a durable journal, such as SqliteJournal"):
            await WorkflowEngine(journal=journal).recover()
