"""The AegisMCP documentation page's example, verbatim, behaves as the page says.

The verbatim copy lives in `tests/servers/doc_travel_agent.py`, which also serves it over stdio.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest

from aegis_nb import SagaRolledBack
from tests.servers.doc_travel_agent import AegisContext, app, book_vacation_saga


@pytest.mark.anyio
async def test_card_declined_rolls_back_the_flight(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SagaRolledBack) as raised:
        await book_vacation_saga(AegisContext())

    assert capsys.readouterr().out.splitlines() == [
        "Booking flight...",
        "Attempting to charge card for FLIGHT_999...",
        "Canceling flight FLIGHT_999...",
    ]
    cause = raised.value.__cause__
    assert isinstance(cause, ValueError)
    assert cause.args == ("Card Declined!",)
    report = raised.value.report
    assert list(report.compensated) == ["BookFlightStep"]
    assert report.failed_step == "ChargeCardStep"
    assert report.summary() == "Card Declined! — rolled back: BookFlightStep"


def test_example_runs_with_asyncio_run_as_a_user_would(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SagaRolledBack):
        asyncio.run(book_vacation_saga(AegisContext()))
    assert capsys.readouterr().out.count("Canceling flight FLIGHT_999...") == 1


def test_the_workflow_is_served_as_an_mcp_tool() -> None:
    assert [tool.name for tool in anyio.run(app.list_tools)] == ["book_vacation"]
