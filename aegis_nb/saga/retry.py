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
        for name in ("initial_delay", "max_delay"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not isinstance(self.multiplier, int | float) or self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier!r}")

    @classmethod
    def never(cls) -> RetryPolicy:
        """One attempt, no retry."""
        return cls(attempts=1, initial_delay=0.0)

    def delays(self) -> Iterator[float]:
        """The waits between consecutive attempts (``attempts - 1`` of them)."""
        delay = self.initial_delay
        for _ in range(self.attempts - 1):
            yield min(delay, self.max_delay)
            delay *= self.multiplier
