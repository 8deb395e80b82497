"""`ReplayView`: step through a finished run's events with a slider, the diagram at each point.

Where no widget can be drawn (nbconvert HTML, GitHub) its output shows the diagram at the point it
was shown at (the whole run, unless moved from code first), as a picture and text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets  # type: ignore[import-untyped]

from aegis_nb.diagram import fold
from aegis_nb.notebook.fallback import FallbackOutput
from aegis_nb.notebook.render import live_html
from aegis_nb.notebook.static import Bundle, static_bundle
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.trace import describe

CONTINUOUS_LIMIT = 2000
"""Above this many events the diagram redraws when the slider is released, not while it is dragged."""


class ReplayView:
    """A slider (event 1..n) over a run's events and the diagram as it stood after that event."""

    def __init__(self, source: SagaRun | Sequence[SagaEvent]) -> None:
        self.events: tuple[SagaEvent, ...] = tuple(source.events if isinstance(source, SagaRun) else source)
        if not self.events:
            raise ValueError("nothing to replay: the run has no events")
        count = len(self.events)
        self.slider = ipywidgets.IntSlider(
            value=count,
            min=1,
            max=count,
            description="event",
            continuous_update=count <= CONTINUOUS_LIMIT,
            layout=ipywidgets.Layout(width="min(100%, 640px)"),
        )
        self._html = ipywidgets.HTML()
        self._output = FallbackOutput(self.static_bundle)
        self.widget = ipywidgets.VBox([self._output.hider, self.slider, self._html])
        self.widget.add_class("aegis-replay")
        self.slider.observe(self._moved, names="value")
        self.show_until(count)

    def show_until(self, count: int) -> None:
        """Draw the diagram after the first `count` events (clamped to 1..n)."""
        count = max(1, min(count, len(self.events)))
        if self.slider.value != count:
            self.slider.value = count  # observed: draws through _moved
            return
        event = self.events[count - 1]
        caption = f"event {count} of {len(self.events)}: {describe(event).strip()}"
        self._html.value = live_html(fold(self.events[:count]), [caption])

    def _moved(self, change: dict[str, Any]) -> None:
        self.show_until(int(change["new"]))

    def static_bundle(self) -> Bundle:
        """The diagram after the slider's event, as a picture and text (no widget needed)."""
        return static_bundle(fold(self.events[: self.slider.value]))

    def _ipython_display_(self) -> None:
        self._output.display(self.widget)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return self.widget._repr_mimebundle_(include=include, exclude=exclude)
