"""An agent's calls through the gateway become a saga: each compensable call that carries the handle
is a step, undone on ``saga_rollback`` by the undo tool with arguments bound from the call; a binding
that does not resolve leaves the step orphaned and its undo uncalled; an upstream error leaves the
saga open for the agent to retry; an idle saga is rolled back at its TTL; two clients' sagas never
mix; a secret argument reaches no event or status."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult

from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.mock import DECLINED_TEST_CARD, TravelAgency
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.trace import describe
from aegis_nb.server.results import REFUSED_META_KEY
from tests.test_gateway_policy_errors import SHIPPED

pytestmark = pytest.mark.anyio

CARD = "4242424242424242"


class FakeClock:
    """The clock the gateway measures idleness with, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_gateway(
    agency: TravelAgency, *, policy: str | None = None, events: list[SagaEvent] | None = None, **kwargs: Any
) -> Gateway:
    engine = WorkflowEngine(
        compensation_retry=RetryPolicy(attempts=2, initial_delay=0.0),
        sinks=[] if events is None else [events.append],
    )
    text = SHIPPED.read_text() if policy is None else policy
    return Gateway(
        parse_policy(text, "policy.toml"), upstreams={"agency": agency.server}, engine=engine, **kwargs
    )


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


def ledger(agency: TravelAgency) -> dict[str, Any]:
    """What the agency's ledger holds, as JSON."""
    return dict(agency.state().to_json())


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def status_without_ids(status: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in status.items() if key != "run_id"}


async def begin(client: Client, **arguments: Any) -> str:
    ticket = data(await client.call_tool("saga_begin", arguments))
    assert sorted(ticket) == ["deadline_seconds_left", "run_id", "saga", "ttl_seconds"]
    handle: str = ticket["saga"]
    return handle


async def test_a_declined_card_and_saga_rollback_leave_the_ledger_empty() -> None:
    agency = TravelAgency()
    events: list[SagaEvent] = []
    async with Client(make_gateway(agency, events=events)) as client:
        saga = await begin(client)
        flight = await client.call_tool("book_flight", {"destination": "Lisbon", "saga": saga})
        hotel = await client.call_tool("reserve_hotel", {"city": "Lisbon", "nights": 2, "saga": saga})
        declined = await client.call_tool(
            "charge_card", {"amount_cents": 44600, "card_number": DECLINED_TEST_CARD, "saga": saga}
        )
        standing = ledger(agency)
        rolled = data(await client.call_tool("saga_rollback", {"saga": saga, "reason": "card declined"}))
        again = data(await client.call_tool("saga_status", {"saga": saga}))
    assert (data(flight)["booking_id"], data(hotel)["booking_id"]) == ("FL-0001", "HT-0001")
    assert ((flight.meta or {})["aegis-nb/step"], (hotel.meta or {})["aegis-nb/step"]) == (0, 1)
    assert (declined.is_error, text(declined), (declined.meta or {}).get(REFUSED_META_KEY)) == (
        True,
        "Card Declined!",
        True,
    )
    assert (len(standing["flights"]), len(standing["hotels"])) == (1, 1)  # the saga stayed open
    assert status_without_ids(rolled) == {
        "status": "rolled_back",
        "name": "agent_saga",
        "steps": [
            {"index": 0, "name": "book_flight", "state": "undone"},
            {"index": 1, "name": "reserve_hotel", "state": "undone"},
            {"index": 2, "name": "charge_card", "state": "failed", "detail": "ToolError: Card Declined!"},
        ],
        "ttl_seconds": 600.0,
        "idle_seconds_left": None,
        "deadline_seconds_left": None,
        "reason": "card declined",
        "summary": "card declined — rolled back: reserve_hotel, book_flight",
    }
    assert again == rolled  # a finished handle answers with its final state
    assert ledger(agency) == {
        "flights": [],
        "hotels": [],
        "charges": [],
        "cancellations": 2,
        "refunds": 0,
        "balance_cents": 0,
    }
    # The run is a run like any other, with the engine's events.
    assert [type(event).__name__ for event in events] == [
        "SagaStarted",
        "StepStarted",
        "StepSucceeded",
        "StepStarted",
        "StepSucceeded",
        "StepStarted",
        "StepFailed",
        "CompensationStarted",
        "CompensationSucceeded",
        "CompensationStarted",
        "CompensationSucceeded",
        "SagaRolledBackEvent",
    ]


