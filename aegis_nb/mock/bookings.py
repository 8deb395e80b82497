"""What the mock agency's ledger holds and answers: bookings, charges, undos and snapshots, as values.

Separate from `ledger`, which stores them in SQLite, so the values can be read without the storage.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from aegis_nb.mock.ledgertext import LedgerTable, ledger_summary


class BookingKind(enum.Enum):
    FLIGHT = "flight"
    HOTEL = "hotel"

    @property
    def prefix(self) -> str:
        return "FL" if self is BookingKind.FLIGHT else "HT"


class BookingStatus(enum.Enum):
    LIVE = "live"
    CANCELLED = "cancelled"


class ChargeStatus(enum.Enum):
    LIVE = "live"
    REFUNDED = "refunded"


@dataclass(frozen=True, slots=True)
class Booking:
    """A flight (`item` is the flight number, `place` the destination) or a hotel stay."""

    id: str
    kind: BookingKind
    place: str
    item: str
    nights: int | None
    price_cents: int
    status: BookingStatus
    idempotency_key: str | None

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "booking_id": self.id,
            "kind": self.kind.value,
            "place": self.place,
            "item": self.item,
            "price_cents": self.price_cents,
            "status": self.status.value,
        }
        if self.nights is not None:
            data["nights"] = self.nights
        return data


@dataclass(frozen=True, slots=True)
class Charge:
    """Money taken from a card; only the last four digits are ever stored."""

    id: str
    amount_cents: int
    card_last4: str
    status: ChargeStatus
    idempotency_key: str | None

    def to_json(self) -> dict[str, object]:
        return {
            "charge_id": self.id,
            "amount_cents": self.amount_cents,
            "card_last4": self.card_last4,
            "status": self.status.value,
        }


@dataclass(frozen=True, slots=True)
class Undo:
    """What a cancel or refund did: `changed` is False when it was already undone or never done."""

    id: str | None
    changed: bool

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "changed": self.changed}


@dataclass(frozen=True, slots=True)
class LedgerState:
    """What is live right now, and how many undos were applied so far."""

    flights: tuple[Booking, ...]
    hotels: tuple[Booking, ...]
    charges: tuple[Charge, ...]
    cancellations: int
    refunds: int

    @property
    def balance_cents(self) -> int:
        """Money currently held: the sum of live charges (never negative)."""
        return sum(c.amount_cents for c in self.charges)

    @property
    def is_empty(self) -> bool:
        """Nothing live: no flight, no hotel, no charge."""
        return not (self.flights or self.hotels or self.charges)

    def summary(self) -> str:
        """``1 flight, 1 hotel, 1 charge (€555.00 held)``, or ``empty``."""
        return ledger_summary(self)

    def _repr_html_(self) -> str:
        """In a notebook, the live bookings and charges as a table."""
        return LedgerTable(self)._repr_html_()

    def to_json(self) -> dict[str, object]:
        return {
            "flights": [b.to_json() for b in self.flights],
            "hotels": [b.to_json() for b in self.hotels],
            "charges": [c.to_json() for c in self.charges],
            "cancellations": self.cancellations,
            "refunds": self.refunds,
            "balance_cents": self.balance_cents,
        }
