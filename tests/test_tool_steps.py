"""Steps made of MCP tool pairs: the travel saga over the mock agency, through a real in-process client.

Arguments taken from the (deeply frozen) context, and results stored for the undo, reach tools as JSON.
"""

from __future__ import annotations

from typing import Any

import pytest

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import (
    SagaCompensationFailed,
    SagaDefinitionError,
    SagaRolledBack,
)
from aegis_nb.kernel.report import FailureKind
from aegis_nb.mock import FaultPlan, Latency, ToolFaults, TravelAgency, flight_offers, hotel_rate_cents
from aegis_nb.mock.travel import travel_saga, trip_context
from aegis_nb.saga.definition import SagaEntry, Step
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import CompensationFailed, CompensationStarted
from aegis_nb.saga.parallel import ParallelGroup
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.session import connect
from aegis_nb.server.tool_step import ToolPairStep
from aegis_nb.testing import EventCapture

pytestmark = pytest.mark.anyio

CARD = "4242424242424242"
FAST_RETRY = RetryPolicy(attempts=3, initial_delay=0.0)
CHEAPEST = min(flight_offers("Lisbon"), key=lambda offer: offer["price_cents"])
FLIGHT_PRICE = CHEAPEST["price_cents"]
HOTEL_PRICE = 3 * hotel_rate_cents("Lisbon")

FORWARD = [
    ("SagaStarted",),
    ("StepStarted", "BookFlight"),
    ("StepSucceeded", "BookFlight"),
    ("StepStarted", "ReserveHotel"),
    ("StepSucceeded", "ReserveHotel"),
    ("StepStarted", "ChargeCard"),
]