async def test_the_undo_gets_the_arguments_bound_from_the_call_and_the_step_its_idempotency_key() -> None:
    agency = TravelAgency()
    async with Client(make_gateway(agency)) as client:
        saga = await begin(client)
        charged = data(
            await client.call_tool("charge_card", {"amount_cents": 1000, "card_number": CARD, "saga": saga})
        )
        repeated = data(await client.call_tool("charge_card", {"amount_cents": 1000, "card_number": CARD}))
        rolled = data(await client.call_tool("saga_rollback", {"saga": saga}))
    # The key the step sent is the step's own: a plain call without it is a second charge.
    assert (charged["charge_id"], repeated["charge_id"]) == ("CH-0001", "CH-0002")
    assert [step["state"] for step in rolled["steps"]] == ["undone"]
    assert [(c["charge_id"], c["status"]) for c in ledger(agency)["charges"]] == [("CH-0002", "live")]
    assert ledger(agency)["refunds"] == 1


async def test_a_binding_that_does_not_resolve_leaves_the_step_orphaned_and_its_undo_uncalled() -> None:
    bound_to_the_key = (
        'undo_args = { idempotency_key = "/arguments/idempotency_key" }\n'
        'idempotency_arg = "idempotency_key"\n\n'
        "[tools.reserve_hotel]"
    )
    assert bound_to_the_key in SHIPPED.read_text()
    policy = SHIPPED.read_text().replace(
        bound_to_the_key, 'undo_args = { booking_id = "/result/reservation/id" }\n\n[tools.reserve_hotel]'
    )
    agency = TravelAgency()
    async with Client(make_gateway(agency, policy=policy)) as client:
        saga = await begin(client)
        await client.call_tool("book_flight", {"destination": "Oslo", "saga": saga})
        await client.call_tool("reserve_hotel", {"city": "Oslo", "nights": 1, "saga": saga})
        answer = await client.call_tool("saga_rollback", {"saga": saga, "reason": "changed plans"})
    assert answer.is_error is True  # a rollback that ends stuck did not do what was asked
    rolled = dict(answer.structured_content or {})
    assert status_without_ids(rolled) == {
        "status": "stuck",
        "name": "agent_saga",
        "steps": [
            {
                "index": 0,
                "name": "book_flight",
                "state": "orphaned",
                "detail": "cancel_flight was not called: booking_id (/result/reservation/id) did not resolve "
                "from the call",
            },
            {"index": 1, "name": "reserve_hotel", "state": "undone"},
        ],
        "ttl_seconds": 600.0,
        "idle_seconds_left": None,
        "deadline_seconds_left": None,
        "reason": "changed plans",
        "summary": rolled["summary"],
    }
    assert "book_flight" in rolled["summary"]
    state = ledger(agency)
    assert ([f["booking_id"] for f in state["flights"]], state["hotels"], state["cancellations"]) == (
        ["FL-0001"],
        [],
        1,  # the hotel's; cancel_flight was never called
    )


async def test_a_failed_call_leaves_the_saga_open_for_a_retry_and_a_commit() -> None:
    agency = TravelAgency()
    async with Client(make_gateway(agency)) as client:
        saga = await begin(client)
        await client.call_tool("book_flight", {"destination": "Rome", "saga": saga})
        wrong = await client.call_tool(
            "book_flight", {"destination": "Rome", "flight_no": "XX1", "saga": saga}
        )
        retried = await client.call_tool("reserve_hotel", {"city": "Rome", "nights": 3, "saga": saga})
        committed = data(await client.call_tool("saga_commit", {"saga": saga}))
        late = await client.call_tool("book_flight", {"destination": "Rome", "saga": saga})
    assert (wrong.is_error, retried.is_error) == (True, False)
    assert [(s["name"], s["state"]) for s in committed["steps"]] == [
        ("book_flight", "live"),
        ("book_flight#2", "failed"),  # the engine numbers a step name's second use
        ("reserve_hotel", "live"),
    ]
    assert committed["status"] == "committed"
    assert (late.is_error, text(late), (late.meta or {}).get(REFUSED_META_KEY)) == (
        True,
        "book_flight was not called: the saga has ended (committed)",
        True,
    )
    state = ledger(agency)
    assert (len(state["flights"]), len(state["hotels"]), state["cancellations"]) == (1, 1, 0)


