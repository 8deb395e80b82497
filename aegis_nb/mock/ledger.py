"""The mock travel agency's books: bookings and card charges, in SQLite (in memory or in a file).

Every tool call is one SQLite transaction that writes its effect together with its idempotency key,
so a file ledger survives a SIGKILL of its process with each call either fully applied or not at
all. Keys make retries safe: booking twice with one key returns the first booking; cancelling or
refunding twice succeeds and changes nothing; cancelling *by key* before the booking exists voids the
key, so a booking that arrives late (the in-doubt case) is refused instead of left standing.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from aegis_nb.kernel.errors import AegisError
from aegis_nb.mock.bookings import (
    Booking,
    BookingKind,
    BookingStatus,
    Charge,
    ChargeStatus,
    LedgerState,
    Undo,
)
from aegis_nb.saga.durable.sqlitefile import APPLICATION_ID as JOURNAL_APPLICATION_ID

__all__ = [  # the values live in `bookings`; they are the ledger's vocabulary, so importable from here
    "APPLICATION_ID",
    "Booking",
    "BookingKind",
    "BookingStatus",
    "Charge",
    "ChargeStatus",
    "Ledger",
    "LedgerError",
    "LedgerState",
    "Undo",
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bookings (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE,
    kind TEXT NOT NULL,
    place TEXT NOT NULL,
    item TEXT NOT NULL,
    nights INTEGER,
    price_cents INTEGER NOT NULL CHECK (price_cents > 0),
    status TEXT NOT NULL,
    idempotency_key TEXT,
    UNIQUE (kind, idempotency_key)
);
CREATE TABLE IF NOT EXISTS charges (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE,
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
    card_last4 TEXT NOT NULL,
    status TEXT NOT NULL,
    idempotency_key TEXT UNIQUE
);
CREATE TABLE IF NOT EXISTS voided_keys (
    kind TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    PRIMARY KEY (kind, idempotency_key)
);
"""


APPLICATION_ID = 0x41654C67
"""SQLite's application id for ledger files ("AeLg"): tells them from other applications' databases."""

_TABLES = frozenset({"bookings", "charges", "voided_keys"})


class LedgerError(AegisError):
    """A ledger operation was refused (unknown id, wrong kind, voided key, a bad amount), or the file
    cannot be opened as a ledger; nothing was changed."""


