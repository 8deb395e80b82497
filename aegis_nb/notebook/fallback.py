"""A widget shown with a static fallback output after it, which a drawn widget hides.

Where a widget manager draws the widget (JupyterLab, Notebook 7, nbconvert HTML online, from its
saved state), a hidden ``<style>`` inside the widget hides the fallback. Where none does (nbconvert
HTML offline, a notebook reopened without widget state, GitHub), the fallback shows: a picture
(``text/html`` with an ``<img>``, which untrusted notebooks keep) and ``text/plain``. The fallback
has a display id and is sent again when the widget's state changes in a way worth keeping (a
finished run), so a saved or exported notebook holds the last state, not the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets  # type: ignore[import-untyped]

from aegis_nb.notebook.cellsurface import WIDGET_MIME
from aegis_nb.notebook.static import Bundle

FALLBACK_CLASS = "aegis-fallback"


class FallbackOutput:
    """Displays a widget and then `static()` as its fallback; `refresh()` updates every fallback shown.

    `hider` must be one of the widget's children: the invisible widget whose style hides this
    widget's fallbacks wherever the widget itself is drawn. Its model id keys the fallbacks.
    """

    __slots__ = ("_handles", "_static", "hider")

    def __init__(self, static: Callable[[], Bundle]) -> None:
        self._static = static
        self._handles: list[Any] = []
        self.hider = ipywidgets.HTML(layout=ipywidgets.Layout(display="none"))
        chosen = f'.{FALLBACK_CLASS}[data-for="{self.hider.model_id}"]'
        # The output around it too, where :has() is known, so no empty gap is left behind.
        self.hider.value = (
            f"<style>{chosen}{{display:none}}.jp-OutputArea-child:has({chosen}){{display:none}}</style>"
        )

    def fallback(self) -> Bundle:
        """The static state, marked so that a drawn widget can hide it."""
        bundle = self._static()
        html = f'<div class="{FALLBACK_CLASS}" data-for="{self.hider.model_id}">{bundle["text/html"]}</div>'
        return {**bundle, "text/html": html}

    def display(self, widget: Any) -> None:
        """Show `widget` (blank as text: the fallback holds the text), then the fallback, refreshable."""
        from IPython import display as ipython_display

        show: Any = ipython_display.display  # untyped in IPython
        view = widget._repr_mimebundle_() or {}
        show({WIDGET_MIME: view.get(WIDGET_MIME), "text/plain": ""}, raw=True)
        self._handles.append(show(self.fallback(), raw=True, display_id=True))

    def refresh(self) -> None:
        """Send the current fallback to every output shown so far (nothing, if none was)."""
        if not self._handles:
            return
        bundle = self.fallback()
        for handle in self._handles:
            handle.update(bundle, raw=True)
