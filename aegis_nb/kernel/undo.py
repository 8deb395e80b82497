"""What a `compensate()` may return to say more than "undone": that it found nothing to undo.

An in-doubt step (a booking whose call timed out) is compensated without knowing whether it acted;
when its undo finds nothing was done, saying "undone" would tell the reader the opposite of the
ledger. Returning `NOTHING_TO_UNDO` makes the rollback record that instead (the event's
``nothing_to_undo``). Any other return value still means "undone", as it always did.
"""

from __future__ import annotations

import enum
from typing import Final


class Undo(enum.Enum):
    """A compensation's own account of itself; a one-member enum, so the sentinel has a type."""

    NOTHING_TO_UNDO = enum.auto()

    def __repr__(self) -> str:
        return f"aegis_nb.{self.name}"


NOTHING_TO_UNDO: Final = Undo.NOTHING_TO_UNDO
"""Returned by a `compensate()` that found its step had done nothing, so there was nothing to undo."""
