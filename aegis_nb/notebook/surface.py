"""Where a live view is shown, and how its output is swapped for the static rendering at the end.

A surface shows the widget, and after it a fallback output for front ends with no widget manager:
each redraw updates the fallback through its display handle with the diagram as a picture, which
a drawn widget hides (see `fallback`), so the diagram grows there too. At the end the fallback is
blanked and the static rendering takes the widget's place. Injected into `LiveView`, so tests and
benchmarks run without a kernel or a front end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from aegis_nb.notebook.fallback import LiveFallback
from aegis_nb.notebook.mime import WIDGET_MIME, widget_view
from aegis_nb.notebook.static import Bundle


class Surface(Protocol):
    """A place for one live output at a time."""

    def show(self, widget: Any) -> None:
        """Display `widget` as a new output."""
        ...

    def redraw(self, picture: Callable[[], Bundle]) -> None:
        """The diagram changed: update the fallback output, if any, with `picture()` (made only then)."""
        ...

    def replace(self, bundle: Bundle) -> None:
        """Replace the output shown last with `bundle` (a mime-type dict)."""
        ...


class JupyterSurface:
    """IPython display with a display id, so the live widget can be replaced in place."""

    __slots__ = ("_fallback", "_handle")

    def __init__(self) -> None:
        self._handle: Any = None
        self._fallback: LiveFallback | None = None

    def show(self, widget: Any) -> None:
        from IPython import display as ipython_display

        show: Any = ipython_display.display  # untyped in IPython
        bundle = {WIDGET_MIME: widget_view(widget), "text/plain": ""}  # the fallback holds the text
        self._handle = show(bundle, raw=True, display_id=True)
        self._fallback = LiveFallback(widget.fallback_id)

    def redraw(self, picture: Callable[[], Bundle]) -> None:
        if self._fallback is not None:
            self._fallback.draw(picture())

    def replace(self, bundle: Bundle) -> None:
        if self._fallback is not None:
            self._fallback.clear()
            self._fallback = None
        if self._handle is not None:
            self._handle.update(bundle, raw=True)


class NullSurface:
    """Shows nothing: for benchmarks and code that only wants the widget object."""

    __slots__ = ()

    def show(self, widget: Any) -> None:
        """Nothing to show on."""

    def redraw(self, picture: Callable[[], Bundle]) -> None:
        """No fallback to update (and `picture` is not made)."""

    def replace(self, bundle: Bundle) -> None:
        """Nothing to replace."""
