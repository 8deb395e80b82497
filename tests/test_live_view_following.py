"""Which run the live view follows, and how it ends when the run does not.

The view follows one run at a time: a run started while it is followed, or a saga run by one of its
steps or compensations, does not take it over; the next run does take it over from one that will
never end (interrupted mid-rollback, or abandoned in a finished task); `stop()` leaves such a run
static and ticking no more; a replay right after a run gives that run. Time is moved by hand with
the widget tests' fake scheduler: nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from aegis_nb.diagram import SequenceBuilder, fold
from aegis_nb.kernel.context import AegisContext
from aegis_nb.notebook import LiveView, run_bundle, static_bundle
from aegis_nb.notebook.render import live_html
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.trace import describe
from aegis_nb.testing import EventCapture
from tests.test_untrusted_text import REPLACED, UNDECODABLE, upload_fails
from tests.test_widget_live import FakeScheduler, RecordingSurface, Step


class Interrupted(BaseException):
    """Stands in for the kernel's KeyboardInterrupt, which would stop pytest itself if it escaped."""


class InterruptedUndo:
    """A step whose compensation is interrupted: its run ends without a final event."""

    name = "Book"

    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        raise Interrupted


def live_timers(clock: FakeScheduler) -> int:
    return sum(not timer.cancelled for timer in clock.timers)


# Regression guard: a replay right after a run gives that run, before the loop had a turn.
@pytest.mark.anyio
async def test_replay_right_after_a_run_gives_that_run_before_the_loop_had_a_turn() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    await engine.run_saga([Step("First")], AegisContext(), name="first")
    clock.advance(1.0)  # a later cell: the first run's last redraw happened
    second = await engine.run_saga([Step("Second", fail=True)], AegisContext(), name="second")
    assert view.replay().events == second.events  # same cell, no redraw yet
    assert view.redraws == 1


async def abandoned_run(engine: WorkflowEngine) -> list[SagaEvent]:
    """Run a saga interrupted mid-rollback, in the calling task; its events."""
    capture = EventCapture()
    with pytest.raises(Interrupted):
        await engine.run_saga([InterruptedUndo(), Step("Charge", fail=True)], AegisContext(), sinks=[capture])
    return capture


async def abandoned_in_a_finished_task(engine: WorkflowEngine) -> list[SagaEvent]:
    """The same, in a task that then ends (an MCP request that was interrupted, say)."""
    events: list[SagaEvent] = []

    async def request() -> None:
        events.extend(await abandoned_run(engine))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(request)
    return events


# Regression guard: the next run takes the view over from one that will never end.
@pytest.mark.anyio
@pytest.mark.parametrize("abandon", [abandoned_run, abandoned_in_a_finished_task])
async def test_the_next_run_takes_the_view_over_from_one_that_will_never_end(
    abandon: Callable[[WorkflowEngine], Awaitable[list[SagaEvent]]],
) -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    interrupted = await abandon(engine)
    # The interrupt is recorded as the attempt's failure, still owed; no final event follows.
    names = [type(event).__name__ for event in interrupted]
    assert names[-2:] == ["CompensationStarted", "CompensationFailed"]
    clock.advance(2.5)  # the kernel idles: the header's clock ticks
    assert live_timers(clock) == 1
    run = await engine.run_saga([Step("Next")], AegisContext(), name="next")
    clock.advance(0.0)
    # The interrupted run's output keeps its picture where it stopped; the next run gets its own.
    assert surface.shown == [view.widget, view.widget]
    assert surface.replaced == [static_bundle(fold(interrupted)), run_bundle(run)]
    assert view.events == run.events
    assert view.replay().events == run.events
    redraws = view.redraws
    clock.advance(10.0)
    assert (view.redraws, live_timers(clock)) == (redraws, 0)  # no ticking left behind