class Ledger:
    """The agency's state. ``Ledger()`` lives in memory; ``Ledger(path)`` in a durable SQLite file."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        target = ":memory:" if self.path is None else str(self.path)
        if self.path is not None:
            # It keeps cards' last digits: readable by its owner only, as journals are. SQLite gives
            # its -wal and -shm files the same mode.
            with contextlib.suppress(OSError):  # it exists, or its folder does not (said below)
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        # Autocommit mode with explicit BEGIN IMMEDIATE: each call is one write transaction, and two
        # processes sharing a file serialize instead of racing.
        # A missing folder or a file that is not SQLite fails here: say which file, in one line.
        try:
            self._db = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open {target!r} as a ledger: {exc}") from None
        self._lock = threading.Lock()
        try:
            # Checked before anything is written: another application's database (or a journal)
            # is left exactly as it was, not switched to WAL and given the ledger's tables.
            foreign = _foreign(self._db) if self.path is not None else None
            if foreign is None and self.path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
            if foreign is None:
                self._db.executescript(
                    f"BEGIN IMMEDIATE;{_SCHEMA}PRAGMA application_id = {APPLICATION_ID};COMMIT;"
                )
        except sqlite3.Error as exc:
            self._db.close()
            raise LedgerError(f"cannot open {target!r} as a ledger: {exc}") from None
        if foreign is not None:
            self._db.close()
            raise LedgerError(
                f"cannot open {target!r} as a ledger: {foreign}; give the ledger a file of its own"
            )

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every SELECT in it sees the same snapshot, even with another process
        writing the file between them (WAL keeps the snapshot the first SELECT took)."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- bookings ---------------------------------------------------------------------------------

    def book(
        self,
        kind: BookingKind,
        place: str,
        item: str,
        price_cents: int,
        *,
        nights: int | None = None,
        idempotency_key: str | None = None,
    ) -> Booking:
        """Create a live booking, or return the one already made under `idempotency_key`."""
        # Checked here, as `charge` does, so the caller gets a LedgerError, not the table's CHECK.
        _check_int(price_cents, "a booking's price")
        if price_cents <= 0:
            raise LedgerError(f"a booking's price must be positive, got {price_cents} cents")
        if nights is not None:
            _check_int(nights, "a stay's nights")
            if nights <= 0:
                raise LedgerError(f"a stay must last at least one night, got {nights}")
        with self._write() as db:
            if idempotency_key is not None:
                existing = self._booking_by_key(db, kind, idempotency_key)
                if existing is not None:
                    return existing
                if self._is_voided(db, kind.value, idempotency_key):
                    raise LedgerError(
                        f"{kind.value} booking refused: key {idempotency_key!r} was cancelled before "
                        "the booking arrived"
                    )
            cursor = db.execute(
                "INSERT INTO bookings (kind, place, item, nights, price_cents, status, idempotency_key)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (kind.value, place, item, nights, price_cents, BookingStatus.LIVE.value, idempotency_key),
            )
            (count,) = db.execute("SELECT COUNT(*) FROM bookings WHERE kind = ?", (kind.value,)).fetchone()
            booking_id = f"{kind.prefix}-{count:04d}"
            db.execute("UPDATE bookings SET id = ? WHERE seq = ?", (booking_id, cursor.lastrowid))
            return Booking(
                booking_id,
                kind,
                place,
                item,
                nights,
                price_cents,
                BookingStatus.LIVE,
                idempotency_key,
            )

    def cancel(
        self, kind: BookingKind, *, booking_id: str | None = None, idempotency_key: str | None = None
    ) -> Undo:
        """Cancel a booking by id, or the booking made under `idempotency_key` (voiding the key if none)."""
        _one_of(booking_id, idempotency_key)
        with self._write() as db:
            if booking_id is not None:
                booking = self._booking_by_id(db, booking_id)
                if booking is None:
                    raise LedgerError(f"no booking {booking_id!r}")
                if booking.kind is not kind:
                    raise LedgerError(f"{booking_id!r} is a {booking.kind.value} booking, not a {kind.value}")
            else:
                assert idempotency_key is not None
                booking = self._booking_by_key(db, kind, idempotency_key)
                if booking is None:
                    db.execute(
                        "INSERT OR IGNORE INTO voided_keys (kind, idempotency_key) VALUES (?, ?)",
                        (kind.value, idempotency_key),
                    )
                    return Undo(None, False)
            if booking.status is BookingStatus.CANCELLED:
                return Undo(booking.id, False)
            db.execute(
                "UPDATE bookings SET status = ? WHERE id = ?", (BookingStatus.CANCELLED.value, booking.id)
            )
            return Undo(booking.id, True)

    # -- charges ----------------------------------------------------------------------------------

    def charge(self, amount_cents: int, card_last4: str, *, idempotency_key: str | None = None) -> Charge:
        """Take `amount_cents`, or return the charge already made under `idempotency_key`."""
        _check_int(amount_cents, "a charge")
        if amount_cents <= 0:
            raise LedgerError(f"a charge must be positive, got {amount_cents} cents")
        with self._write() as db:
            if idempotency_key is not None:
                existing = self._charge_by_key(db, idempotency_key)
                if existing is not None:
                    return existing
                if self._is_voided(db, "charge", idempotency_key):
                    raise LedgerError(
                        f"charge refused: key {idempotency_key!r} was refunded before the charge arrived"
                    )
            cursor = db.execute(
                "INSERT INTO charges (amount_cents, card_last4, status, idempotency_key) VALUES (?, ?, ?, ?)",
                (amount_cents, card_last4, ChargeStatus.LIVE.value, idempotency_key),
            )
            charge_id = f"CH-{cursor.lastrowid:04d}"
            db.execute("UPDATE charges SET id = ? WHERE seq = ?", (charge_id, cursor.lastrowid))
            return Charge(charge_id, amount_cents, card_last4, ChargeStatus.LIVE, idempotency_key)

    def refund(self, *, charge_id: str | None = None, idempotency_key: str | None = None) -> Undo:
        """Refund a charge in full, once; by id, or the charge made under `idempotency_key`."""
        _one_of(charge_id, idempotency_key, what="charge_id")
        with self._write() as db:
            if charge_id is not None:
                charge = self._charge_by_id(db, charge_id)
                if charge is None:
                    raise LedgerError(f"no charge {charge_id!r}")
            else:
                assert idempotency_key is not None
                charge = self._charge_by_key(db, idempotency_key)
                if charge is None:
                    db.execute(
                        "INSERT OR IGNORE INTO voided_keys (kind, idempotency_key) VALUES ('charge', ?)",
                        (idempotency_key,),
                    )
                    return Undo(None, False)
            if charge.status is ChargeStatus.REFUNDED:
                return Undo(charge.id, False)
            db.execute("UPDATE charges SET status = ? WHERE id = ?", (ChargeStatus.REFUNDED.value, charge.id))
            return Undo(charge.id, True)

    # -- reading ----------------------------------------------------------------------------------

    def state(self) -> LedgerState:
        """A consistent snapshot of the live bookings and charges."""
        with self._read() as db:
            bookings = [_booking(row) for row in db.execute(f"{_BOOKING_SELECT} ORDER BY seq")]
            charges = [_charge(row) for row in db.execute(f"{_CHARGE_SELECT} ORDER BY seq")]
        live = [b for b in bookings if b.status is BookingStatus.LIVE]
        return LedgerState(
            flights=tuple(b for b in live if b.kind is BookingKind.FLIGHT),
            hotels=tuple(b for b in live if b.kind is BookingKind.HOTEL),
            charges=tuple(c for c in charges if c.status is ChargeStatus.LIVE),
            cancellations=sum(b.status is BookingStatus.CANCELLED for b in bookings),
            refunds=sum(c.status is ChargeStatus.REFUNDED for c in charges),
        )

    def _booking_by_key(self, db: sqlite3.Connection, kind: BookingKind, key: str) -> Booking | None:
        row = db.execute(
            f"{_BOOKING_SELECT} WHERE kind = ? AND idempotency_key = ?", (kind.value, key)
        ).fetchone()
        return None if row is None else _booking(row)

    def _booking_by_id(self, db: sqlite3.Connection, booking_id: str) -> Booking | None:
        row = db.execute(f"{_BOOKING_SELECT} WHERE id = ?", (booking_id,)).fetchone()
        return None if row is None else _booking(row)

    def _charge_by_key(self, db: sqlite3.Connection, key: str) -> Charge | None:
        row = db.execute(f"{_CHARGE_SELECT} WHERE idempotency_key = ?", (key,)).fetchone()
        return None if row is None else _charge(row)

    def _charge_by_id(self, db: sqlite3.Connection, charge_id: str) -> Charge | None:
        row = db.execute(f"{_CHARGE_SELECT} WHERE id = ?", (charge_id,)).fetchone()
        return None if row is None else _charge(row)

    def _is_voided(self, db: sqlite3.Connection, kind: str, key: str) -> bool:
        row = db.execute(
            "SELECT 1 FROM voided_keys WHERE kind = ? AND idempotency_key = ?", (kind, key)
        ).fetchone()
        return row is not None

    def __repr__(self) -> str:
        where = "memory" if self.path is None else str(self.path)
        return f"<Ledger in {where}>"


def _foreign(db: sqlite3.Connection) -> str | None:
    """Why the database is not a ledger; None for a ledger (stamped, or from before ledgers were) or
    an empty database."""
    (application_id,) = db.execute("PRAGMA application_id").fetchone()
    if application_id == APPLICATION_ID:
        return None
    rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'sqlite_sequence'")
    tables = {str(name) for (name,) in rows}
    if application_id == 0 and tables in (set(), _TABLES):
        return None
    if application_id == JOURNAL_APPLICATION_ID:
        return "it is an aegis_nb saga journal"
    if application_id != 0:
        return f"it belongs to another application (SQLite application id {application_id:#x})"
    return f"it holds another application's tables ({', '.join(sorted(tables))})"


_BOOKING_SELECT = "SELECT id, kind, place, item, nights, price_cents, status, idempotency_key FROM bookings"
_CHARGE_SELECT = "SELECT id, amount_cents, card_last4, status, idempotency_key FROM charges"


def _booking(row: tuple[object, ...]) -> Booking:
    booking_id, kind, place, item, nights, price, status, key = row
    return Booking(
        str(booking_id),
        BookingKind(kind),
        str(place),
        str(item),
        None if nights is None else int(str(nights)),
        int(str(price)),
        BookingStatus(status),
        None if key is None else str(key),
    )


def _charge(row: tuple[object, ...]) -> Charge:
    charge_id, amount, last4, status, key = row
    return Charge(
        str(charge_id),
        int(str(amount)),
        str(last4),
        ChargeStatus(status),
        None if key is None else str(key),
    )


def _check_int(value: object, what: str) -> None:
    """Amounts are whole cents: SQLite would store 10.5 as it is, and every later `state()` would fail."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LedgerError(f"{what} must be an int, got {value!r}")


def _one_of(target_id: str | None, key: str | None, what: str = "booking_id") -> None:
    if (target_id is None) == (key is None):
        raise LedgerError(f"give exactly one of {what} or idempotency_key")
