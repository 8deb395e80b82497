"""`TripAgent`, the scripted agent the agent tests and tutorial 06 play, decides its next call from
what it has seen alone: begin, book, charge the sum of both prices, commit; retry a failed booking as
often as it may and a declined charge with its next card; then roll back (or, abandoning, just
answer). It reads pydantic-ai transcripts whichever way the toolset reports a failure, and a policy
that never answers is stopped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

from aegis_nb.notebook.trip_agent import MAX_MOVES, Answer, Call, Seen, TripAgent, seen_in

BEGUN = Seen("saga_begin", True, {"saga": "H"})
FLIGHT = Seen("book_flight", True, {"booking_id": "FL-1", "price_cents": 20000})
HOTEL = Seen("reserve_hotel", True, {"booking_id": "HT-1", "price_cents": 15000})


def test_a_clean_trip_is_begun_booked_charged_for_both_and_committed() -> None:
    agent = TripAgent(destination="Oslo", nights=3, ttl_seconds=5.0)
    charged = Seen("charge_card", True, {"charge_id": "CH-1"})
    committed = Seen("saga_commit", True, {"status": "committed"})
    played = [[], [BEGUN], [BEGUN, FLIGHT], [BEGUN, FLIGHT, HOTEL], [BEGUN, FLIGHT, HOTEL, charged]]
    assert [agent.next_move(seen) for seen in played] == [
        Call("saga_begin", {"ttl_seconds": 5.0}),
        Call("book_flight", {"destination": "Oslo", "saga": "H"}),
        Call("reserve_hotel", {"city": "Oslo", "nights": 3, "saga": "H"}),
        Call("charge_card", {"amount_cents": 35000, "card_number": "4242424242424242", "saga": "H"}),
        Call("saga_commit", {"saga": "H"}),
    ]
    assert agent.next_move([BEGUN, FLIGHT, HOTEL, charged, committed]) == Answer(
        "Your trip to Oslo is booked: flight FL-1, hotel HT-1, charge CH-1."
    )


def test_a_failed_booking_is_retried_as_often_as_allowed_then_the_saga_rolled_back() -> None:
    failed = Seen("book_flight", False, "down")
    agent = TripAgent(retries=1)
    assert agent.next_move([BEGUN, failed]) == Call("book_flight", {"destination": "Lisbon", "saga": "H"})
    assert agent.next_move([BEGUN, failed, failed]) == Call(
        "saga_rollback", {"saga": "H", "reason": "book_flight failed: down"}
    )
    assert TripAgent(abandon=True).next_move([BEGUN, failed]) == Answer(
        "I stopped: book_flight failed (down)."
    )


def test_a_declined_charge_is_retried_with_the_next_card_only() -> None:
    declined = Seen("charge_card", False, "Card Declined!")
    agent = TripAgent(cards=("1111111111111111", "2222222222222222"))
    assert agent.next_move([BEGUN, FLIGHT, HOTEL, declined]) == Call(
        "charge_card", {"amount_cents": 35000, "card_number": "2222222222222222", "saga": "H"}
    )
    assert agent.next_move([BEGUN, FLIGHT, HOTEL, declined, declined]) == Call(
        "saga_rollback", {"saga": "H", "reason": "charge_card failed: Card Declined!"}
    )


def test_the_answer_after_a_rollback_quotes_its_summary() -> None:
    rolled = Seen(
        "saga_rollback", True, {"status": "rolled_back", "summary": "why — rolled back: book_flight"}
    )
    assert TripAgent().next_move([BEGUN, FLIGHT, rolled]) == Answer(
        "I booked nothing: the saga was rolled back (why — rolled back: book_flight)."
    )
    refused = Seen("saga_begin", False, "no saga tools here")
    assert TripAgent().next_move([refused]) == Answer("I could not begin a saga: no saga tools here")


def test_a_pydantic_ai_transcript_is_read_with_failures_either_way_the_toolset_reports_them() -> None:
    messages: list[ModelMessage] = [
        ModelResponse(parts=[ToolCallPart("saga_begin", {})]),
        ModelRequest(parts=[ToolReturnPart("saga_begin", {"saga": "H"})]),
        ModelRequest(parts=[ToolReturnPart("charge_card", "Card Declined!", outcome="failed")]),
        ModelRequest(parts=[ToolReturnPart("charge_card", "Card Declined!", outcome="retried")]),
    ]
    assert seen_in(messages) == [
        Seen("saga_begin", True, {"saga": "H"}),
        Seen("charge_card", False, "Card Declined!"),
        Seen("charge_card", False, "Card Declined!"),
    ]


@pytest.mark.anyio
async def test_a_policy_that_never_answers_is_stopped() -> None:
    async def always_failing(tool: str, arguments: Mapping[str, Any]) -> Seen:
        return BEGUN if tool == "saga_begin" else Seen(tool, False, "down")

    with pytest.raises(RuntimeError) as raised:
        await TripAgent(retries=10 * MAX_MOVES).drive(always_failing)
    assert str(raised.value) == f"the trip agent made {MAX_MOVES} moves without an answer"
