"""Mock MCP tool servers for prototyping: a travel agency with a ledger and an adjustable fault plan."""

from aegis_nb.kernel.extras import needs_extra

with needs_extra("mcp", "aegis_nb.mock (the mock travel agency)"):
    from aegis_nb.mock.agency import (
        DECLINED,
        DECLINED_TEST_CARD,
        TravelAgency,
        flight_offers,
        hotel_rate_cents,
    )
    from aegis_nb.mock.faults import AGENCY_TOOLS, FaultPlan, FaultPlanError, Latency, ToolFaults
    from aegis_nb.mock.ledger import (
        Booking,
        BookingKind,
        BookingStatus,
        Charge,
        ChargeStatus,
        Ledger,
        LedgerError,
        LedgerState,
        Undo,
    )
    from aegis_nb.mock.ledgertext import LedgerTable
    from aegis_nb.mock.travel import travel_agent, travel_app, travel_saga, travel_steps, trip_context


__all__ = [
    "AGENCY_TOOLS",
    "DECLINED",
    "DECLINED_TEST_CARD",
    "Booking",
    "BookingKind",
    "BookingStatus",
    "Charge",
    "ChargeStatus",
    "FaultPlan",
    "FaultPlanError",
    "Latency",
    "Ledger",
    "LedgerError",
    "LedgerState",
    "LedgerTable",
    "ToolFaults",
    "TravelAgency",
    "Undo",
    "flight_offers",
    "hotel_rate_cents",
    "travel_agent",
    "travel_app",
    "travel_saga",
    "travel_steps",
    "trip_context",
]
