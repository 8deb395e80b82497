"""The mock travel agency over a real in-process MCP client: tools, ledger and faults."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp.types import TextContent

from aegis_nb.kernel.errors import ToolError
from aegis_nb.mock import (
    DECLINED_TEST_CARD,
    FaultPlan,
    Latency,
    Ledger,
    ToolFaults,
    TravelAgency,
)
from aegis_nb.mock.travel import travel_app

pytestmark = pytest.mark.anyio

CARD = "4242424242424242"


async def test_the_agency_lists_its_tools() -> None:
    async with TravelAgency().connect() as session:
        assert await session.list_tools() == [
            "search_flights",
            "book_flight",
            "cancel_flight",
            "reserve_hotel",
            "cancel_hotel",
            "charge_card",
            "refund_card",
            "list_bookings",
            "set_faults",
        ]


def test_optional_text_arguments_are_plain_strings_that_the_sdk_does_not_parse_as_json() -> None:
    # The SDK json.loads every string sent for a parameter not typed exactly `str`; keys and ids
    # are sent on every tool-pair step, so they are `str` with "" for none.
    tools = {
        tool.name: tool.fn_metadata.arg_model.model_fields
        for tool in TravelAgency().server._tool_manager.list_tools()
    }
    optional_text = [
        (tool, name)
        for tool, fields in tools.items()
        for name, f in fields.items()
        if f.annotation == str | None
    ]
    assert optional_text == []
    assert (
        tools["cancel_flight"]["booking_id"].annotation,
        tools["cancel_flight"]["booking_id"].default,
    ) == (str, "")


async def test_an_empty_key_or_id_means_none() -> None:
    agency = TravelAgency()
    async with agency.connect() as session:
        first = await session.call_tool("book_flight", {"destination": "Lisbon", "idempotency_key": ""})
        second = await session.call_tool("book_flight", {"destination": "Lisbon", "idempotency_key": ""})
        with pytest.raises(ToolError, match="give exactly one of booking_id or idempotency_key"):
            await session.call_tool("cancel_flight", {"booking_id": "", "idempotency_key": ""})
    assert (first["booking_id"], second["booking_id"]) == ("FL-0001", "FL-0002")


async def test_a_trip_books_charges_and_shows_in_the_ledger() -> None:
    agency = TravelAgency()
    async with agency.connect() as session:
        offers = await session.call_tool("search_flights", {"destination": "Lisbon"})
        cheapest = offers["flights"][0]
        flight = await session.call_tool("book_flight", {"destination": "Lisbon", "idempotency_key": "r/0"})
        hotel = await session.call_tool("reserve_hotel", {"city": "Lisbon", "nights": 3})
        charge = await session.call_tool("charge_card", {"amount_cents": 84_000, "card_number": CARD})
        ledger = await session.call_tool("list_bookings")
    assert flight == {
        "booking_id": "FL-0001",
        "kind": "flight",
        "place": "Lisbon",
        "item": cheapest["flight_no"],
        "price_cents": cheapest["price_cents"],
        "status": "live",
    }
    assert charge == {"charge_id": "CH-0001", "amount_cents": 84_000, "card_last4": "4242", "status": "live"}
    assert ledger == {
        "flights": [flight],
        "hotels": [hotel],
        "charges": [charge],
        "cancellations": 0,
        "refunds": 0,
        "balance_cents": 84_000,
    }
    assert ledger == agency.state().to_json()


async def test_idempotent_booking_and_repeated_undo_over_mcp() -> None:
    agency = TravelAgency()
    async with agency.connect() as session:
        args = {"city": "Porto", "nights": 2, "idempotency_key": "r/1"}
        first = await session.call_tool("reserve_hotel", args)
        assert await session.call_tool("reserve_hotel", args) == first
        undo = {"idempotency_key": "r/1"}
        assert await session.call_tool("cancel_hotel", undo) == {"id": "HT-0001", "changed": True}
        assert await session.call_tool("cancel_hotel", undo) == {"id": "HT-0001", "changed": False}
    assert agency.state().is_empty
    assert agency.state().cancellations == 1


async def test_the_declined_test_card_and_the_declined_fault_say_card_declined() -> None:
    agency = TravelAgency()
    async with agency.connect() as session:
        with pytest.raises(ToolError, match=r"^Card Declined!$") as declined:
            await session.call_tool("charge_card", {"amount_cents": 100, "card_number": DECLINED_TEST_CARD})
        assert declined.value.tool == "charge_card"
        agency.set_tool_faults("charge_card", ToolFaults(declined=True))
        with pytest.raises(ToolError, match=r"^Card Declined!$"):
            await session.call_tool("charge_card", {"amount_cents": 100, "card_number": CARD})
    assert agency.state().is_empty


async def test_invalid_arguments_are_rejected_with_the_validation_message() -> None:
    agency = TravelAgency()
    async with agency.connect() as session:
        with pytest.raises(ToolError) as bad:
            await session.call_tool("reserve_hotel", {"city": "Porto", "nights": 0})
    assert bad.value.message.startswith(
        "Error executing tool reserve_hotel: 1 validation error for reserve_hotelArguments\nnights\n"
        "  Input should be greater than or equal to 1"
    )
    assert agency.state().is_empty


async def test_a_malformed_card_number_is_refused_in_one_line_that_does_not_repeat_it() -> None:
    agency = TravelAgency()
    async with agency.connect() as session:
        schema = (await session.client.list_tools()).tools
        card_schema = next(t for t in schema if t.name == "charge_card").input_schema["properties"]
        with pytest.raises(ToolError) as bad:
            await session.call_tool(
                "charge_card", {"amount_cents": 100, "card_number": "4242 4242 4242 4242"}
            )
    assert (bad.value.message, bad.value.refused) == (
        "a card number is 12 to 19 digits, no spaces, got 19 characters",
        True,  # nothing was charged: a saga owes no refund
    )
    assert card_schema["card_number"]["pattern"] == "^[0-9]{12,19}$"  # still published for clients
    assert agency.state().is_empty


@pytest.mark.parametrize(
    ("sent", "kind"), [(int(CARD), "a number"), ([CARD], "an array"), ({"number": CARD}, "an object")]
)
async def test_a_card_number_of_another_json_type_is_refused_without_repeating_it(
    sent: object, kind: str
) -> None:
    # Typed `str`, pydantic's error would hold the full number: "input_value=4242424242424242".
    agency = TravelAgency()
    async with agency.connect() as session:
        with pytest.raises(ToolError) as bad:
            await session.call_tool("charge_card", {"amount_cents": 100, "card_number": sent})
    assert (bad.value.message, bad.value.refused) == (
        f"a card number is a string of 12 to 19 digits, got {kind}",
        True,
    )
    assert agency.state().is_empty


async def test_the_travel_agent_refuses_a_card_number_sent_as_a_number_without_repeating_it() -> None:
    agency = TravelAgency()
    async with Client(travel_app(agency)) as client:
        result = await client.call_tool(
            "book_trip", {"destination": "Lisbon", "nights": 2, "card_number": int(CARD)}
        )
    assert (result.is_error, [c.text for c in result.content if isinstance(c, TextContent)]) == (
        True,
        # Refused against the published schema before the workflow runs (issue 19).
        ["book_trip: refused before anything ran: card_number: must be of type string"],
    )
    assert agency.state().is_empty


async def test_an_undo_tool_that_fails_twice_then_succeeds() -> None:
    agency = TravelAgency(faults=FaultPlan({"cancel_flight": ToolFaults(fail_next=2)}))
    async with agency.connect() as session:
        flight = await session.call_tool("book_flight", {"destination": "Oslo"})
        undo = {"booking_id": flight["booking_id"]}
        for _ in range(2):
            with pytest.raises(ToolError, match=r"^cancel_flight is unavailable \(injected failure\)$"):
                await session.call_tool("cancel_flight", undo)
        assert await session.call_tool("cancel_flight", undo) == {"id": "FL-0001", "changed": True}
    assert agency.state().is_empty


async def test_a_call_that_hangs_after_its_effect_leaves_the_effect_in_doubt() -> None:
    agency = TravelAgency(faults=FaultPlan({"charge_card": ToolFaults(hang_after_effect=1)}))
    async with agency.connect() as session:
        with anyio.move_on_after(0.2) as scope:
            await session.call_tool(
                "charge_card", {"amount_cents": 500, "card_number": CARD, "idempotency_key": "k"}
            )
        assert scope.cancelled_caught
        assert [c.id for c in agency.state().charges] == ["CH-0001"]
        refund = await session.call_tool("refund_card", {"idempotency_key": "k"})
    assert refund == {"id": "CH-0001", "changed": True}
    assert agency.state().is_empty


async def test_fixed_latency_delays_the_call() -> None:
    agency = TravelAgency(faults=FaultPlan({"search_flights": ToolFaults(latency=Latency.fixed(0.05))}))
    async with agency.connect() as session:
        started = anyio.current_time()
        await session.call_tool("search_flights", {"destination": "Rome"})
        assert anyio.current_time() - started >= 0.05


async def test_faults_can_be_replaced_over_mcp_and_bad_plans_are_refused() -> None:
    agency = TravelAgency()
    async with agency.connect() as session:
        plan = {"charge_card": {"declined": True}, "reserve_hotel": {"latency": 0.01}}
        assert await session.call_tool("set_faults", {"plan": plan}) == {
            "faults": {"charge_card": {"declined": True}, "reserve_hotel": {"latency": {"fixed": 0.01}}}
        }
        with pytest.raises(ToolError, match=r"^unknown tool 'book_car' in fault plan"):
            await session.call_tool("set_faults", {"plan": {"book_car": {}}})
    assert agency.faults.to_json() == {
        "charge_card": {"declined": True},
        "reserve_hotel": {"latency": {"fixed": 0.01}},
    }


async def test_random_failures_follow_the_seed() -> None:
    plan = FaultPlan({"search_flights": ToolFaults(fail_rate=0.5, seed=4)})

    async def outcomes() -> list[bool]:
        agency = TravelAgency(faults=plan)
        results = []
        async with agency.connect() as session:
            for _ in range(12):
                try:
                    await session.call_tool("search_flights", {"destination": "Rome"})
                    results.append(True)
                except ToolError:
                    results.append(False)
        return results

    first, second = await outcomes(), await outcomes()
    # Call n fails when the n-th draw of random.Random(4) is below 0.5; a fresh agency starts over.
    assert first == second == [False] * 6 + [True, True, True, False, True, False]


async def test_unknown_ids_are_refused_with_the_ledger_message() -> None:
    async with TravelAgency(Ledger()).connect() as session:
        with pytest.raises(ToolError, match=r"^no charge 'CH-0042'$"):
            await session.call_tool("refund_card", {"charge_id": "CH-0042"})
        with pytest.raises(ToolError, match=r"^Unknown tool: rent_car$"):
            await session.call_tool("rent_car", {})
