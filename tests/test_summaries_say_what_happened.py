"""A run's summary never contradicts its diagram: a committed saga lists what stands (not a step that
failed and was retried), a rollback does not call a step whose undo found nothing "rolled back", an
unnamed saga is not "saga saga", and a caller's run id (a Temporal workflow id) is shown whole in the
diagram's headline, not cut to eight characters as a generated one is.
"""

from __future__ import annotations

import pytest

from aegis_nb import NOTHING_TO_UNDO, AegisContext, SagaRolledBack, WorkflowEngine
from aegis_nb.diagram import fold, render_text
from aegis_nb.diagram.labels import headline, run_label
from aegis_nb.kernel.undo import Undo
from aegis_nb.saga.durable.codec import report_from_json, report_to_json
from aegis_nb.saga.trace import describe
from aegis_nb.testing import EventCapture
from tests.steps import Boom, Calls, Recorded

pytestmark = pytest.mark.anyio


class NeverCharged(Recorded):
    """A card whose call failed before it charged: its undo finds nothing and says so."""

    async def compensate(self, ctx: AegisContext) -> Undo:  # type: ignore[override]
        await super().compensate(ctx)
        return NOTHING_TO_UNDO


async def test_a_committed_saga_lists_the_steps_that_stand_not_the_failed_try_before_a_retry() -> None:
    calls = Calls()
    async with WorkflowEngine().saga(name="trip") as saga:
        await saga.step(Recorded("book_flight", calls))
        with pytest.raises(Boom):
            await saga.step(Recorded("charge_card", calls, fail="Card Declined!"))
        await saga.step(Recorded("charge_card", calls))
    report = saga.run.report
    assert report.steps == ("book_flight", "charge_card", "charge_card#2")
    assert report.summary() == "committed: book_flight, charge_card#2"


async def test_a_step_whose_undo_found_nothing_is_named_apart_from_the_steps_rolled_back() -> None:
    calls, capture = Calls(), EventCapture()
    steps = [
        Recorded("flight", calls),
        Recorded("hotel", calls),
        NeverCharged("card", calls, fail="Card Declined!", in_doubt=True),
    ]
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine(sinks=[capture]).execute_saga(steps)
    assert (
        raised.value.report.summary() == "Card Declined! — rolled back: hotel, flight; nothing to undo: card"
    )
    assert (
        str(raised.value) == "saga 'saga': Card Declined! — rolled back: hotel, flight; nothing to undo: card"
    )
    # The diagram's text form ends with the same summary.
    assert render_text(fold(list(capture))).splitlines()[-1] == (
        "Card Declined! — rolled back: hotel, flight; nothing to undo: card"
    )


async def test_a_rollback_where_every_undo_found_nothing_says_so_once() -> None:
    calls = Calls()
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine().execute_saga(
            [NeverCharged("card", calls, fail="Card Declined!", in_doubt=True)]
        )
    assert raised.value.report.summary() == "Card Declined! — rolled back, nothing to undo: card"


async def test_an_unnamed_saga_is_called_saga_once_and_a_named_one_by_its_name() -> None:
    capture = EventCapture()
    engine = WorkflowEngine(sinks=[capture])
    await engine.execute_saga([Recorded("flight", Calls())])
    await engine.execute_saga([Recorded("flight", Calls())], name="trip")
    started = [describe(event) for event in capture if type(event).__name__ == "SagaStarted"]
    assert started == [
        "saga started: flight (no deadline)",
        "saga trip started: flight (no deadline)",
    ]


async def test_a_callers_run_id_is_shown_whole_and_a_generated_one_cut_to_eight_digits() -> None:
    capture = EventCapture()
    engine = WorkflowEngine(sinks=[capture])
    await engine.run_saga([Recorded("flight", Calls())], name="trip", run_id="trip-lisbon-2026")
    assert headline(fold(list(capture))).endswith(" · run trip-lisbon-2026")
    assert run_label("0123456789abcdef0123456789abcdef") == "01234567"
    assert run_label("x" * 60) == "x" * 39 + "…"


async def test_a_journal_keeps_which_undos_found_nothing_and_reads_older_reports_without_them() -> None:
    calls = Calls()
    steps = [Recorded("flight", calls), NeverCharged("card", calls, fail="Card Declined!", in_doubt=True)]
    run = await WorkflowEngine().run_saga(steps)
    stored = report_to_json(run.report)
    assert stored["found_nothing"] == ["card"]
    assert report_from_json(stored) == run.report
    older = {key: value for key, value in stored.items() if key != "found_nothing"}
    assert report_from_json(older).summary() == "Card Declined! — rolled back: card, flight"
