"""Regressions: the live view's replay and run following, lone surrogates in renderings, one-line
`describe`, and `@step` on a `functools.partial`.

The live view tests drive time by hand with the widget tests' fake scheduler: nothing sleeps.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from xml.etree import ElementTree

import anyio
import pytest

from aegis_nb import SagaDefinitionError, step
from aegis_nb.diagram import fold, render_svg
from aegis_nb.kernel.context import AegisContext
from aegis_nb.notebook import LiveView, SagaDiagram, run_bundle, static_bundle
from aegis_nb.notebook.render import live_html
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.trace import describe
from aegis_nb.testing import EventCapture
from tests.test_diagram_scenarios import Script
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


# -- replay right after a run -----------------------------------------------------------------------


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


# -- runs that never end, and runs that overlap -------------------------------------------------------


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
    assert [type(event).__name__ for event in interrupted][-1] == "CompensationStarted"
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


# -- lone surrogates --------------------------------------------------------------------------------


def upload_fails(name: str) -> tuple[SagaEvent, ...]:
    """A run whose error names the file `name`, in a saga named after it too."""
    script = Script(("Upload",), saga=f"upload {name}")
    return script.step_fails(0, "Upload", f"cannot upload {name}").end_rollback()


UNDECODABLE = os.fsdecode(b"report-\xff.pdf")  # how Python hands out an undecodable file name
REPLACED = "report-\ufffd.pdf"


def test_a_lone_surrogate_is_drawn_as_the_replacement_character() -> None:
    events, expected = upload_fails(UNDECODABLE), upload_fails(REPLACED)
    assert UNDECODABLE != REPLACED
    svg = render_svg(fold(events))
    assert svg == render_svg(fold(expected))
    assert ElementTree.fromstring(svg.encode("utf-8")).get("aria-label") == (
        f"upload {REPLACED}: rolled back — cannot upload {REPLACED} — rolled back: nothing to undo"
    )
    diagram, same = SagaDiagram(events), SagaDiagram(expected)
    assert diagram._repr_mimebundle_() == static_bundle(fold(expected))
    assert diagram.graph(dot=None)._repr_mimebundle_() == same.graph(dot=None)._repr_mimebundle_()
    assert diagram.mermaid_view()._repr_mimebundle_() == same.mermaid_view()._repr_mimebundle_()
    assert repr(diagram) == repr(same)


def test_a_lone_surrogate_in_a_run_id_still_draws() -> None:
    events = Script(("Upload",), run_id="run-\udcff").step_fails(0, "Upload", "gone").end_rollback()
    svg = render_svg(fold(events))
    assert ElementTree.fromstring(svg.encode("utf-8")).get("id") == "aegis-376c351358-4"


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


# -- describe: one line per event -------------------------------------------------------------------


def test_describe_puts_multi_line_names_and_errors_on_one_line() -> None:
    stuck = (
        Script(("Reserve", "Validate\nStep"), saga="book\nvacation")
        .step_ok(0, "Reserve")
        .step_fails(1, "Validate\nStep", "2 validation errors for Booking\nnights\n  Input should be > 0")
        .undo_fails(0, "Reserve", "refund refused:\n  ledger locked", 1, will_retry=False)
        .end_rollback()
    )
    assert [describe(event) for event in stuck] == [
        "saga book vacation started: Reserve -> Validate Step (no deadline)",
        "  -> Reserve.execute()",
        "  <- Reserve ok (10.0 ms)",
        "  -> Validate Step.execute()",
        "  x  Validate Step error: 2 validation errors for Booking nights Input should be > 0 (10.0 ms)",
        "  <~ Reserve.compensate()",
        "  !! Reserve compensation failed: refund refused: ledger locked (giving up)",
        "saga book vacation STUCK after 22.1 ms: 2 validation errors for Booking nights Input should be > 0"
        " — could not undo: Reserve (refund refused: ledger locked, after 1 attempt)"
        " — rolled back: nothing to undo",
    ]
    rolled_back = (
        Script(("Reserve", "Validate"), saga="book")
        .step_ok(0, "Reserve")
        .step_fails(1, "Validate", "bad\r\ninput")
        .undo(0, "Reserve")
        .end_rollback()
    )
    assert describe(rolled_back[-1]) == "saga book rolled back in 25.1 ms: bad input — rolled back: Reserve"


# -- @step on a partial -----------------------------------------------------------------------------


async def book(ctx: AegisContext, destination: str) -> AegisContext:
    """Book a flight to `destination`."""
    return ctx.with_metadata({"destination": destination})


@pytest.mark.anyio
async def test_a_step_of_an_async_partial_is_named_after_the_function() -> None:
    booked = step(functools.partial(book, destination="LIS"))
    assert (booked.name, booked.__doc__, repr(booked)) == ("book", book.__doc__, "<step book>")
    renamed = step(name="BookFlight")(functools.partial(functools.partial(book), "LIS"))
    assert renamed.name == "BookFlight"
    for made in (booked, renamed):
        made.compensation(_undo)
    run = await WorkflowEngine().run_saga([booked], AegisContext())
    assert run.context is not None
    assert dict(run.context.metadata) == {"destination": "LIS"}


async def _undo(ctx: AegisContext) -> None:
    pass


def test_a_step_with_no_name_to_take_asks_for_one() -> None:
    async def unnamed(ctx: AegisContext) -> None:
        pass

    unnamed.__name__ = ""
    with pytest.raises(
        SagaDefinitionError,
        match=r"^cannot tell the name of step functools\.partial\(<function .*unnamed at 0x[0-9a-f]+>\): "
        r"give it one with @step\(name=\.\.\.\)$",
    ):
        step(functools.partial(unnamed))
