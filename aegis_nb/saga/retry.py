"""How often, and how patiently, a failed compensation is tried again."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff: `attempts` tries in all, waiting `initial_delay * multiplier**k` between them.

    Compensations must eventually succeed or be reported, so the default is patient but bounded.
    """

    attempts: int = 3
    initial_delay: float = 0.1
    multiplier: float = 2.0
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"attempts must be an int >= 1, got {self.attempts!r}")
        # Checked here, not met mid-rollback: a NaN, infinite or float-overflowing value would make
        # a delay that anyio.sleep refuses (or an OverflowError) and abort the rollback.
        for name in ("initial_delay", "max_delay"):
            value = getattr(self, name)
            if not _finite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not _finite(self.multiplier) or self.multiplier < 1:
            raise ValueError(f"multiplier must be a finite number >= 1, got {self.multiplier!r}")

    @classmethod
    def never(cls) -> RetryPolicy:
        """One attempt, no retry."""
        return cls(attempts=1, initial_delay=0.0)

    def delays(self) -> Iterator[float]:
        """The waits between consecutive attempts (``attempts - 1`` of them)."""
        delay = min(self.initial_delay, self.max_delay)
        for _ in range(self.attempts - 1):
            yield delay
            # Capped as it grows: uncapped, it would overflow to inf (or raise, for ints) in the end.
            delay = min(delay * self.multiplier, self.max_delay)


def _finite(value: object) -> bool:
    """Whether `value` is a number (not a bool) that fits a float and is neither NaN nor infinite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False
