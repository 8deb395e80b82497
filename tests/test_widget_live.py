"""The live view without a front end: coalescing driven by a hand-moved clock, the static bundle that
replaces the live output, replay, IPython display of runs, and no secret anywhere in the widget."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from aegis_nb.diagram import fold, render_svg, render_text
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.scrubbing import ScrubbedError
from aegis_nb.kernel.values import Secret
from aegis_nb.notebook import (
    Coalescer,
    LiveView,
    ReplayView,
    SagaDiagram,
    register_display,
    run_bundle,
    static_bundle,
    unregister_display,
)
from aegis_nb.notebook.render import live_html
from aegis_nb.notebook.static import MERMAID_MIME
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.outcome import SagaRun
from tests.test_diagram_scenarios import SCENARIOS, many_steps


@dataclass
class Timer:
    due: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeScheduler:
    """A clock moved by hand and the timers armed on it."""

    time: float = 0.0
    timers: list[Timer] = field(default_factory=list)

    def now(self) -> float:
        return self.time

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.time + delay, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        """Move the clock, firing due timers in order."""
        end = self.time + seconds
        while True:
            due = sorted((t for t in self.timers if not t.cancelled and t.due <= end), key=lambda t: t.due)
            if not due:
                break
            timer = due[0]
            self.timers.remove(timer)
            self.time = timer.due
            timer.callback()
        self.time = end


@dataclass
class RecordingSurface:
    shown: list[Any] = field(default_factory=list)
    replaced: list[dict[str, str]] = field(default_factory=list)
    redrawn: list[dict[str, str]] = field(default_factory=list)  # the fallback's pictures

    def show(self, widget: Any) -> None:
        self.shown.append(widget)

    def redraw(self, picture: Callable[[], dict[str, str]]) -> None:
        self.redrawn.append(picture())

    def replace(self, bundle: dict[str, str]) -> None:
        self.replaced.append(bundle)


def feed(view: LiveView, events: tuple[SagaEvent, ...], clock: FakeScheduler, step: float) -> None:
    for event in events:
        view(event)
        clock.advance(step)


# -- coalescing ---------------------------------------------------------------------------------


def test_coalescer_flushes_at_most_once_per_interval_and_never_misses_the_last() -> None:
    clock = FakeScheduler()
    flushed: list[float] = []
    coalescer = Coalescer(lambda: flushed.append(clock.time), interval=0.05, scheduler=clock)
    for _ in range(1000):  # 1,000 changes in 0.1 s
        coalescer.poke()
        clock.advance(0.0001)
    # Two flushes while changes pour in, and the trailing one at 0.1 s shows the last of them.
    assert flushed == [0.0, pytest.approx(0.05), pytest.approx(0.1)]
    assert not coalescer.pending
    coalescer.poke()  # right after a flush: throttled, owed
    assert coalescer.pending
    # mypy keeps `pending` narrowed to False across poke() (it does not re-read properties).
    clock.advance(0.05)  # type: ignore[unreachable]
    assert len(flushed) == 4
    assert not coalescer.pending


def test_coalescer_trailing_flush_shows_a_change_that_was_throttled() -> None:
    clock = FakeScheduler()
    flushed: list[float] = []
    coalescer = Coalescer(lambda: flushed.append(clock.time), interval=0.05, scheduler=clock)
    coalescer.poke()
    clock.advance(0.01)
    coalescer.poke()  # throttled: a trailing flush is armed for t = 0.05
    assert flushed == [0.0]
    clock.advance(10.0)  # nothing else happens for a long time: the view is not left stale
    assert flushed == [0.0, 0.05]


def test_coalescer_final_flush_cancels_the_trailing_one() -> None:
    clock = FakeScheduler()
    flushed: list[float] = []
    coalescer = Coalescer(lambda: flushed.append(clock.time), interval=0.05, scheduler=clock)
    coalescer.poke()
    clock.advance(0.01)
    coalescer.poke()
    coalescer.flush_now()
    clock.advance(1.0)
    assert flushed == [0.0, 0.01]


def test_coalescer_rejects_a_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval must be finite seconds >= 0"):
        Coalescer(lambda: None, interval=-1)


# -- the live view ------------------------------------------------------------------------------


def test_ten_thousand_events_make_a_bounded_number_of_redraws() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    sent: list[str] = []
    view.widget.comm.publish_msg = lambda *args, **kwargs: sent.append(args[0])  # count comm messages
    events = many_steps(3400, fail_at=2500)  # 10,002 events
    assert len(events) > 10_000
    feed(view, events, clock, step=0.0001)  # 1 s of events at 10,000 per second
    assert view.redraws <= 1.0 / 0.05 + 2
    assert len(sent) == view.redraws  # one state update per redraw, nothing else
    assert view.model == fold(events)
    assert surface.replaced == [static_bundle(fold(events))]


def test_the_sink_only_records_and_the_flush_draws() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    waiting = view._html.value
    events = SCENARIOS["fail_third"]()
    for event in events:
        view(event)
    assert view._html.value == waiting  # nothing drawn on the engine's hot path
    assert surface.replaced == []
    clock.advance(0.0)  # the loop gets a turn: one redraw, and the run is over, so it goes static
    assert view.redraws == 1
    assert surface.replaced == [static_bundle(fold(events))]
    assert render_svg(fold(events)) in view._html.value


def test_the_view_shows_on_start_redraws_while_running_and_becomes_static_at_the_end() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    events = SCENARIOS["fail_third"]()
    seen: list[str] = []
    for event in events:
        view(event)
        clock.advance(0.06)  # slower than the interval: every event is drawn
        seen.append(view._html.value)
    assert surface.shown == [view.widget]
    assert [re.search(r'data-events="(\d+)"', html).group(1) for html in seen] == [  # type: ignore[union-attr]
        str(n) for n in range(1, len(events) + 1)
    ]
    assert surface.replaced == [static_bundle(fold(events))]
    assert seen[-1].startswith(live_html(fold(events), [])[:200])
    # Each redraw before the end also gave the fallback (shown where no widget is drawn) its picture.
    assert len(surface.redrawn) == len(events) - 1
    assert all(sorted(picture) == ["text/html", "text/plain"] for picture in surface.redrawn)
    assert all('<img src="data:image/svg+xml;base64,' in picture["text/html"] for picture in surface.redrawn)


def test_elapsed_time_keeps_moving_while_a_step_runs() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    events = SCENARIOS["fail_third"]()
    view(events[0])
    view(events[1])  # BookFlight.execute() called; no event for a while
    clock.advance(0.0)
    assert view.redraws == 0  # a run's first picture waits one interval: it may be over by then
    clock.advance(0.05)
    assert "3 steps · 50.0 ms · run 0f1e2d3c" in view._html.value
    clock.advance(2.5)  # one redraw per second while nothing happens
    assert view.redraws == 3
    assert "3 steps · 2.05 s · run 0f1e2d3c" in view._html.value
    for event in events[2:]:
        view(event)
    clock.advance(5.0)
    assert view.redraws == 4  # the run ended: the last redraw, then no more ticking
    assert surface.replaced == [static_bundle(fold(events))]


def test_static_bundle_is_an_img_data_uri_of_the_svg_plus_text() -> None:
    model = fold(SCENARIOS["fail_third"]())
    bundle = static_bundle(model)
    assert set(bundle) == {"text/html", "text/plain"}
    assert bundle["text/plain"] == render_text(model)
    match = re.fullmatch(
        r'<div class="aegis-static" style="overflow-x:auto;max-width:100%">'
        r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)" '
        r'alt="book_vacation: rolled back — Card Declined! — rolled back: ReserveHotel, BookFlight" '
        r'style="max-width:none"/></div>',
        bundle["text/html"],
    )
    assert match is not None
    assert base64.b64decode(match.group(1)).decode("utf-8") == render_svg(model)


def test_a_second_run_on_the_same_engine_gets_a_new_output() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    first = SCENARIOS["success"]()
    second = many_steps(3)
    feed(view, first, clock, 0.01)
    feed(view, second, clock, 0.01)
    assert len(surface.shown) == 2
    assert surface.replaced == [static_bundle(fold(first)), static_bundle(fold(second))]


@pytest.mark.anyio
async def test_attached_to_an_engine_the_view_follows_its_runs_and_detaches() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    run = await engine.run_saga([Step("A"), Step("B", fail=True)], AegisContext(), name="attached")
    view.flush()
    view.detach(engine)
    await engine.run_saga([Step("C")], AegisContext(), name="unseen")
    assert view.events == run.events
    assert surface.replaced == [run_bundle(run)]


@pytest.mark.anyio
async def test_with_the_default_scheduler_the_run_ends_static_on_either_backend() -> None:
    """asyncio: redraws run on loop timers; trio (no asyncio timers): they run inline, throttled."""
    surface = RecordingSurface()
    view = LiveView(surface=surface)
    run = await WorkflowEngine().run_saga([Step("A"), Step("B", fail=True)], AegisContext(), sinks=[view])
    view.flush()
    assert surface.shown == [view.widget]
    assert surface.replaced == [run_bundle(run)]
    assert 1 <= view.redraws <= 3


@pytest.mark.anyio
async def test_secrets_never_reach_the_widget_or_the_static_bundle() -> None:
    token = "sk-live-0a1b2c3d"
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface, log_lines=50)
    ctx = AegisContext({"api_key": Secret(token)})
    run = await WorkflowEngine().run_saga([Step("A"), Step("Leak", fail=True)], ctx, sinks=[view])
    view.flush()
    assert run.error is not None
    # The step really did put it in its error: the engine chained a scrubbed stand-in instead.
    assert isinstance(run.error.__cause__, ScrubbedError)
    assert token not in str(run.error.__cause__)
    html = view._html.value
    assert "***" in html
    assert token not in html
    assert all(token not in value for value in surface.replaced[0].values())
    assert token not in view.replay().widget.value


# -- replay and display ---------------------------------------------------------------------------


def test_replay_slider_shows_the_diagram_after_each_event() -> None:
    events = SCENARIOS["fail_third"]()
    replay = ReplayView(events)
    assert replay.widget.count == replay.position == len(events)
    for count in (1, 6, 9, len(events)):
        replay.position = count
        assert replay.widget.position == count
        assert render_svg(fold(events[:count])) in replay.widget.value
        assert f"event {count} of {len(events)}" in replay.widget.value


def test_replay_of_the_live_views_last_run() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    events = SCENARIOS["timeout"]()
    feed(view, events, clock, 0.01)
    assert view.replay().events == events


def test_replay_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="nothing to replay"):
        ReplayView(())


@pytest.mark.anyio
async def test_registered_display_shows_a_run_as_its_static_diagram() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance()
    assert shell.display_formatter is not None
    try:
        run = await WorkflowEngine().run_saga([Step("A"), Step("B", fail=True)], AegisContext(), name="shown")
        register_display(shell)
        register_display(shell)  # idempotent
        data, _ = shell.display_formatter.format(run)
        assert data == run_bundle(run)
        unregister_display(shell)
        data, _ = shell.display_formatter.format(run)
        assert data == {"text/plain": repr(run)}
    finally:
        InteractiveShell.clear_instance()


def test_saga_diagram_offers_every_format() -> None:
    events = SCENARIOS["fail_second"]()
    diagram = SagaDiagram(SagaRun(events, None, None))
    model = fold(events)
    assert diagram.model == model
    assert diagram._repr_mimebundle_() == static_bundle(model)
    assert diagram.mermaid_view()._repr_mimebundle_() == {
        MERMAID_MIME: diagram.mermaid,
        "text/plain": diagram.mermaid,
    }
    fallback = diagram.graph(dot=None)._repr_mimebundle_()
    assert fallback["text/plain"].startswith(
        "graphviz `dot` is not installed; showing the sequence diagram instead\n"
    )
    assert 'class="aegis-note"' in fallback["text/html"]


class Step:
    """A step that succeeds, or fails naming whatever secret its context holds."""

    def __init__(self, name: str, *, fail: bool = False) -> None:
        self.name = name
        self.fail = fail

    async def execute(self, ctx: AegisContext) -> AegisContext:
        if self.fail:
            secret = ctx.metadata.get("api_key")
            raise RuntimeError(f"refused key {secret.reveal() if secret else 'none'}")
        return ctx

    async def compensate(self, ctx: AegisContext) -> None:
        pass


def test_a_run_over_within_one_interval_is_drawn_once_at_its_end() -> None:
    # A loop turn mid-run (an asyncio rollback runs in a task of its own) used to redraw the
    # half-run diagram, which for a 1,000-step saga cost more than the saga itself.
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    events = SCENARIOS["fail_third"]()
    middle = len(events) // 2
    for event in events[:middle]:
        view(event)
    clock.advance(0.01)  # the loop's turn, well within the interval
    assert view.redraws == 0
    for event in events[middle:]:
        view(event)
    clock.advance(0.0)
    assert view.redraws == 1
    assert surface.replaced == [static_bundle(fold(events))]
