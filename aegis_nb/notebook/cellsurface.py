"""Where a magic's live diagram goes, so a saved notebook and nbval both see the same outputs.

A blocking ``%aegis_saga`` shows the live widget as an output whose text form is empty, and at the
end blanks that output and displays the static diagram as a new one. A notebook saved by a front
end (which applies the blanking) and a fresh run checked by nbval (which ignores updates to earlier
outputs) then hold the same text: an empty line and the diagram. A background run cannot add an
output to its cell once the cell is done (it would land in whichever cell runs then), so it keeps
`LiveView`'s own surface, which swaps the live output for the diagram in place.
"""

from __future__ import annotations

from typing import Any

from aegis_nb.notebook.static import Bundle

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class CellSurface:
    """Live widget first (blank as text), then the static diagram as a new output of the same cell."""

    __slots__ = ("_handle",)

    def __init__(self) -> None:
        self._handle: Any = None

    def show(self, widget: Any) -> None:
        from IPython import display as ipython_display

        bundle = dict(widget._repr_mimebundle_())
        show: Any = ipython_display.display  # untyped in IPython
        self._handle = show(
            {WIDGET_MIME: bundle.get(WIDGET_MIME), "text/plain": ""}, raw=True, display_id=True
        )

    def replace(self, bundle: Bundle) -> None:
        from IPython import display as ipython_display

        if self._handle is not None:
            self._handle.update({"text/plain": ""}, raw=True)
            self._handle = None
        show: Any = ipython_display.display
        show(bundle, raw=True)
