"""What the live view costs a saga: a 1,000-step saga with a `LiveView` attached (no front end) vs
detached, as a ratio taken in one run; and how many messages the view sends for 10,000 events.

Targets: ratio under 1.5x; messages bounded by the coalescing (about 20 per second of saga), not by
the number of events. Run with ``.venv/bin/python bench/widget.py`` (``make bench`` runs it too).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from aegis_nb import AegisContext, WorkflowEngine
from aegis_nb.notebook import LiveView, NullSurface

STEPS = 1_000
ROUNDS = 15


class Trivial:
    """A step that does nothing (or only pauses on the loop), so a run measures the engine and its sinks."""

    def __init__(self, fail: bool = False, *, pause: float | None = None) -> None:
        self.fail = fail
        self.pause = pause

    async def execute(self, ctx: AegisContext) -> None:
        if self.pause is not None:
            await asyncio.sleep(self.pause)
        if self.fail:
            raise RuntimeError("the last step fails")

    async def compensate(self, ctx: AegisContext) -> None:
        if self.pause is not None:
            await asyncio.sleep(self.pause)


def counted_view() -> tuple[LiveView, list[int]]:
    """A view with no front end whose comm messages are counted."""
    view = LiveView(surface=NullSurface())
    sent = [0]
    comm: Any = view.widget.comm

    def publish(*args: Any, **kwargs: Any) -> None:
        sent[0] += 1

    comm.publish_msg = publish
    return view, sent


async def one_run(saga: list[Trivial], view: LiveView | None) -> tuple[float, float]:
    """Seconds until the saga returned, and until the view was final too (its last redraw done)."""
    engine = WorkflowEngine()
    started = time.perf_counter()
    await engine.run_saga(saga, AegisContext(), name="bench", sinks=[view] if view is not None else [])
    returned = time.perf_counter()
    if view is not None:
        view.flush()
    return returned - started, time.perf_counter() - started


async def ratio(fail_last: bool) -> tuple[float, float, float]:
    saga = [Trivial() for _ in range(STEPS - 1)] + [Trivial(fail=fail_last)]
    detached: list[float] = []
    attached: list[float] = []
    drawn: list[float] = []
    for _ in range(ROUNDS):  # interleaved, so both see the same machine noise
        detached.append((await one_run(saga, None))[0])
        saga_time, final_time = await one_run(saga, counted_view()[0])
        attached.append(saga_time)
        drawn.append(final_time)
    return statistics.median(detached), statistics.median(attached), statistics.median(drawn)


async def messages_for(events_wanted: int) -> tuple[int, int, float, int]:
    """A failing saga of `events_wanted` events whose steps pause on the loop (so redraws can run).

    Every tenth step waits on a real timer (0.1 ms asked, about a millisecond in practice), the
    others only yield, so the saga spans a dozen redraw intervals and the count shows the
    throttling, not only the final redraw.
    """
    steps = events_wanted // 4  # two events per step forward, two per compensation back
    pauses = [1e-4 if position % 10 == 0 else 0.0 for position in range(steps)]
    saga = [Trivial(pause=pause) for pause in pauses[:-1]] + [Trivial(fail=True, pause=pauses[-1])]
    view, sent = counted_view()
    started = time.perf_counter()
    run = await WorkflowEngine().run_saga(saga, AegisContext(), name="bench", sinks=[view])
    took = time.perf_counter() - started
    view.flush()
    return len(run.events), sent[0], took, view.redraws


async def main() -> None:
    print(f"live view overhead, {STEPS}-step saga, median of {ROUNDS} interleaved runs (no front end):")
    for fail_last in (False, True):
        bare, with_view, drawn = await ratio(fail_last)
        what = "last step fails (999 compensations)" if fail_last else "all steps succeed"
        r = with_view / bare
        verdict = "ok" if r < 1.5 else "OVER TARGET"
        print(
            f"  {what:<37} detached {bare * 1e3:6.2f} ms  attached {with_view * 1e3:6.2f} ms  "
            f"ratio {r:4.2f}x (target < 1.5x: {verdict});  "
            f"until the final diagram is drawn {drawn * 1e3:6.2f} ms ({drawn / bare:4.2f}x)"
        )
    events, sent, took, redraws = await messages_for(10_004)
    bound = took / 0.05 + 2
    verdict = "ok" if sent <= bound else "OVER BOUND"
    print(
        f"messages for {events} events: {sent} comm messages ({redraws} redraws) in {took * 1e3:.0f} ms "
        f"of saga; coalescing bound {bound:.0f} ({verdict})"
    )


if __name__ == "__main__":
    asyncio.run(main())
