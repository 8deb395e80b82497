"""The policy ``aegis-nb gateway --mock`` serves undoes by the step's idempotency key: a booking, stay or
charge that timed out after the agency acted (so no id ever came back) is still undone on rollback, and
the ledger ends clean."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult

from aegis_nb.gateway import Gateway, load_policy
from aegis_nb.mock import FaultPlan, TravelAgency
from aegis_nb.mock.faults import ToolFaults
from tests.test_gateway_policy_errors import SHIPPED

pytestmark = pytest.mark.anyio

DEADLINE = 2.0
"""Seconds the saga may run: what ends the call that never answers (an in-process call takes ms)."""

CALLS: dict[str, dict[str, Any]] = {
    "book_flight": {"destination": "Lisbon"},
    "reserve_hotel": {"city": "Lisbon", "nights": 2},
    "charge_card": {"amount_cents": 44_600, "card_number": "4242424242424242"},
}


UNDONE = {"book_flight": (1, 0), "reserve_hotel": (2, 0), "charge_card": (2, 1)}
"""Cancellations and refunds once the saga is rolled back, by the call that never answers: each
effect made, the timed-out call's included, undone once."""


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


@pytest.mark.parametrize("hanging", list(CALLS))
async def test_a_call_that_times_out_after_the_agency_acted_is_undone_and_the_ledger_ends_clean(
    hanging: str,
) -> None:
    agency = TravelAgency(faults=FaultPlan({hanging: ToolFaults(hang_after_effect=1)}))
    gateway = Gateway(load_policy(SHIPPED), upstreams={"agency": agency.server})
    async with Client(gateway) as client:
        saga = data(await client.call_tool("saga_begin", {"deadline_seconds": DEADLINE}))["saga"]
        answers = [await client.call_tool(tool, {**CALLS[tool], "saga": saga}) for tool in CALLS]
        rolled = data(await client.call_tool("saga_rollback", {"saga": saga, "reason": "timed out"}))
    timed_out = list(CALLS).index(hanging)
    assert [answer.is_error for answer in answers[: timed_out + 1]] == [False] * timed_out + [True]
    assert (rolled["status"], [step["state"] for step in rolled["steps"]][: timed_out + 1]) == (
        "rolled_back",
        ["undone"] * (timed_out + 1),
    )
    assert agency.state().to_json() == {
        "flights": [],
        "hotels": [],
        "charges": [],
        "cancellations": UNDONE[hanging][0],
        "refunds": UNDONE[hanging][1],
        "balance_cents": 0,
    }
