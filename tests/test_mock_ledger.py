"""The mock agency's ledger: idempotent by key, never negative, never a double refund, durable in a file.

Its file is its own: another application's database or a saga journal is refused and left untouched,
a ledger written before ledgers were stamped still opens, and amounts are whole cents.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from aegis_nb.saga.durable import SqliteJournal


def test_booking_twice_with_one_key_returns_the_same_booking() -> None:
    ledger = Ledger()
    first = ledger.book(BookingKind.FLIGHT, "Lisbon", "AE101", 20_000, idempotency_key="run/0")
    again = ledger.book(BookingKind.FLIGHT, "Lisbon", "AE101", 20_000, idempotency_key="run/0")
    assert (
        first
        == again
        == Booking(
            "FL-0001", BookingKind.FLIGHT, "Lisbon", "AE101", None, 20_000, BookingStatus.LIVE, "run/0"
        )
    )
    assert ledger.state().flights == (first,)


def test_cancelling_twice_is_a_success_that_changes_nothing() -> None:
    ledger = Ledger()
    hotel = ledger.book(BookingKind.HOTEL, "Porto", "Hotel Porto", 30_000, nights=3)
    assert ledger.cancel(BookingKind.HOTEL, booking_id=hotel.id) == Undo("HT-0001", True)
    assert ledger.cancel(BookingKind.HOTEL, booking_id=hotel.id) == Undo("HT-0001", False)
    assert ledger.state() == LedgerState(flights=(), hotels=(), charges=(), cancellations=1, refunds=0)


def test_refund_happens_once_and_the_balance_never_goes_negative() -> None:
    ledger = Ledger()
    charge = ledger.charge(84_000, "4242", idempotency_key="run/2")
    assert charge == Charge("CH-0001", 84_000, "4242", ChargeStatus.LIVE, "run/2")
    assert ledger.state().balance_cents == 84_000
    assert ledger.refund(charge_id=charge.id) == Undo("CH-0001", True)
    assert ledger.refund(charge_id=charge.id) == Undo("CH-0001", False)
    assert ledger.refund(idempotency_key="run/2") == Undo("CH-0001", False)
    state = ledger.state()
    assert (state.balance_cents, state.refunds, state.is_empty) == (0, 1, True)


def test_undo_by_key_finds_what_that_key_did() -> None:
    ledger = Ledger()
    ledger.book(BookingKind.FLIGHT, "Lisbon", "AE101", 20_000, idempotency_key="run/0")
    assert ledger.cancel(BookingKind.FLIGHT, idempotency_key="run/0") == Undo("FL-0001", True)
    assert ledger.state().is_empty


def test_cancelling_a_key_before_its_booking_arrives_refuses_the_late_booking() -> None:
    ledger = Ledger()
    assert ledger.cancel(BookingKind.HOTEL, idempotency_key="run/1") == Undo(None, False)
    with pytest.raises(LedgerError, match="key 'run/1' was cancelled before the booking arrived"):
        ledger.book(BookingKind.HOTEL, "Porto", "Hotel Porto", 30_000, idempotency_key="run/1")
    assert ledger.refund(idempotency_key="run/2") == Undo(None, False)
    with pytest.raises(LedgerError, match="key 'run/2' was refunded before the charge arrived"):
        ledger.charge(100, "4242", idempotency_key="run/2")
    assert ledger.state().is_empty


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ledger: ledger.cancel(BookingKind.FLIGHT, booking_id="FL-0404"), "no booking 'FL-0404'"),
        (lambda ledger: ledger.refund(charge_id="CH-0404"), "no charge 'CH-0404'"),
        (
            lambda ledger: ledger.cancel(BookingKind.FLIGHT),
            "give exactly one of booking_id or idempotency_key",
        ),
        (
            lambda ledger: ledger.refund(charge_id="CH-1", idempotency_key="k"),
            "give exactly one of charge_id",
        ),
        (lambda ledger: ledger.charge(0, "4242"), "a charge must be positive, got 0 cents"),
    ],
)
def test_bad_operations_are_refused_with_a_clear_message(
    call: Callable[[Ledger], object], message: str
) -> None:
    ledger = Ledger()
    with pytest.raises(LedgerError, match=message):
        call(ledger)
    assert ledger.state().is_empty


def test_cancelling_a_booking_of_the_other_kind_is_refused() -> None:
    ledger = Ledger()
    flight = ledger.book(BookingKind.FLIGHT, "Lisbon", "AE101", 20_000)
    with pytest.raises(LedgerError, match="'FL-0001' is a flight booking, not a hotel"):
        ledger.cancel(BookingKind.HOTEL, booking_id=flight.id)


operations = st.lists(
    st.tuples(st.sampled_from(["charge", "refund_id", "refund_key"]), st.integers(0, 4)), max_size=40
)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_any_sequence_of_charges_and_refunds_keeps_the_books_straight(ops: list[tuple[str, int]]) -> None:
    ledger = Ledger()
    for op, n in ops:
        try:
            if op == "charge":
                ledger.charge(100 * (n + 1), "4242", idempotency_key=f"k{n}")
            elif op == "refund_id":
                ledger.refund(charge_id=f"CH-{n + 1:04d}")
            else:
                ledger.refund(idempotency_key=f"k{n}")
        except LedgerError:
            pass
        state = ledger.state()
        assert state.balance_cents >= 0
    # One charge per key at most, each refunded at most once.
    state = ledger.state()
    keys_charged = {n for op, n in ops if op == "charge"}
    assert len(state.charges) + state.refunds <= len(keys_charged)


def test_a_file_ledger_survives_a_sigkill_of_its_process(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    script = (
        "import os, signal\n"
        "from aegis_nb.mock.ledger import Ledger, BookingKind\n"
        f"ledger = Ledger({str(path)!r})\n"
        "ledger.book(BookingKind.FLIGHT, 'Lisbon', 'AE101', 20000, idempotency_key='run/0')\n"
        "ledger.charge(5000, '4242', idempotency_key='run/2')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    assert done.returncode == -9
    reopened = Ledger(path)
    state = reopened.state()
    assert [b.id for b in state.flights] == ["FL-0001"]
    assert [c.id for c in state.charges] == ["CH-0001"]
    # The idempotency record survived with the effect: retrying after the crash books nothing new.
    again = reopened.book(BookingKind.FLIGHT, "Lisbon", "AE101", 20_000, idempotency_key="run/0")
    assert again.id == "FL-0001"
    assert len(reopened.state().flights) == 1
    reopened.close()


@pytest.mark.parametrize(
    ("price", "nights", "message"),
    [
        (0, 1, "a booking's price must be positive, got 0 cents"),
        (-500, None, "a booking's price must be positive, got -500 cents"),
        (30_000, 0, "a stay must last at least one night, got 0"),
        (30_000, -2, "a stay must last at least one night, got -2"),
    ],
)
def test_a_booking_without_a_positive_price_or_stay_is_refused_as_a_ledger_error(
    price: int, nights: int | None, message: str
) -> None:
    # The table's CHECK would raise sqlite3.IntegrityError, which callers catching LedgerError miss.
    ledger = Ledger()
    with pytest.raises(LedgerError) as refused:
        ledger.book(BookingKind.HOTEL, "Porto", "Hotel Porto", price, nights=nights, idempotency_key="k")
    assert str(refused.value) == message
    assert ledger.state() == LedgerState(flights=(), hotels=(), charges=(), cancellations=0, refunds=0)
    # Nothing was recorded under the key: a correct booking with it goes through.
    assert ledger.book(
        BookingKind.HOTEL, "Porto", "Hotel Porto", 30_000, nights=1, idempotency_key="k"
    ).id == ("HT-0001")


def test_a_path_that_cannot_be_a_ledger_is_refused_as_a_ledger_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing-dir" / "ledger.db"
    with pytest.raises(LedgerError) as refused:
        Ledger(missing)
    assert str(refused.value) == f"cannot open {str(missing)!r} as a ledger: unable to open database file"
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n" * 100)
    with pytest.raises(LedgerError) as refused:
        Ledger(notes)
    assert str(refused.value) == f"cannot open {str(notes)!r} as a ledger: file is not a database"
    assert notes.read_text() == "not a database\n" * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_state_is_one_snapshot_even_when_another_connection_commits_between_its_reads(
    tmp_path: Path,
) -> None:
    # Two processes may share a file ledger. Another connection books a flight and charges for it
    # exactly when the reader is about to read the charges (the trace callback runs as a statement
    # starts): a snapshot shows neither, never the charge without its flight.
    path = tmp_path / "ledger.db"
    reader, writer = Ledger(path), Ledger(path)
    written: list[str] = []

    def write_before_the_charges_are_read(sql: str) -> None:
        if "FROM charges" in sql and not written:
            written.append(writer.book(BookingKind.FLIGHT, "Lisbon", "AE101", 20_000).id)
            written.append(writer.charge(20_000, "4242").id)

    reader._db.set_trace_callback(write_before_the_charges_are_read)
    during = reader.state()
    reader._db.set_trace_callback(None)
    assert written == ["FL-0001", "CH-0001"]
    assert (during.flights, during.charges) == ((), ())
    after = reader.state()
    assert ([b.id for b in after.flights], [c.id for c in after.charges]) == (["FL-0001"], ["CH-0001"])
    reader.close()
    writer.close()


def test_a_ledger_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """It keeps cards' last digits, as a journal keeps step arguments: 0600, as journals are."""
    path = tmp_path / "ledger.db"
    ledger = Ledger(path)
    ledger.charge(55500, "4242", idempotency_key="k/0")
    modes = {file.name: file.stat().st_mode & 0o777 for file in tmp_path.iterdir()}
    ledger.close()

    assert modes == {"ledger.db": 0o600, "ledger.db-wal": 0o600, "ledger.db-shm": 0o600}


