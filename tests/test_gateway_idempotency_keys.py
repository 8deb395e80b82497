"""Inside a saga, the key a gateway step sends upstream is always the step's own (``run_id/index``): a
key the client sends is dropped, so a client can neither make its saga share an effect with another
saga (and undo a committed booking by rolling back) nor name another run's key to undo its booking."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult

from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.mock import TravelAgency
from tests.test_gateway_policy_errors import SHIPPED

pytestmark = pytest.mark.anyio


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


def flights(agency: TravelAgency) -> list[tuple[str, str | None]]:
    """The live flights in the ledger: each booking's id and the key it was made under."""
    return [(booking.id, booking.idempotency_key) for booking in agency.state().flights]


async def begin(client: Client) -> tuple[str, str]:
    ticket = data(await client.call_tool("saga_begin", {}))
    return ticket["saga"], ticket["run_id"]


def gateway_of(agency: TravelAgency) -> Gateway:
    return Gateway(parse_policy(SHIPPED.read_text(), "policy.toml"), upstreams={"agency": agency.server})


async def test_a_client_key_reused_by_a_second_saga_cannot_undo_the_first_sagas_committed_booking() -> None:
    agency = TravelAgency()
    async with Client(gateway_of(agency)) as client:
        first, first_run = await begin(client)
        kept = data(
            await client.call_tool(
                "book_flight", {"destination": "Lisbon", "idempotency_key": "trip-1", "saga": first}
            )
        )
        assert data(await client.call_tool("saga_commit", {"saga": first}))["status"] == "committed"
        second, second_run = await begin(client)
        again = data(
            await client.call_tool(
                "book_flight", {"destination": "Lisbon", "idempotency_key": "trip-1", "saga": second}
            )
        )
        rolled = data(await client.call_tool("saga_rollback", {"saga": second, "reason": "changed plans"}))
    assert (kept["booking_id"], again["booking_id"]) == ("FL-0001", "FL-0002")
    assert [(s["name"], s["state"]) for s in rolled["steps"]] == [("book_flight", "undone")]
    assert flights(agency) == [("FL-0001", f"{first_run}/0")]
    assert agency.state().cancellations == 1  # FL-0002's, the second saga's own booking
    assert second_run != first_run


async def test_a_client_naming_another_runs_key_cannot_touch_that_runs_booking() -> None:
    agency = TravelAgency()
    gateway = gateway_of(agency)
    async with gateway, Client(gateway) as alice, Client(gateway) as mallory:
        hers, her_run = await begin(alice)
        await alice.call_tool("book_flight", {"destination": "Oslo", "saga": hers})
        theirs, their_run = await begin(mallory)
        stolen = data(
            await mallory.call_tool(
                "book_flight", {"destination": "Oslo", "idempotency_key": f"{her_run}/0", "saga": theirs}
            )
        )
        rolled = data(await mallory.call_tool("saga_rollback", {"saga": theirs}))
        committed = data(await alice.call_tool("saga_commit", {"saga": hers}))
    assert stolen["booking_id"] == "FL-0002"
    assert ([s["state"] for s in rolled["steps"]], committed["status"]) == (["undone"], "committed")
    assert flights(agency) == [("FL-0001", f"{her_run}/0")]
    assert their_run != her_run
