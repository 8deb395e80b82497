"""The documentation's travel saga as three tool-pair steps over the mock agency, and a server for it.

BookFlight -> ReserveHotel -> ChargeCard. Each result lands in the metadata (``flight``, ``hotel``,
``charge``); the charge is the sum of the two prices, paid with the card kept as a `Secret`. Each
undo cancels by the id its execute got back, or, when the step is compensated in doubt (its call
timed out and may have acted), by the idempotency key. All three are in doubt by nature: a booking
whose answer never came may still have been made.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolError
from aegis_nb.kernel.values import Secret
from aegis_nb.mock.agency import CardNumber, card_number_problem
from aegis_nb.saga.definition import SagaEntry
from aegis_nb.saga.durable.journal import SqliteJournal
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.session import ToolCaller, connect
from aegis_nb.server.tool_step import ToolPairStep

CARD_KEY = "card"
"""Metadata key of the card number (a `Secret`) that ChargeCard pays with."""


def _undo_by(id_field: str) -> Any:
    def undo_arguments(ctx: AegisContext, result: Mapping[str, Any] | None) -> dict[str, Any]:
        if result is not None:
            return {id_field: result[id_field]}
        return {"idempotency_key": ctx.idempotency_key}

    return undo_arguments


def _charge_arguments(ctx: AegisContext) -> dict[str, Any]:
    card = ctx.metadata.get(CARD_KEY)
    if not isinstance(card, Secret):
        raise TypeError(f"ChargeCard needs the card number as a Secret in metadata[{CARD_KEY!r}]")
    total = ctx.metadata["flight"]["price_cents"] + ctx.metadata["hotel"]["price_cents"]
    return {"amount_cents": total, "card_number": card.reveal()}


def travel_steps(
    session: ToolCaller, *, compensation_retry: RetryPolicy | None = None
) -> tuple[ToolPairStep, ToolPairStep, ToolPairStep]:
    """BookFlight, ReserveHotel and ChargeCard on `session` (a mock agency or a compatible server)."""
    return (
        ToolPairStep(
            session,
            "book_flight",
            "cancel_flight",
            name="BookFlight",
            result_key="flight",
            undo_arguments=_undo_by("booking_id"),
            compensation_retry=compensation_retry,
            in_doubt=True,
        ),
        ToolPairStep(
            session,
            "reserve_hotel",
            "cancel_hotel",
            name="ReserveHotel",
            result_key="hotel",
            undo_arguments=_undo_by("booking_id"),
            compensation_retry=compensation_retry,
            in_doubt=True,
        ),
        ToolPairStep(
            session,
            "charge_card",
            "refund_card",
            name="ChargeCard",
            result_key="charge",
            arguments=_charge_arguments,
            undo_arguments=_undo_by("charge_id"),
            compensation_retry=compensation_retry,
            in_doubt=True,
        ),
    )


def travel_saga(
    session: ToolCaller, destination: str, nights: int, *, compensation_retry: RetryPolicy | None = None
) -> list[SagaEntry]:
    """The saga list for one trip: fly to `destination`, stay `nights`, pay for both."""
    return trip(travel_steps(session, compensation_retry=compensation_retry), destination, nights)


def trip(
    steps: tuple[ToolPairStep, ToolPairStep, ToolPairStep], destination: str, nights: int
) -> list[SagaEntry]:
    """The saga list for one trip on `steps` (from `travel_steps`): the trip's data are saga arguments."""
    flight, hotel, card = steps
    return [
        (flight, (), {"destination": destination}),
        (hotel, (), {"city": destination, "nights": nights}),
        (card, (), {}),
    ]


def trip_context(card_number: str, **metadata: Any) -> AegisContext:
    """A starting context holding the card as a `Secret` (it never reaches an output)."""
    return AegisContext({**metadata, CARD_KEY: Secret(card_number)})


def travel_app(
    agency: Any = None,
    *,
    session: ToolCaller | None = None,
    engine: WorkflowEngine | None = None,
    journal: str | os.PathLike[str] | None = None,
    workflow_timeout: float | None = 30.0,
    name: str = "travel-agent",
) -> AegisMCP:
    """An `AegisMCP` serving ``book_trip`` and ``list_bookings`` over the mock agency.

    Give `agency` (a `TravelAgency`, or a server object, `StdioServerParameters` or URL for `connect`:
    the app then holds one session on it while it runs) or an open `session` to use as it is.
    With `journal` (a SQLite file) every trip is journaled, and on start-up, once connected to the
    agency, the app rolls back the trips a crash left half done: its three steps are built once and
    registered with the journal by name, so recovery finds them again.
    """
    from aegis_nb.mock.agency import TravelAgency

    if (agency is None) == (session is None):
        raise TypeError("travel_app needs exactly one of agency or session")
    target = agency.server if isinstance(agency, TravelAgency) else agency
    sessions: list[ToolCaller] = [] if session is None else [session]
    steps = travel_steps(_HeldSession(sessions))

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[dict[str, Any]]:
        if target is None:
            yield {}
            return
        async with connect(target) as opened:
            sessions.append(opened)
            try:
                yield {}
            finally:
                sessions.remove(opened)

    app = AegisMCP(
        name,
        engine=engine,
        workflow_timeout=workflow_timeout,
        lifespan=lifespan,
        journal=None if journal is None else SqliteJournal(journal, steps=steps),
    )

    @app.workflow("book_trip")
    async def book_trip(
        ctx: AegisContext, destination: str, nights: int, card_number: CardNumber
    ) -> AegisContext:
        """Fly to `destination`, stay `nights` nights and pay by card; all undone if any step fails."""
        if not isinstance(card_number, str):  # typed loosely so that pydantic cannot repeat it
            raise ToolError("book_trip", card_number_problem(card_number))
        return await app.workflow_engine.execute_saga(
            trip(steps, destination, nights), ctx.with_metadata({CARD_KEY: Secret(card_number)})
        )

    @app.tool()
    async def list_bookings() -> dict[str, Any]:
        """The agency's live flights, hotels and charges."""
        return await sessions[-1].call_tool("list_bookings", {})

    return app


class _HeldSession:
    """The session the app holds while it runs, whichever it is: its steps outlive any one session."""

    def __init__(self, sessions: list[ToolCaller]) -> None:
        self._sessions = sessions

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if not self._sessions:
            raise RuntimeError("the travel app is not connected to an agency (is it running?)")
        return await self._sessions[-1].call_tool(name, arguments)


def travel_agent() -> AegisMCP:
    """The travel agent over its own in-memory agency: ``aegis-nb serve aegis_nb.mock.travel:travel_agent``.

    Card ``4000000000000002`` is always declined, so a client can watch a rollback without a fault plan.
    """
    from aegis_nb.mock.agency import TravelAgency

    return travel_app(TravelAgency())
