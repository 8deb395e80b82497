"""Where a magic's live diagram goes, so a saved notebook and nbval both see the same outputs.

A blocking ``%aegis_saga`` shows the live widget as an output whose text form is empty, and after
it a fallback output that grows with the diagram where no widget can be drawn (see `surface`); at
the end it blanks both and displays the static diagram as a new output. A notebook saved by a front
end (which applies the blanking) and a fresh run checked by nbval (which ignores updates to earlier
outputs) then hold the same text: an empty line and the diagram. A background run cannot add an
output to its cell once the cell is done (it would land in whichever cell runs then), so it keeps
`LiveView`'s own surface, which swaps the live output for the diagram in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aegis_nb.notebook.fallback import LiveFallback
from aegis_nb.notebook.mime import WIDGET_MIME, widget_view
from aegis_nb.notebook.static import Bundle

__all__ = ["WIDGET_MIME", "CellSurface", "widget_view"]  # the mime helpers too, as before


class CellSurface:
    """Live widget first (blank as text) and its fallback, then the static diagram as a new output."""

    __slots__ = ("_fallback", "_handle")

    def __init__(self) -> None:
        self._handle: Any = None
        self._fallback: LiveFallback | None = None

    def show(self, widget: Any) -> None:
        from IPython import display as ipython_display

        show: Any = ipython_display.display  # untyped in IPython
        self._handle = show({WIDGET_MIME: widget_view(widget), "text/plain": ""}, raw=True, display_id=True)
        self._fallback = LiveFallback(widget.fallback_id)

    def redraw(self, picture: Callable[[], Bundle]) -> None:
        if self._fallback is not None:
            self._fallback.draw(picture())

    def replace(self, bundle: Bundle) -> None:
        from IPython import display as ipython_display

        if self._fallback is not None:
            self._fallback.clear()
            self._fallback = None
        if self._handle is not None:
            self._handle.update({"text/plain": ""}, raw=True)
            self._handle = None
        show: Any = ipython_display.display
        show(bundle, raw=True)
