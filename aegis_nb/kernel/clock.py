"""The event loop's clock, resolved once per run so hot loops avoid per-call backend lookups."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import anyio
import sniffio

Clock = Callable[[], float]


def loop_clock() -> Clock:
    """A zero-argument function reading the running loop's clock (the clock deadlines are set on)."""
    library = sniffio.current_async_library()
    if library == "asyncio":
        loop = asyncio.get_running_loop()
        # The default loops read time.monotonic through a Python method; calling it directly
        # gives the same reading at half the cost. Other loops (uvloop) keep their own clock.
        if type(loop).time is asyncio.BaseEventLoop.time:
            return time.monotonic
        return loop.time
    if library == "trio":
        import trio

        return trio.current_time
    return anyio.current_time
