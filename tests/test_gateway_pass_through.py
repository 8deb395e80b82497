"""The gateway serves its upstreams' tools as their own: listed with their schemas (a `saga` argument
added where a handle counts), called through unchanged outside a saga, checked against the input
schema before anything is forwarded, defaulted from annotations when the policy does not name them,
and routed by the policy when two upstreams serve one name."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from aegis_nb.gateway import Gateway, PolicyError, ToolKind, ToolPolicy, parse_policy
from aegis_nb.mock import TravelAgency
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.journal import InMemoryJournal
from aegis_nb.server.results import REFUSED_META_KEY
from tests.test_gateway_policy_errors import SHIPPED

pytestmark = pytest.mark.anyio


def clock_server(name: str = "clock") -> MCPServer[Any]:
    """An upstream of two tools, one that says it reads only and one that says nothing."""
    server: MCPServer[Any] = MCPServer(name)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def now() -> dict[str, str]:
        """The time (always the same one)."""
        return {"time": f"12:00 at {name}"}

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    async def set_alarm(at: str) -> dict[str, str]:
        """Set an alarm."""
        return {"alarm": at, "by": name}

    return server


def gateway_over_the_agency(agency: TravelAgency) -> Gateway:
    return Gateway(parse_policy(SHIPPED.read_text(), str(SHIPPED)), upstreams={"agency": agency.server})


async def test_the_upstream_tools_are_listed_with_their_schemas_and_a_saga_argument_where_it_counts() -> None:
    agency = TravelAgency()
    async with Client(agency.server) as straight:
        upstream = {tool.name: tool for tool in (await straight.list_tools()).tools}
    async with Client(gateway_over_the_agency(agency)) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    served = {name: tool for name, tool in listed.items() if name in upstream}
    assert list(served) == list(upstream)
    with_saga = sorted(name for name, tool in served.items() if "saga" in tool.input_schema["properties"])
    assert with_saga == [
        "book_flight",
        "cancel_flight",
        "cancel_hotel",
        "charge_card",
        "refund_card",
        "reserve_hotel",
        "set_faults",
    ]
    for name, tool in served.items():
        schema = dict(tool.input_schema)
        properties = dict(schema["properties"])
        properties.pop("saga", None)
        assert ({**schema, "properties": properties}, tool.output_schema, tool.description) == (
            upstream[name].input_schema,
            upstream[name].output_schema,
            upstream[name].description,
        )


async def test_calls_outside_a_saga_are_forwarded_and_answer_as_the_upstream_does() -> None:
    agency = TravelAgency()
    async with Client(gateway_over_the_agency(agency)) as client:
        search = await client.call_tool("search_flights", {"destination": "Lisbon"})
        booked = await client.call_tool("book_flight", {"destination": "Lisbon"})
        cancelled = await client.call_tool("cancel_flight", {"booking_id": "FL-0001"})
        unknown = await client.call_tool("cancel_flight", {"booking_id": "FL-0009"})
    assert (search.is_error, search.structured_content) == (
        False,
        {"flights": [dict(offer) for offer in sorted(_offers("Lisbon"), key=lambda o: o["price_cents"])]},
    )
    assert (booked.is_error, booked.structured_content) == (
        False,
        {
            "booking_id": "FL-0001",
            "kind": "flight",
            "place": "Lisbon",
            "item": "AE729",
            "price_cents": 22800,
            "status": "live",
        },
    )
    assert cancelled.structured_content == {"id": "FL-0001", "changed": True}
    # The upstream's own error, passed through as it came.
    assert (unknown.is_error, [block.text for block in unknown.content]) == (  # type: ignore[union-attr]
        True,
        ["no booking 'FL-0009'"],
    )
    assert agency.state().to_json()["cancellations"] == 1


def _offers(destination: str) -> list[Any]:
    from aegis_nb.mock import flight_offers

    return list(flight_offers(destination))


async def test_a_call_that_does_not_fit_the_schema_is_refused_before_it_is_forwarded() -> None:
    agency = TravelAgency()
    async with Client(gateway_over_the_agency(agency)) as client:
        card = await client.call_tool("charge_card", {"amount_cents": 100, "card_number": "4242 4242"})
        nights = await client.call_tool("reserve_hotel", {"city": "Oslo", "nights": 0})
        missing = await client.call_tool("book_flight", {})
    texts = [[block.text for block in r.content] for r in (card, nights, missing)]  # type: ignore[union-attr]
    assert texts == [
        ["charge_card: argument 'card_number' does not fit the tool's input schema (pattern rule)"],
        ["reserve_hotel: argument 'nights' does not fit the tool's input schema (minimum rule)"],
        ["book_flight: argument 'arguments' does not fit the tool's input schema (required rule)"],
    ]
    assert [(r.is_error, (r.meta or {}).get(REFUSED_META_KEY)) for r in (card, nights, missing)] == [
        (True, True)
    ] * 3
    assert "4242" not in str(texts)  # the value is never repeated
    assert agency.state().to_json()["charges"] == []  # the agency never heard of them


async def test_an_irreversible_tool_is_refused_inside_a_saga() -> None:
    agency = TravelAgency()
    async with Client(gateway_over_the_agency(agency)) as client:
        refused = await client.call_tool("set_faults", {"plan": {}, "saga": "any-handle"})
    assert (refused.is_error, (refused.meta or {}).get(REFUSED_META_KEY), refused.content[0].text) == (  # type: ignore[union-attr]
        True,
        True,
        "set_faults is irreversible: the gateway's policy refuses it inside a saga (commit the saga first, "
        "or call it without a saga)",
    )


async def test_tools_the_policy_does_not_name_default_from_their_annotations_and_are_listed_at_start() -> (
    None
):
    policy = parse_policy('[upstreams.clock]\ncommand = "clock-server"\n', "clock.toml")
    async with Gateway(policy, upstreams={"clock": clock_server()}) as gateway:
        assert gateway.defaults() == {
            "now": ToolPolicy("now", ToolKind.READ_ONLY, guessed=True),
            "set_alarm": ToolPolicy("set_alarm", ToolKind.IRREVERSIBLE, guessed=True),
        }
        assert gateway.startup_lines() == [
            "gateway: 2 tools from 1 upstream(s): 'clock' (clock-server ...)",
            "gateway: now is not in the policy: served as read_only (from its annotations)",
            "gateway: set_alarm is not in the policy: served as irreversible (from its annotations)",
        ]
        async with Client(gateway) as client:
            alarm = await client.call_tool("set_alarm", {"at": "07:00"})
            refused = await client.call_tool("set_alarm", {"at": "07:00", "saga": "h"})
    assert alarm.structured_content == {"alarm": "07:00", "by": "clock"}
    assert refused.content[0].text.startswith("set_alarm is irreversible")  # type: ignore[union-attr]


async def test_two_upstreams_serving_one_name_need_the_policy_to_say_which() -> None:
    two = '[upstreams.a]\ncommand = "a"\n\n[upstreams.b]\ncommand = "b"\n'
    targets = {"a": clock_server("a"), "b": clock_server("b")}
    with pytest.raises(PolicyError) as caught:
        async with Gateway(parse_policy(two, "two.toml"), upstreams=targets):
            pass
    assert (
        str(caught.value) == "two.toml: tools.now: served by 'a' and 'b': say which with upstream = \"...\""
    )
    routed = f'{two}\n[tools.now]\nkind = "read_only"\nupstream = "b"\n\n'
    routed += '[tools.set_alarm]\nkind = "irreversible"\n'
    gateway = Gateway(parse_policy(routed, "two.toml"), upstreams=targets)
    with pytest.raises(PolicyError) as caught:
        async with gateway:
            pass
    assert str(caught.value) == (
        "two.toml:11: tools.set_alarm: served by 'a' and 'b': say which with upstream = \"...\""
    )
    routed = routed.replace('kind = "irreversible"\n', 'kind = "irreversible"\nupstream = "a"\n')
    async with Client(Gateway(parse_policy(routed, "two.toml"), upstreams=targets)) as client:
        now = await client.call_tool("now", {})
        alarm = await client.call_tool("set_alarm", {"at": "6"})
    assert (now.structured_content, alarm.structured_content) == (
        {"time": "12:00 at b"},
        {"alarm": "6", "by": "a"},
    )


async def test_several_clients_share_one_open_gateway_and_a_second_open_is_refused() -> None:
    agency = TravelAgency()
    gateway = gateway_over_the_agency(agency)
    async with gateway:
        with pytest.raises(RuntimeError, match="this gateway is open already"):
            await gateway.__aenter__()
        async with Client(gateway) as first, Client(gateway) as second:
            a = await first.call_tool("book_flight", {"destination": "Rome"})
            b = await second.call_tool("reserve_hotel", {"city": "Rome", "nights": 2})
    ids = ((a.structured_content or {})["booking_id"], (b.structured_content or {})["booking_id"])
    assert ids == ("FL-0001", "HT-0001")
    with pytest.raises(RuntimeError, match="the gateway is not open"):
        gateway.defaults()


async def test_an_irreversible_tool_the_policy_allows_in_a_saga_is_let_through_as_no_step() -> None:
    policy = SHIPPED.read_text().replace(
        '[tools.set_faults]\nkind = "irreversible"\n',
        '[tools.set_faults]\nkind = "irreversible"\nallow_in_saga = true\n',
    )
    agency = TravelAgency()
    gateway = Gateway(parse_policy(policy), upstreams={"agency": agency.server})
    async with Client(gateway) as client:
        begun = await client.call_tool("saga_begin", {})
        saga = (begun.structured_content or {})["saga"]
        set_faults = await client.call_tool(
            "set_faults", {"plan": {"book_flight": {"fail_next": 1}}, "saga": saga}
        )
        status = await client.call_tool("saga_status", {"saga": saga})
    assert (set_faults.is_error, set_faults.structured_content) == (
        False,
        {"faults": agency.faults.to_json()},
    )
    assert agency.faults.to_json() != {}
    assert (status.structured_content or {})["steps"] == []


def test_a_journal_is_given_as_a_path_since_the_gateway_registers_its_steps_with_it() -> None:
    policy = parse_policy(SHIPPED.read_text())
    options: list[dict[str, Any]] = [
        {"journal": InMemoryJournal()},
        {"engine": WorkflowEngine(journal=InMemoryJournal())},
    ]
    for given in options:
        with pytest.raises(ValueError, match="as a path") as caught:
            Gateway(policy, **given)
        assert str(caught.value) == "give a Gateway its journal as a path: it registers its steps with it"