async def test_an_idle_saga_is_rolled_back_at_its_ttl() -> None:
    agency = TravelAgency()
    clock = FakeClock()
    gateway = make_gateway(agency, clock=clock, saga_ttl=30.0)
    async with gateway, Client(gateway) as client:
        saga = await begin(client)
        await client.call_tool("book_flight", {"destination": "Paris", "saga": saga})
        clock.now = 29.0
        assert await gateway.handles.expire() == ()
        clock.now = 59.5  # 30 s after the last call
        (expired,) = await gateway.handles.expire()
        status = data(await client.call_tool("saga_status", {"saga": saga}))
    assert (expired.phase.value, status["status"], status["reason"], status["steps"]) == (
        "rolled_back",
        "rolled_back",
        "idle past its TTL",
        [{"index": 0, "name": "book_flight", "state": "undone"}],
    )
    assert ledger(agency)["flights"] == []


async def test_two_clients_sagas_never_mix_and_a_guessed_handle_learns_nothing() -> None:
    agency = TravelAgency()
    gateway = make_gateway(agency)
    async with gateway, Client(gateway) as alice, Client(gateway) as bob:
        mine, theirs = await begin(alice), await begin(bob)
        await alice.call_tool("book_flight", {"destination": "Lima", "saga": mine})
        await bob.call_tool("reserve_hotel", {"city": "Lima", "nights": 4, "saga": theirs})
        rolled = data(await alice.call_tool("saga_rollback", {"saga": mine}))
        guessed = [
            await bob.call_tool("saga_status", {"saga": mine[:-1] + ("A" if mine[-1] != "A" else "B")}),
            await bob.call_tool("saga_rollback", {"saga": "x"}),
            await bob.call_tool("book_flight", {"destination": "Lima", "saga": "x"}),
        ]
        kept = data(await bob.call_tool("saga_commit", {"saga": theirs}))
    assert [s["name"] for s in rolled["steps"]] == ["book_flight"]
    assert [s["name"] for s in kept["steps"]] == ["reserve_hotel"]
    refusal = "no open saga for this handle: it is unknown, expired, or not this client's"
    assert [(r.is_error, text(r)) for r in guessed] == [
        (True, refusal),
        (True, refusal),
        (True, f"book_flight was not called: {refusal}"),
    ]
    state = ledger(agency)
    assert (state["flights"], [h["place"] for h in state["hotels"]]) == ([], ["Lima"])


async def test_a_secret_argument_reaches_no_event_and_no_status() -> None:
    agency = TravelAgency()
    events: list[SagaEvent] = []
    async with Client(make_gateway(agency, events=events)) as client:
        saga = await begin(client)
        await client.call_tool("charge_card", {"amount_cents": 500, "card_number": CARD, "saga": saga})
        status = await client.call_tool("saga_status", {"saga": saga})
        await client.call_tool("saga_rollback", {"saga": saga})
    seen = " ".join([*(repr(event) for event in events), *(describe(event) for event in events), str(status)])
    assert (CARD in seen, CARD[:12] in seen, ledger(agency)["refunds"]) == (False, False, 1)


async def test_a_saga_begun_with_rollback_on_error_rolls_back_at_the_first_failed_call() -> None:
    agency = TravelAgency()
    async with Client(make_gateway(agency)) as client:
        saga = await begin(client, rollback_on_error=True)
        await client.call_tool("book_flight", {"destination": "Rome", "saga": saga})
        failed = await client.call_tool(
            "book_flight", {"destination": "Rome", "flight_no": "XX1", "saga": saga}
        )
        status = data(await client.call_tool("saga_status", {"saga": saga}))
    assert failed.is_error is True
    assert (status["status"], status["reason"], [s["state"] for s in status["steps"]]) == (
        "rolled_back",
        "a step failed and the saga rolls back on error",
        ["undone", "failed"],
    )
    assert ledger(agency)["flights"] == []


async def test_a_saga_past_its_deadline_is_rolled_back_busy_or_not() -> None:
    agency = TravelAgency()
    clock = FakeClock()
    gateway = make_gateway(agency, clock=clock)
    async with gateway, Client(gateway) as client:
        saga = await begin(client, deadline_seconds=60.0)
        for minute in range(1, 3):
            clock.now = 25.0 * minute  # a call every 25 s: never idle
            await client.call_tool("book_flight", {"destination": f"Bari{minute}", "saga": saga})
        assert await gateway.handles.expire() == ()
        clock.now = 60.0
        await gateway.handles.expire()
        status = data(await client.call_tool("saga_status", {"saga": saga}))
    assert (status["status"], status["reason"], [s["state"] for s in status["steps"]]) == (
        "rolled_back",
        "past its deadline",
        ["undone", "undone"],
    )
    assert ledger(agency)["flights"] == []
