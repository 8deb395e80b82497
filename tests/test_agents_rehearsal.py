"""`rehearse_agent` runs the trip agent's policy through the gateway against the mock's faults, one
tool at a time (failing before it acts, acting and then never answering), and judges each saga by the
ledger: with the shipped policy, whose undos take the step's idempotency key, every saga ends clean;
with undos bound to the id the booking returned instead, a call that timed out after acting leaves its
booking live (the undo could not be called)."""

from __future__ import annotations

import pytest

from aegis_nb.gateway import Gateway, Policy, parse_policy
from aegis_nb.notebook.agent_rehearsal import AgentRehearsal, rehearse_agent
from aegis_nb.notebook.trip_agent import TripAgent
from tests.test_gateway_policy_errors import SHIPPED

pytestmark = pytest.mark.anyio

AGENT = TripAgent(deadline_seconds=0.5)
"""The saga's deadline is what ends a call that never answers: half a second, against steps of ms."""


def id_policy() -> Policy:
    """The shipped policy with every undo called by the id the call returned, not the step's key."""
    text = SHIPPED.read_text()
    for binding, by_id in (
        ('idempotency_key = "/arguments/idempotency_key"', 'booking_id = "/result/booking_id"'),
        ('idempotency_key = "$request.body#/idempotency_key"', 'charge_id = "$response.body#/charge_id"'),
    ):
        assert binding in text
        text = text.replace(binding, by_id)
    return parse_policy(text, "by_id.toml")


def shipped_policy() -> Policy:
    return parse_policy(SHIPPED.read_text(), str(SHIPPED))


async def rehearse(policy: Policy) -> AgentRehearsal:
    return await rehearse_agent(AGENT, lambda agency: Gateway(policy, upstreams={"agency": agency.server}))


async def test_with_undos_bound_to_the_returned_id_a_call_that_times_out_after_acting_stays_live() -> None:
    rehearsal = await rehearse(id_policy())
    assert str(rehearsal) == (
        "scenario                              outcome      ledger after\n"
        "clean run                             committed    1 flight, 1 hotel, 1 charge (€446.00 held)\n"
        "book_flight fails                     rolled back  clean\n"
        "book_flight times out after acting    STUCK        LEFT LIVE: FL-0001\n"
        "reserve_hotel fails                   rolled back  clean\n"
        "reserve_hotel times out after acting  STUCK        LEFT LIVE: HT-0001\n"
        "charge_card fails                     rolled back  clean\n"
        "charge_card times out after acting    STUCK        LEFT LIVE: CH-0001"
    )
    assert rehearsal.clean is False
    assert [s.answer for s in rehearsal.scenarios[:2]] == [
        "Your trip to Lisbon is booked: flight FL-0001, hotel HT-0001, charge CH-0001.",
        "I booked nothing: the saga was rolled back "
        "(book_flight failed: book_flight is unavailable (injected failure) — rolled back: nothing to undo).",
    ]


async def test_with_the_shipped_policy_undos_bound_to_the_idempotency_key_every_saga_ends_clean() -> None:
    rehearsal = await rehearse(shipped_policy())
    assert [s.row() for s in rehearsal.scenarios] == [
        ("clean run", "committed", "1 flight, 1 hotel, 1 charge (€446.00 held)"),
        ("book_flight fails", "rolled back", "clean"),
        ("book_flight times out after acting", "rolled back", "clean"),
        ("reserve_hotel fails", "rolled back", "clean"),
        ("reserve_hotel times out after acting", "rolled back", "clean"),
        ("charge_card fails", "rolled back", "clean"),
        ("charge_card times out after acting", "rolled back", "clean"),
    ]
    assert rehearsal.clean is True
    assert rehearsal._repr_html_().startswith(
        "<table><tr><th>scenario</th><th>outcome</th><th>ledger after</th></tr>"
        "<tr><td>clean run</td><td>committed</td><td>1 flight, 1 hotel, 1 charge (€446.00 held)</td></tr>"
    )


async def test_only_the_tools_asked_for_are_faulted() -> None:
    rehearsal = await rehearse_agent(
        AGENT,
        lambda agency: Gateway(shipped_policy(), upstreams={"agency": agency.server}),
        tools=["reserve_hotel"],
    )
    assert [s.label for s in rehearsal.scenarios] == [
        "clean run",
        "reserve_hotel fails",
        "reserve_hotel times out after acting",
    ]