# Regression guard: a run started while another runs is not shown.
@pytest.mark.anyio
async def test_a_run_started_while_another_runs_is_not_shown() -> None:
    """One run at a time: the view keeps following the run it started with."""
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    inside, release = anyio.Event(), anyio.Event()

    class Waits:
        name = "Waits"

        async def execute(self, ctx: AegisContext) -> None:
            inside.set()
            await release.wait()

        async def compensate(self, ctx: AegisContext) -> None:
            pass

    runs = {}

    async def first() -> None:
        runs["first"] = await engine.run_saga([Waits()], AegisContext(), name="first")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(first)
        await inside.wait()
        runs["second"] = await engine.run_saga([Step("B")], AegisContext(), name="second")
        release.set()
    clock.advance(0.0)
    assert surface.shown == [view.widget]
    assert surface.replaced == [run_bundle(runs["first"])]
    assert view.events == runs["first"].events


# Regression guard: a saga run by a step does not take the view over.
@pytest.mark.anyio
async def test_a_saga_run_by_a_step_does_not_take_the_view_over() -> None:
    """Its task is the followed run's, but the followed run is in that step, not gone."""
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)

    class Outer:
        name = "Outer"

        async def execute(self, ctx: AegisContext) -> None:
            await engine.run_saga([Step("Inner")], AegisContext(), name="inner")

        async def compensate(self, ctx: AegisContext) -> None:
            pass

    run = await engine.run_saga([Outer(), Step("After")], AegisContext(), name="outer")
    clock.advance(0.0)
    assert surface.shown == [view.widget]
    assert surface.replaced == [run_bundle(run)]
    assert view.events == run.events


# Regression guard: the live view of a run with a lone surrogate still goes static.
def test_the_live_view_of_a_run_with_a_lone_surrogate_goes_static() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    events, expected = upload_fails(UNDECODABLE), upload_fails(REPLACED)
    for event in events:
        view(event)
    clock.advance(0.0)
    assert surface.replaced == [static_bundle(fold(expected))]
    assert view._html.value == live_html(fold(expected), [describe(event) for event in expected])
    assert [describe(event) for event in events] == [
        f"saga upload {REPLACED} started: Upload (no deadline)",
        "  -> Upload.execute()",
        f"  x  Upload error: cannot upload {REPLACED} (10.0 ms)",
        f"saga upload {REPLACED} rolled back in 10.0 ms: cannot upload {REPLACED}"
        " — rolled back: nothing to undo",
    ]


# Regression guard: a saga run by a compensation (on trio, in the followed run's task) takes no view over.
@pytest.mark.anyio
async def test_a_saga_run_by_a_compensation_does_not_take_the_view_over() -> None:
    """On trio the compensation runs in the followed run's own task, yet that run is not over."""
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)

    class UndoneBySaga:
        name = "Book"

        async def execute(self, ctx: AegisContext) -> None:
            return None

        async def compensate(self, ctx: AegisContext) -> None:
            await engine.run_saga([Step("Refund")], AegisContext(), name="refund")

    run = await engine.run_saga([UndoneBySaga(), Step("Charge", fail=True)], AegisContext(), name="outer")
    clock.advance(0.0)
    assert surface.shown == [view.widget]
    assert surface.replaced == [run_bundle(run)]
    assert view.events == run.events


# Regression guard: stop() leaves a run interrupted mid-rollback static, its timer gone.
@pytest.mark.anyio
async def test_stop_leaves_a_run_interrupted_mid_rollback_static_and_not_ticking() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    interrupted = await abandoned_run(engine)
    view.stop()  # what a magic does once the run's await is over, however it ended
    assert surface.shown == [view.widget]
    assert surface.replaced == [static_bundle(fold(interrupted))]
    redraws = view.redraws
    clock.advance(10.0)
    assert (view.redraws, live_timers(clock)) == (redraws, 0)


# Regression guard: stop() before any run says no saga ran.
def test_stop_before_any_run_started_says_no_saga_ran() -> None:
    surface = RecordingSurface()
    view = LiveView(scheduler=FakeScheduler(), surface=surface)
    view.stop()
    assert view.widget.value == live_html(SequenceBuilder().snapshot(), ["no saga ran"])
    assert (surface.shown, surface.replaced) == ([], [])
