"""The event loop's clock, resolved once per run so hot loops avoid per-call backend lookups."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import sniffio

Clock = Callable[[], float]


def loop_clock() -> Clock:
    """A zero-argument function reading the running loop's clock (the clock deadlines are set on)."""
    library = sniffio.current_async_library()
    if library == "asyncio":
        import asyncio

        return asyncio.get_running_loop().time
    if library == "trio":
        import trio

        return trio.current_time
    return anyio.current_time
