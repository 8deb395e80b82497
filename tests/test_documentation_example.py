"""The AegisMCP documentation page's example, verbatim, behaves as the page says."""

from __future__ import annotations

import anyio
import pytest

from aegis_nb import SagaRolledBack

# --- verbatim from shared/reference/aegismcp-workflows-and-sagas.md (do not edit) -----------------
import asyncio
from aegismcp.server.app import AegisMCP
from aegismcp.kernel.context import AegisContext

app = AegisMCP("TravelAgent")

class BookFlightStep:
    async def execute(self, ctx: AegisContext):
        print("Booking flight...")
        booking_id = "FLIGHT_999"

        # We mutate the baggage to pass state to future steps,
        # AND to remember what to compensate!
        ctx = ctx.with_metadata({"flight_id": booking_id})
        return ctx

    async def compensate(self, ctx: AegisContext):
        flight_id = ctx.metadata.get("flight_id")
        print(f"Canceling flight {flight_id}...")

class ChargeCardStep:
    async def execute(self, ctx: AegisContext):
        flight_id = ctx.metadata.get("flight_id")
        print(f"Attempting to charge card for {flight_id}...")
        raise ValueError("Card Declined!")

    async def compensate(self, ctx: AegisContext):
        pass

@app.workflow("book_vacation")
async def book_vacation_saga(ctx: AegisContext):
    # Pass the initial context. The engine automatically threads 
    # the returned, mutated context forward to the next steps!
    return await app.workflow_engine.execute_saga([
        (BookFlightStep(), (), {}),
        (ChargeCardStep(), (), {})
    ], ctx)
# --- end of the verbatim example -----------------------------------------------------------------


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
    assert [str(s) for s in report.compensated] == ["BookFlightStep"]
    assert str(report.failed_step) == "ChargeCardStep"
    assert report.summary() == "Card Declined! — rolled back: BookFlightStep"


def test_example_runs_with_asyncio_run_as_a_user_would(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SagaRolledBack):
        asyncio.run(book_vacation_saga(AegisContext()))
    assert capsys.readouterr().out.count("Canceling flight FLIGHT_999...") == 1


def test_the_workflow_is_served_as_an_mcp_tool() -> None:
    assert [tool.name for tool in anyio.run(app.list_tools)] == ["book_vacation"]
