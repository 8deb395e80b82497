"""Coalescing redraws: at most one flush per interval, a trailing flush so nothing stays stale, and
always a final one.

The Jupyter server drops iopub messages past about 1,000 per second, widget updates included: a view
that redrew on every event of a fast saga would go stale and could leave its cell at ``[*]``. Flushes
run from a timer on the event loop, never inside `poke()`, so an engine sink that pokes costs next to
nothing; with no timer available (no running loop) they run inline instead. The clock and the timer
are injected (`Scheduler`), so tests drive time by hand instead of sleeping.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Protocol

DEFAULT_INTERVAL = 0.05
"""Seconds between redraws: 20 per second at most per view."""


class Cancellable(Protocol):
    def cancel(self) -> object: ...


class Scheduler(Protocol):
    """Where a coalescer reads the time and arms its trailing timer."""

    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable | None:
        """Run `callback` after `delay` seconds; ``None`` when no timer is available right now."""
        ...


class LoopScheduler:
    """Monotonic time; timers on the running asyncio loop (the kernel's), none outside a loop.

    Without a timer (plain sync code, or trio) the coalescer still throttles and still flushes at
    the end; only the trailing redraw between two distant events is lost.
    """

    def now(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return loop.call_later(delay, callback)


class Coalescer:
    """Calls `flush` at most once per `interval` for any number of `poke()`s, and never misses the last."""

    __slots__ = ("_flush", "_interval", "_last", "_scheduler", "_timer", "flushes")

    def __init__(
        self,
        flush: Callable[[], None],
        *,
        interval: float = DEFAULT_INTERVAL,
        scheduler: Scheduler | None = None,
    ) -> None:
        if not (isinstance(interval, int | float) and math.isfinite(interval) and interval >= 0):
            raise ValueError(f"interval must be finite seconds >= 0, got {interval!r}")
        self._flush = flush
        self._interval = float(interval)
        self._scheduler: Scheduler = scheduler or LoopScheduler()
        self._last = -math.inf
        self._timer: Cancellable | None = None
        self.flushes = 0
        """How many times `flush` ran (each one is one redraw sent to the front end)."""

    @property
    def pending(self) -> bool:
        """Whether a trailing flush is armed."""
        return self._timer is not None

    def poke(self) -> None:
        """Something changed: make sure a flush follows, at most one interval after the last one."""
        if self._timer is None:
            self._arm(self._last + self._interval - self._scheduler.now())

    def defer(self) -> None:
        """Count now as a flush: the next one comes at the earliest one interval from now.

        For the start of something fast: a saga that ends within an interval is drawn once, at its
        end, instead of once at its first loop turn (with most of it still to come) and again.
        """
        self._last = self._scheduler.now()

    def finish(self) -> None:
        """The last change: flush as soon as the loop is free (inline when there is no loop)."""
        self.cancel()
        self._arm(0.0)

    def flush_now(self) -> None:
        """Flush immediately, in the caller, and drop any pending flush."""
        self._run(self._scheduler.now())

    def _arm(self, wait: float) -> None:
        timer = self._scheduler.call_later(max(0.0, wait), self._fire)
        if timer is None:
            if wait <= 0:
                self._run(self._scheduler.now())
            # else: throttled, and no timer to come back with; the next poke or finish() flushes.
        else:
            self._timer = timer

    def cancel(self) -> None:
        """Drop a pending trailing flush."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self._run(self._scheduler.now())

    def _run(self, now: float) -> None:
        self.cancel()
        self._last = now
        self.flushes += 1
        self._flush()
