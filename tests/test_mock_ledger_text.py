"""The mock ledger as a person reads it: one currency everywhere, counts in words, a table in notebooks."""

from __future__ import annotations

import pytest

from aegis_nb.kernel.text import counted
from aegis_nb.mock import (
    Booking,
    BookingKind,
    BookingStatus,
    Charge,
    ChargeStatus,
    LedgerState,
    LedgerTable,
)
from aegis_nb.mock.ledgertext import ledger_change, money, undone_text

EMPTY = LedgerState(flights=(), hotels=(), charges=(), cancellations=0, refunds=0)
FLIGHT = Booking("FL-0001", BookingKind.FLIGHT, "Lisbon", "AE729", None, 21000, BookingStatus.LIVE, "k/0")
HOTEL = Booking("HT-0001", BookingKind.HOTEL, "Lisbon", "Hotel Lisbon", 3, 34500, BookingStatus.LIVE, "k/1")
CHARGE = Charge("CH-0001", 55500, "4242", ChargeStatus.LIVE, "k/2")
TRIP = LedgerState(flights=(FLIGHT,), hotels=(HOTEL,), charges=(CHARGE,), cancellations=1, refunds=0)


@pytest.mark.parametrize(
    ("n", "noun", "text"), [(0, "step", "0 steps"), (1, "step", "1 step"), (2, "refund", "2 refunds")]
)
def test_counts_read_as_words(n: int, noun: str, text: str) -> None:
    assert counted(n, noun) == text


def test_money_is_euros_with_thousands() -> None:
    assert [money(0), money(55500), money(123456789)] == ["€0.00", "€555.00", "€1,234,567.89"]


def test_undone_text_says_one_cancellation_not_one_cancellations() -> None:
    assert undone_text(1, 0) == "1 cancellation, 0 refunds"


def test_a_state_summarizes_itself_in_one_line() -> None:
    assert (EMPTY.summary(), TRIP.summary()) == ("empty", "1 flight, 1 hotel, 1 charge (€555.00 held)")
    assert ledger_change(EMPTY, TRIP) == "travel ledger: empty → 1 flight, 1 hotel, 1 charge (€555.00 held)"


def test_the_table_as_text() -> None:
    assert repr(LedgerTable(TRIP)) == (
        "travel ledger: 1 flight, 1 hotel, 1 charge (€555.00 held)\n"
        "  FL-0001  flight AE729 → Lisbon           €210.00\n"
        "  HT-0001  hotel Hotel Lisbon, 3 nights    €345.00\n"
        "  CH-0001  charge on card …4242            €555.00\n"
        "(undone so far: 1 cancellation, 0 refunds)"
    )


def test_a_state_displays_as_its_table_in_a_notebook() -> None:
    assert TRIP._repr_html_() == LedgerTable(TRIP)._repr_html_()
    assert EMPTY._repr_html_() == (
        '<table class="aegis-ledger" style="border-collapse:collapse;font-size:13px">'
        '<caption style="text-align:left;font-weight:600">travel ledger: empty</caption>'
        "<thead><tr><th>id</th><th>what</th><th>amount</th></tr></thead>"
        '<tbody><tr><td colspan="3" style="color:#15803d">nothing live: the ledger is clean</td></tr></tbody>'
        '</table><div style="color:#64748b;font-size:12px">undone so far: 0 cancellations, 0 refunds</div>'
    )
