"""A `ToolPairStep` sends its tools the step's own idempotency key, whatever its saga arguments say: a
key that came in with them (a workflow's caller may choose its kwargs) cannot make two runs share one
booking, so rolling one back never cancels what the other committed."""

from __future__ import annotations

import pytest

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaRolledBack
from aegis_nb.mock import TravelAgency
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.server.tool_step import ToolPairStep

pytestmark = pytest.mark.anyio


class Fails:
    name = "Fails"

    async def execute(self, ctx: AegisContext) -> None:
        raise RuntimeError("changed plans")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


async def test_a_key_in_the_saga_arguments_cannot_make_a_rollback_cancel_another_runs_booking() -> None:
    agency = TravelAgency()
    engine = WorkflowEngine()
    async with agency.connect() as session:
        book = ToolPairStep(session, "book_flight", "cancel_flight")
        trip = (book, (), {"destination": "Lisbon", "idempotency_key": "trip-1"})
        kept = await engine.execute_saga([trip], AegisContext())
        with pytest.raises(SagaRolledBack):
            await engine.execute_saga([trip, Fails()], AegisContext())
    assert kept.metadata["book_flight"]["booking_id"] == "FL-0001"
    assert [(b.id, b.idempotency_key) for b in agency.state().flights] == [("FL-0001", f"{kept.run_id}/0")]
    assert agency.state().cancellations == 1  # FL-0002, the rolled-back run's own