# -- the ledger's file -----------------------------------------------------------------------------


def tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return sorted(name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))


# Regression guard: a ledger refuses another application's database and leaves it untouched.
def test_a_ledger_refuses_another_applications_database_and_leaves_it_untouched(tmp_path: Path) -> None:
    # It used to add its tables (and switch the file to WAL); a `bookings` table of the other
    # application's then failed every call with sqlite3.OperationalError instead.
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE bookings (id INTEGER PRIMARY KEY, guest TEXT)")
    before = path.read_bytes()
    with pytest.raises(LedgerError) as refused:
        Ledger(path)
    assert str(refused.value) == (
        f"cannot open {str(path)!r} as a ledger: it holds another application's tables (bookings); "
        "give the ledger a file of its own"
    )
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


# Regression guard: a ledger refuses a saga journal.
@pytest.mark.anyio
async def test_a_ledger_refuses_a_saga_journal(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SqliteJournal(path):
        pass
    with pytest.raises(LedgerError) as refused:
        Ledger(path)
    assert str(refused.value) == (
        f"cannot open {str(path)!r} as a ledger: it is an aegis_nb saga journal; "
        "give the ledger a file of its own"
    )
    assert tables(path) == ["events", "runs"]


# Regression guard: a ledger written before ledgers were stamped still opens.
def test_a_ledger_written_before_ledgers_were_stamped_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with closing(Ledger(path)) as ledger:
        ledger.book(BookingKind.FLIGHT, "Oslo", "AE101", 20_000)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA application_id = 0")  # as earlier versions left the file
    with closing(Ledger(path)) as reopened:
        assert [b.id for b in reopened.state().flights] == ["FL-0001"]
    assert tables(path) == ["bookings", "charges", "sqlite_sequence", "voided_keys"]


# Regression guard: an amount that is not whole cents is refused, and the ledger stays readable.
def test_amounts_that_are_not_whole_cents_are_refused_and_the_ledger_stays_readable() -> None:
    # 10.5 cents was stored as it was, and every later state() raised ValueError.
    ledger = Ledger()
    refusals = []
    for act in (
        lambda: ledger.charge(10.5, "4242"),  # type: ignore[arg-type]
        lambda: ledger.book(BookingKind.HOTEL, "Rome", "Hotel Rome", 9_000, nights=1.5),  # type: ignore[arg-type]
        lambda: ledger.book(BookingKind.FLIGHT, "Rome", "AE1", True),
    ):
        with pytest.raises(LedgerError) as refused:
            act()
        refusals.append(str(refused.value))
    assert refusals == [
        "a charge must be an int, got 10.5",
        "a stay's nights must be an int, got 1.5",
        "a booking's price must be an int, got True",
    ]
    assert ledger.state().is_empty
