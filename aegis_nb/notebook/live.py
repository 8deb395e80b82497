"""`LiveView`: a sequence diagram that redraws itself while a saga runs and rolls back.

The view is an engine sink: it records each event (cheap, on the engine's hot path) and lets a
`Coalescer` decide when to fold and redraw, at most about 20 times per second and always once more
at the end. When the run ends, its live output is replaced through the display handle by
the static rendering (an ``<img>`` plus text), which a saved notebook keeps; `replay()` then gives a
slider over the finished run's events.

The view follows one run at a time: another run's events are ignored while it follows one. A run
that will never end (interrupted mid-rollback, so no final event comes) is given up on when the task
that started it has finished, or starts another run itself: a task awaits one `run_saga` at a time,
unless the new run is nested in the followed one (run by one of its steps or compensations, or, for
a saga built as it runs, by the code in its ``async with`` block). Whoever awaited the run can also
say it is over with `stop()`, as the magics do.

Members of a parallel group report from tasks of their own, interleaved; a saga built as it runs
names no steps when it starts. Both are drawn as their events come: the diagram's model learns each
lane and group from the step events (`aegis_nb.diagram.SequenceBuilder`).

The widget is an anywidget (`DiagramWidget`): the same view in JupyterLab, Notebook 7, VS Code,
Colab and marimo (where the view is a cell's last expression, ``view``, and runs in other cells
draw in it). While a run is in progress the front end keeps the diagram in view. Where no widget
manager exists, the output swap at the end leaves the static picture.

Typical use (what a magic does)::

    view = LiveView().show()
    run = await engine.run_saga(steps, ctx, sinks=[view])   # or: view.attach(engine)
    view.flush()                                           # static diagram in place now
    run                                                    # the same static diagram
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from types import FrameType
from typing import Any, Protocol

import anyio

from aegis_nb.diagram import SequenceBuilder, SequenceModel, render_svg
from aegis_nb.notebook.coalesce import DEFAULT_INTERVAL, Cancellable, Coalescer, LoopScheduler, Scheduler
from aegis_nb.notebook.display import current_shell, register_display
from aegis_nb.notebook.render import live_html
from aegis_nb.notebook.replay import ReplayView
from aegis_nb.notebook.static import Bundle, static_bundle
from aegis_nb.notebook.surface import JupyterSurface, Surface
from aegis_nb.notebook.widgets import DiagramWidget
from aegis_nb.saga.dynamic import Saga
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import FINAL_EVENT_TYPES, SagaEvent, SagaStarted, StepStarted
from aegis_nb.saga.trace import describe

DEFAULT_LOG_LINES = 8
TICK = 1.0
"""Seconds between redraws while nothing happens, so the elapsed time in the header keeps moving."""


class LiveView:
    """A live diagram of one saga run at a time; call it with events (it is an engine `Sink`).

    As a sink it only records the event and pokes the coalescer: folding, rendering and sending happen
    in the flushes, on the event loop, so the saga is not slowed by its own picture. `interval` bounds
    the redraw rate; `scheduler` (clock and timer) and `surface` (where it is displayed) are injectable
    so tests drive time and output by hand. With `static_at_end` the live output becomes the static
    rendering at the first flush after its run ended; `flush()` does that at once. `canvas` is where
    the diagram's HTML goes instead of the view's own widget (the explorer's pane).
    """

    def __init__(
        self,
        *,
        interval: float = DEFAULT_INTERVAL,
        scheduler: Scheduler | None = None,
        surface: Surface | None = None,
        log_lines: int = DEFAULT_LOG_LINES,
        static_at_end: bool = True,
        canvas: Canvas | None = None,
    ) -> None:
        self._run_id: str | None = None
        self._ended = True  # no run followed (none yet, or it ended): the next SagaStarted begins one
        self._owner: anyio.TaskInfo | None = None  # the task that started the followed run
        self._frame: FrameType | None = None  # the engine's outermost frame running it (see _abandoned)
        self._events: list[SagaEvent] = []
        self._builder = SequenceBuilder()
        self._folded = 0  # how many of `_events` the builder has seen
        self._finished: tuple[SagaEvent, ...] = ()
        self._log_lines = max(1, log_lines)
        self._surface: Surface = surface if surface is not None else JupyterSurface()
        self._static_at_end = static_at_end
        self._live = False  # a live output is on screen and not yet replaced
        # The front end shows the widget itself (marimo), or the canvas is on screen: no output of
        # its own to show or swap.
        self._placed = canvas is not None
        waiting = live_html(self._builder.snapshot(), ["waiting for a saga to start"])
        # With a canvas of its own the view makes no widget: a widget made outside a cell (by a
        # button's handler) fails in marimo, and one nobody shows is wasted.
        self._widget = DiagramWidget(value=waiting) if canvas is None else None
        self._html: Canvas = canvas if canvas is not None else self.widget
        self._html.value = waiting
        self._scheduler: Scheduler = scheduler if scheduler is not None else LoopScheduler()
        self._coalescer = Coalescer(self._redraw, interval=interval, scheduler=self._scheduler)
        self._started_at = 0.0  # scheduler time at SagaStarted, for the ticking elapsed time
        self._tick: Cancellable | None = None

    # -- showing --------------------------------------------------------------------------------

    @property
    def widget(self) -> DiagramWidget:
        """The anywidget view (drawn with the CSS class ``aegis-live``)."""
        if self._widget is None:
            self._widget = DiagramWidget(value=self._html.value)
        return self._widget

    def show(self) -> LiveView:
        """Display the live widget as a new output (done automatically when a run starts)."""
        shell = current_shell()
        if shell is not None:
            register_display(shell)
        self._surface.show(self.widget)
        self._live = True
        return self

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return self.widget._repr_mimebundle_(include=include, exclude=exclude)

    def _display_(self) -> DiagramWidget:
        """What marimo shows for this object: the widget, which every later run then draws in."""
        self._placed = True
        return self.widget

    # -- observing ------------------------------------------------------------------------------

    def attach(self, engine: WorkflowEngine) -> LiveView:
        """Follow every run of `engine` (one at a time) until `detach`."""
        engine.subscribe(self)
        return self

    def detach(self, engine: WorkflowEngine) -> None:
        engine.unsubscribe(self)

    def __call__(self, event: SagaEvent) -> None:
        """The sink: record `event`, and have the view redrawn soon (right away after the last one)."""
        if event.run_id != self._run_id:
            if not isinstance(event, SagaStarted):
                return  # not the start of a run: an event of a run this view does not follow
            caller = _current_task()
            if not self._ended:
                if not self._abandoned(caller):
                    return  # another run, while this view follows one
                self.stop()  # the followed run will never end; the new run gets an output of its own
            self._start(event, caller)
        self._events.append(event)
        if type(event) in FINAL_EVENT_TYPES:
            self._ended = True
            self._frame = None  # a finished frame keeps the run's locals alive
            # Now, not in the redraw the coalescer runs later: `replay()` right after the run's
            # `await` must get this run.
            self._finished = tuple(self._events)
            self._coalescer.finish()
        else:
            self._coalescer.poke()

    def _abandoned(self, caller: anyio.TaskInfo | None) -> bool:
        """Whether the followed (unended) run will never end, as `caller` starts another run.

        Its task has finished, or `caller` is that task: a task awaits one run at a time, so it left
        the followed one without its final event. Unless the followed run's engine frame is still on
        the caller's stack: the new run is nested in one of its steps or compensations (on trio a
        compensation runs in the run's own task, so the last event alone cannot tell). Events fed
        without a task (by hand) never give a run up.
        """
        owner = self._owner
        if owner is None:
            return False
        if _task_finished(owner):  # first: a new task may reuse a finished one's id
            return True
        if caller is None or owner != caller:
            return False
        if self._frame is None:  # fed by hand, not by an engine: a step's start is all there is to go on
            return not isinstance(self._events[-1], StepStarted)
        return not _on_stack(self._frame)

    def stop(self) -> None:
        """Stop following the current run, which will send no more events: its caller is done with it.

        The view is brought up to date and, if the run never ended (interrupted mid-rollback), its
        picture stays as it stopped: static, without the ticking clock. The next run starts afresh.
        """
        self._ended = True
        self._frame = None
        if self._run_id is None:  # the caller gave up before any run started (its deadline had passed)
            self._html.value = live_html(self._builder.snapshot(), ["no saga ran"])
            return
        self._coalescer.flush_now()

    def _start(self, event: SagaStarted, owner: anyio.TaskInfo | None) -> None:
        if self._coalescer.pending:
            self._coalescer.flush_now()  # the previous run's last redraw (and static swap) first
        self._run_id = event.run_id
        self._owner = owner
        self._frame = None if owner is None else _engine_frame()
        self._started_at = self._scheduler.now()
        self._ended = False
        self._events = []
        self._builder = SequenceBuilder()
        self._folded = 0
        self._coalescer.defer()  # a run that ends within one interval is drawn once, at its end
        if not self._live and not self._placed:
            self.show()

    def flush(self) -> None:
        """Bring the view up to date now (and, once its run ended, swap in the static rendering)."""
        self._coalescer.flush_now()

    def settle(self) -> None:
        """Run the redraw that is waiting for the loop, if one is, now.

        For the end of a cell: a run that ended in it has its static picture swapped in at the
        loop's next turn, which may come after the cell finished, too late for nbclient to store it.
        """
        if self._coalescer.pending:
            self._coalescer.flush_now()

    def _catch_up(self) -> None:
        events, builder = self._events, self._builder
        for event in events[self._folded :]:
            builder.feed(event)
        self._folded = len(events)

    def _redraw(self) -> None:
        self._catch_up()
        model = self._builder.snapshot()
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        if not self._ended and self._run_id is not None:
            # While a step runs no event arrives: keep the header's elapsed time moving.
            elapsed = max(model.elapsed, self._scheduler.now() - self._started_at)
            model = dataclasses.replace(model, elapsed=elapsed)
            self._tick = self._scheduler.call_later(TICK, self._coalescer.poke)
        svg = render_svg(model)
        recent = [describe(event) for event in self._events[-self._log_lines :]]
        html = live_html(model, recent, earlier=len(self._events) - len(recent), svg=svg)
        widget = self._widget
        if widget is not None and self._html is widget:
            with widget.hold_sync():  # one message: kept in view exactly while its run runs
                widget.follow = not self._ended and self._run_id is not None
                widget.value = html
        else:
            self._html.value = html
        if self._ended and self._run_id is not None and self._static_at_end and self._live:
            self._surface.replace(static_bundle(model, svg=svg))
            self._live = False
        elif self._live:
            # Where no widget manager draws the widget, its fallback output grows instead.
            self._surface.redraw(lambda: static_bundle(model, svg=svg))

    # -- reading --------------------------------------------------------------------------------

    @property
    def model(self) -> SequenceModel:
        """The current run's sequence model (immutable snapshot)."""
        self._catch_up()
        return self._builder.snapshot()

    @property
    def events(self) -> tuple[SagaEvent, ...]:
        """The current run's events so far."""
        return tuple(self._events)

    @property
    def redraws(self) -> int:
        """How many times the widget was redrawn (each is one message to the front end)."""
        return self._coalescer.flushes

    def static_bundle(self) -> Bundle:
        """The current diagram as the static bundle (``<img>`` data URI plus text)."""
        return static_bundle(self.model)

    def replay(self) -> ReplayView:
        """A slider over the last finished run's events (the current run's, if none finished)."""
        return ReplayView(self._finished or tuple(self._events))


class Canvas(Protocol):
    """Where a live view puts its diagram's HTML: anything with a settable ``value``."""

    value: str


def _current_task() -> anyio.TaskInfo | None:
    """The task delivering an event; None outside one (no event loop: events fed by hand)."""
    try:
        return anyio.get_current_task()
    except RuntimeError:
        return None


_ENGINE_PACKAGE = WorkflowEngine.__module__.rpartition(".")[0] + "."


_DYNAMIC_ENTRY = Saga.__aenter__.__code__


def _engine_frame() -> FrameType | None:
    """The frame that stays on its task's stack exactly while the run delivering an event runs.

    For a list saga it is the run's own frame (``run_saga``, say), the outermost of the engine code
    delivering the event; frames between the engine and the sink (a wrapping sink's) are skipped.
    A saga built as it runs starts in ``Saga.__aenter__``, which returns before its first step: its
    run runs while the caller's frame that holds the ``async with`` block does. None if no engine
    is delivering the event.
    """
    frame: FrameType | None = sys._getframe(1)
    outermost = None
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith(_ENGINE_PACKAGE):
            outermost = frame
        elif outermost is not None:
            break
        frame = frame.f_back
    if outermost is not None and outermost.f_code is _DYNAMIC_ENTRY:
        return outermost.f_back
    return outermost


def _on_stack(target: FrameType) -> bool:
    """Whether `target` is running in the current call stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame is target:
            return True
        frame = frame.f_back
    return False


def _task_finished(task: anyio.TaskInfo) -> bool:
    """Whether `task` has finished: its coroutine is closed (anyio offers no other test on both backends)."""
    coro = task.coro
    if inspect.iscoroutine(coro):
        return inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
    if inspect.isgenerator(coro):
        return inspect.getgeneratorstate(coro) == inspect.GEN_CLOSED
    return False  # some other awaitable: nothing to tell, so assume it still runs
