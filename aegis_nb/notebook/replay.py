"""`ReplayView`: step through a finished run's events with a slider, the diagram at each point.

A saga over fast tools is over in milliseconds, too fast to see it grow; a replay shows it again at
a human pace: press the play button beside the slider (the front end moves the slider, one event
per `interval`, and the kernel draws each), or ``await view.play()`` from a cell (the kernel moves
it, so it plays while the cell runs, as in "Run All"). One widget (`ReplayWidget`, an anywidget)
serves Jupyter's front ends and marimo.

Where no widget can be drawn (nbconvert HTML, GitHub) its output shows the diagram at the point it
was shown at (the whole run, unless moved from code first), as a picture and text.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from aegis_nb.diagram import fold
from aegis_nb.notebook.display import current_shell
from aegis_nb.notebook.fallback import FallbackOutput
from aegis_nb.notebook.render import live_html
from aegis_nb.notebook.static import Bundle, static_bundle
from aegis_nb.notebook.widgets import ReplayWidget
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.trace import describe

CONTINUOUS_LIMIT = 2000
"""Above this many events the diagram redraws when the slider is released, not while it is dragged."""
PLAY_INTERVAL = 0.4
"""Seconds each event stays on screen while the replay plays: slow enough to read the new arrow."""


class ReplayView:
    """A slider (event 1..n) over a run's events, a play button, and the diagram after that event.

    `interval` is the seconds between events when playing. `sleep` is how `play` waits (injectable,
    so tests drive time by hand).
    """

    def __init__(
        self,
        source: SagaRun | Sequence[SagaEvent],
        *,
        interval: float = PLAY_INTERVAL,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.events: tuple[SagaEvent, ...] = tuple(source.events if isinstance(source, SagaRun) else source)
        if not self.events:
            raise ValueError("nothing to replay: the run has no events")
        self.interval = _interval(interval)
        self._sleep = sleep
        self._shown = False
        self._playing = False
        count = len(self.events)
        self.widget = ReplayWidget(
            position=count,
            count=count,
            interval=max(1, round(self.interval * 1000)),
            continuous=count <= CONTINUOUS_LIMIT,
        )
        """The anywidget: the play button, the slider and the diagram."""
        self._output = FallbackOutput(self.static_bundle, self.widget.fallback_id)
        self.widget.on_msg(self._message)
        self.show_until(count)

    @property
    def position(self) -> int:
        """How many events the diagram shows (1..n); setting it redraws."""
        return int(self.widget.position)

    @position.setter
    def position(self, count: int) -> None:
        self.show_until(count)

    def show_until(self, count: int) -> None:
        """Draw the diagram after the first `count` events (clamped to 1..n)."""
        count = max(1, min(int(count), len(self.events)))
        event = self.events[count - 1]
        caption = f"event {count} of {len(self.events)}: {describe(event).strip()}"
        with self.widget.hold_sync():  # one message: the slider and the diagram move together
            self.widget.position = count
            self.widget.value = live_html(fold(self.events[:count]), [caption])

    async def play(self, *, interval: float | None = None) -> None:
        """Show the run growing: from its first event to its last, one every `interval` seconds.

        Displays the view first when it has not been shown yet, so ``await ReplayView(run).play()``
        alone in a cell plays under that cell. Ends on the whole run, which a saved notebook keeps.
        """
        pause = self.interval if interval is None else _interval(interval)
        self._playing = True  # the fallback shows where the replay ends: the whole run
        try:
            self.show_until(1)
            if not self._shown and current_shell() is not None:
                self._ipython_display_()
            for count in range(2, len(self.events) + 1):
                await self._sleep(pause)
                self.show_until(count)
        finally:
            self._playing = False
        self._output.refresh()

    def _message(self, _: object, content: Any, buffers: object = None) -> None:
        """The front end moved the slider (by hand, or its play button did)."""
        if isinstance(content, dict) and isinstance(content.get("position"), int):
            self.show_until(content["position"])

    def static_bundle(self) -> Bundle:
        """The diagram after the slider's event (the whole run while playing), as a picture and text."""
        shown = len(self.events) if self._playing else self.position
        return static_bundle(fold(self.events[:shown]))

    def _ipython_display_(self) -> None:
        self._shown = True
        self._output.display(self.widget)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return self.widget._repr_mimebundle_(include=include, exclude=exclude)

    def _display_(self) -> ReplayWidget:
        """What marimo shows for this object: the widget (marimo draws anywidget, with no fallback)."""
        self._shown = True
        return self.widget


def _interval(seconds: float) -> float:
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"interval must be finite seconds >= 0, got {seconds!r}")
    return float(seconds)