class ThenDeadline:
    """`step`, after whose success the saga has `seconds` left.

    A deadline set when the saga starts is also spent on the steps before the one it is meant to
    cut off, and on a loaded machine they can take all of it (the flight booked, the deadline gone
    before the hotel started). Started here, it passes while the next step is under way.
    """

    def __init__(self, step: Step, seconds: float) -> None:
        self.step, self.seconds = step, seconds
        self.name, self.in_doubt = getattr(step, "name", None), getattr(step, "in_doubt", False)

    async def execute(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> AegisContext:
        done = await self.step.execute(ctx, *args, **kwargs)
        return (ctx if done is None else done).with_timeout(self.seconds)

    async def compensate(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> None:
        await self.step.compensate(ctx, *args, **kwargs)


def deadline_after(saga: list[SagaEntry], name: str, seconds: float) -> list[SagaEntry]:
    """`saga` with a deadline `seconds` away from the end of its step `name`."""
    entries: list[SagaEntry] = []
    found = 0
    for entry in saga:
        if isinstance(entry, ParallelGroup):
            entries.append(entry)
            continue
        step, args, kwargs = entry if isinstance(entry, tuple) else (entry, (), {})
        if getattr(step, "name", None) == name:
            step, found = ThenDeadline(step, seconds), found + 1
        entries.append((step, args, kwargs))
    assert found == 1, f"{found} steps named {name!r}"
    return entries


async def test_a_committed_trip_leaves_a_flight_a_hotel_and_a_charge() -> None:
    agency, events = TravelAgency(), EventCapture()
    async with agency.connect() as session:
        final = await WorkflowEngine().execute_saga(
            travel_saga(session, "Lisbon", 3), trip_context(CARD, traveller="ada"), sinks=[events]
        )
    run_id = events.events[0].run_id
    flight = {
        "booking_id": "FL-0001",
        "kind": "flight",
        "place": "Lisbon",
        "item": CHEAPEST["flight_no"],
        "price_cents": FLIGHT_PRICE,
        "status": "live",
    }
    hotel = {
        "booking_id": "HT-0001",
        "kind": "hotel",
        "place": "Lisbon",
        "item": "Hotel Lisbon",
        "nights": 3,
        "price_cents": HOTEL_PRICE,
        "status": "live",
    }
    charge = {
        "charge_id": "CH-0001",
        "amount_cents": FLIGHT_PRICE + HOTEL_PRICE,
        "card_last4": "4242",
        "status": "live",
    }
    assert final.to_json() == {
        "traveller": "ada",
        "card": "***",
        "flight": flight,
        "hotel": hotel,
        "charge": charge,
    }
    assert events.trail() == [*FORWARD, ("StepSucceeded", "ChargeCard"), ("SagaCommitted",)]
    state = agency.state()
    assert state.to_json() == {
        "flights": [flight],
        "hotels": [hotel],
        "charges": [charge],
        "cancellations": 0,
        "refunds": 0,
        "balance_cents": FLIGHT_PRICE + HOTEL_PRICE,
    }
    # Each tool call carried the step's idempotency key.
    keys = [b.idempotency_key for b in (*state.flights, *state.hotels)] + [
        c.idempotency_key for c in state.charges
    ]
    assert keys == [f"{run_id}/0", f"{run_id}/1", f"{run_id}/2"]


async def test_a_declined_card_leaves_the_ledger_empty() -> None:
    agency = TravelAgency(faults=FaultPlan({"charge_card": ToolFaults(declined=True)}))
    events = EventCapture()
    async with agency.connect() as session:
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga(
                travel_saga(session, "Lisbon", 3), trip_context(CARD), sinks=[events]
            )
    # The card step is in doubt, but the tool answered "declined": nothing to refund.
    assert failure.value.report.summary() == "Card Declined! — rolled back: ReserveHotel, BookFlight"
    assert events.trail() == [
        *FORWARD,
        ("StepFailed", "ChargeCard"),
        ("CompensationStarted", "ReserveHotel"),
        ("CompensationSucceeded", "ReserveHotel"),
        ("CompensationStarted", "BookFlight"),
        ("CompensationSucceeded", "BookFlight"),
        ("SagaRolledBackEvent",),
    ]
    state = agency.state()
    assert state.is_empty
    assert (state.cancellations, state.refunds) == (2, 0)


async def test_a_hotel_slower_than_the_deadline_leaves_the_ledger_empty() -> None:
    agency = TravelAgency(faults=FaultPlan({"reserve_hotel": ToolFaults(latency=Latency.fixed(30))}))
    events = EventCapture()
    async with agency.connect() as session:
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga(
                deadline_after(travel_saga(session, "Lisbon", 3), "BookFlight", 0.3),
                trip_context(CARD),
                sinks=[events],
            )
    assert failure.value.report.failure_kind is FailureKind.TIMEOUT
    assert events.trail() == [
        *FORWARD[:4],
        ("StepTimedOut", "ReserveHotel"),
        ("CompensationStarted", "ReserveHotel"),
        ("CompensationSucceeded", "ReserveHotel"),
        ("CompensationStarted", "BookFlight"),
        ("CompensationSucceeded", "BookFlight"),
        ("SagaRolledBackEvent",),
    ]
    assert agency.state().is_empty


async def test_a_charge_that_times_out_after_taking_effect_is_refunded_by_key() -> None:
    agency = TravelAgency(faults=FaultPlan({"charge_card": ToolFaults(hang_after_effect=1)}))
    async with agency.connect() as session:
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga(
                deadline_after(travel_saga(session, "Lisbon", 3), "ReserveHotel", 0.5),
                trip_context(CARD),
            )
    report = failure.value.report
    assert list(report.compensated) == ["ChargeCard", "ReserveHotel", "BookFlight"]
    state = agency.state()
    assert state.is_empty
    assert (state.cancellations, state.refunds, state.balance_cents) == (2, 1, 0)


async def test_a_compensation_that_fails_twice_then_succeeds_leaves_the_ledger_empty() -> None:
    agency = TravelAgency(
        faults=FaultPlan({"charge_card": ToolFaults(declined=True), "cancel_hotel": ToolFaults(fail_next=2)})
    )
    events = EventCapture()
    async with agency.connect() as session:
        with pytest.raises(SagaRolledBack):
            await WorkflowEngine(compensation_retry=FAST_RETRY).execute_saga(
                travel_saga(session, "Lisbon", 3), trip_context(CARD), sinks=[events]
            )
    assert events.trail()[len(FORWARD) + 1 :] == [
        ("CompensationStarted", "ReserveHotel"),
        ("CompensationFailed", "ReserveHotel"),
        ("CompensationStarted", "ReserveHotel"),
        ("CompensationFailed", "ReserveHotel"),
        ("CompensationStarted", "ReserveHotel"),
        ("CompensationSucceeded", "ReserveHotel"),
        ("CompensationStarted", "BookFlight"),
        ("CompensationSucceeded", "BookFlight"),
        ("SagaRolledBackEvent",),
    ]
    failures = [e for e in events if isinstance(e, CompensationFailed)]
    assert [(e.attempt, str(e.error), e.will_retry) for e in failures] == [
        (1, "cancel_hotel is unavailable (injected failure)", True),
        (2, "cancel_hotel is unavailable (injected failure)", True),
    ]
    assert agency.state().is_empty


async def test_the_card_number_never_reaches_events_or_reports() -> None:
    agency = TravelAgency(faults=FaultPlan({"charge_card": ToolFaults(declined=True)}))
    events = EventCapture()
    async with agency.connect() as session:
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga(
                travel_saga(session, "Lisbon", 3), trip_context(CARD), sinks=[events]
            )
    assert CARD not in repr(events.events)
    assert CARD not in repr(failure.value.report.to_json())


async def test_a_card_number_passed_as_a_number_never_reaches_the_report() -> None:
    events = EventCapture()
    async with TravelAgency().connect() as session:
        card = ToolPairStep(
            session,
            "charge_card",
            "refund_card",
            arguments=lambda ctx: {"amount_cents": 1, "card_number": int(CARD)},
        )
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga([card], AegisContext(), sinks=[events])
    assert failure.value.report.summary() == (
        "a card number is a string of 12 to 19 digits, got a number — rolled back: nothing to undo"
    )
    assert CARD not in repr(events.events)


async def test_default_undo_arguments_are_the_idempotency_key() -> None:
    agency = TravelAgency(faults=FaultPlan({"charge_card": ToolFaults(declined=True)}))
    async with agency.connect() as session:
        flight = ToolPairStep(session, "book_flight", "cancel_flight", name="Fly")
        card = ToolPairStep(
            session,
            "charge_card",
            "refund_card",
            arguments=lambda ctx: {"amount_cents": 1, "card_number": CARD},
        )
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga([(flight, (), {"destination": "Oslo"}), card], AegisContext())
    assert failure.value.report.summary() == "Card Declined! — rolled back: Fly"
    assert agency.state().cancellations == 1
    assert agency.state().is_empty


async def test_a_step_whose_result_key_is_taken_refuses_and_is_not_undone_in_doubt() -> None:
    # Had it stored over the outbound result, its compensation in doubt would have found that
    # result under its key and cancelled the outbound flight a second time.
    agency, events = TravelAgency(), EventCapture()
    async with agency.connect() as session:
        fly = ToolPairStep(session, "book_flight", "cancel_flight", name="Fly", in_doubt=True)
        trip = [(fly, (), {"destination": "Oslo"}), (fly, (), {"destination": "Porto"})]
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga(trip, AegisContext(), sinks=[events])
    assert failure.value.report.summary() == (
        "step 'Fly' did not call 'book_flight': metadata key 'book_flight' already holds an earlier "
        "result; give this step its own result_key — rolled back: Fly#1"
    )
    assert [e.step for e in events if isinstance(e, CompensationStarted)] == ["Fly#1"]
    assert (agency.state().cancellations, agency.state().is_empty) == (1, True)


async def test_positional_saga_args_without_an_arguments_function_are_refused() -> None:
    agency = TravelAgency()
    async with agency.connect() as session:
        step = ToolPairStep(session, "book_flight", "cancel_flight")
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga([(step, ("Oslo",), {})], AegisContext())
    assert str(failure.value.report.cause) == (
        "step 'book_flight': positional saga args need an `arguments` function to name them"
    )


def test_a_tool_pair_needs_tool_names() -> None:
    with pytest.raises(
        SagaDefinitionError, match="ToolPairStep: compensate_tool must be a tool name, got ''"
    ):
        ToolPairStep(object(), "book_flight", "")  # type: ignore[arg-type]


async def test_a_saga_error_inside_the_session_block_arrives_as_itself() -> None:
    """Not wrapped in the MCP client's task-group ExceptionGroup: `except SagaRolledBack` works."""
    agency = TravelAgency(faults=FaultPlan({"charge_card": ToolFaults(declined=True)}))
    with pytest.raises(SagaRolledBack) as failure:
        async with agency.connect() as session:
            await WorkflowEngine().execute_saga(travel_saga(session, "Lisbon", 3), trip_context(CARD))
    assert str(failure.value.__cause__) == "Card Declined!"
    assert agency.state().is_empty


async def test_an_arguments_function_that_returns_no_mapping_refuses_without_calling_the_tool() -> None:
    # dict() would have made {"O": "s"} of a two-letter string and called the tool with it.
    agency, events = TravelAgency(), EventCapture()
    async with agency.connect() as session:
        fly = ToolPairStep(
            session,
            "book_flight",
            "cancel_flight",
            name="Fly",
            in_doubt=True,
            arguments=lambda ctx: ["Os"],  # type: ignore[arg-type, return-value]
        )
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga([fly], AegisContext(), sinks=[events])
    assert failure.value.report.summary() == (
        "step 'Fly' did not call 'book_flight': its arguments function returned list, not a mapping "
        "of tool arguments — rolled back: nothing to undo"
    )
    assert events.trail() == [
        ("SagaStarted",),
        ("StepStarted", "Fly"),
        ("StepFailed", "Fly"),
        ("SagaRolledBackEvent",),
    ]
    assert (agency.state().is_empty, agency.state().cancellations) == (True, 0)


async def test_an_undo_arguments_function_that_returns_no_mapping_leaves_the_step_standing_and_says_why() -> (
    None
):
    agency = TravelAgency(faults=FaultPlan({"charge_card": ToolFaults(declined=True)}))
    async with agency.connect() as session:
        fly = ToolPairStep(
            session,
            "book_flight",
            "cancel_flight",
            name="Fly",
            undo_arguments=lambda ctx, r: None,  # type: ignore[arg-type, return-value]
        )
        card = ToolPairStep(
            session, "charge_card", "refund_card", name="Pay", arguments=lambda ctx: {"card": CARD}
        )
        engine = WorkflowEngine(compensation_retry=RetryPolicy.never())
        with pytest.raises(SagaCompensationFailed) as failure:
            await engine.execute_saga([(fly, (), {"destination": "Oslo"}), card], AegisContext())
    report = failure.value.report
    assert (report.left_standing, [str(f.error) for f in report.compensation_failures]) == (
        ("Fly",),
        ["step 'Fly': its undo_arguments function returned NoneType, not a mapping of tool arguments"],
    )
    assert len(agency.state().flights) == 1


class Decline:
    name = "Pay"

    async def execute(self, ctx: AegisContext) -> None:
        raise ValueError("Card Declined!")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


# Regression guard: frozen metadata and stored results reach a tool as plain JSON.
async def test_tool_arguments_taken_from_the_context_reach_the_tool_as_plain_json() -> None:
    # Metadata is frozen deeply (FrozenDict, tuples), and the step's stored result comes back to
    # its undo arguments frozen; the SDK could not serialize either ("Unable to serialize unknown type").
    received: list[tuple[str, Any]] = []
    app = AegisMCP("trips")

    @app.tool()
    async def book(trip: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        received.append(("book", {"trip": trip, "tags": tags}))
        return {"booking": {"id": "B1", "legs": [trip["city"]]}}

    @app.tool()
    async def cancel(booking: dict[str, Any]) -> dict[str, Any]:
        received.append(("cancel", booking))
        return {}

    ctx = AegisContext().with_metadata({"trip": {"city": "Oslo", "legs": [{"n": 1}]}, "tags": ["a", "b"]})
    async with connect(app) as session:
        step = ToolPairStep(
            session,
            "book",
            "cancel",
            name="Book",
            arguments=lambda ctx: {"trip": ctx.metadata["trip"], "tags": ctx.metadata["tags"]},
            undo_arguments=lambda ctx, result: {"booking": None if result is None else result["booking"]},
        )
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga([step, Decline()], ctx)
    assert failure.value.report.summary() == "Card Declined! — rolled back: Book"
    assert received == [
        ("book", {"trip": {"city": "Oslo", "legs": [{"n": 1}]}, "tags": ["a", "b"]}),
        ("cancel", {"id": "B1", "legs": ["Oslo"]}),
    ]
