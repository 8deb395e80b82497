"""A widget shown with a static fallback output after it, which a drawn widget hides.

Where a widget manager draws the widget (JupyterLab, Notebook 7, nbconvert HTML online, from its
saved state), a ``<style>`` added by the widget's front-end code hides the fallback. Where none
does (nbconvert HTML offline, a notebook reopened without widget state, GitHub), the fallback
shows: a picture
(``text/html`` with an ``<img>``, which untrusted notebooks keep) and ``text/plain``. The fallback
has a display id and is sent again when the widget's state changes in a way worth keeping (a
finished run), so a saved or exported notebook holds the last state, not the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aegis_nb.notebook.mime import WIDGET_MIME, widget_view
from aegis_nb.notebook.static import Bundle

FALLBACK_CLASS = "aegis-fallback"
BLANK: Bundle = {"text/plain": ""}
"""An output with nothing to show: a live fallback before the first redraw and after the end."""


def marked(bundle: Bundle, key: str) -> Bundle:
    """`bundle` with its picture marked as the fallback of the widget whose ``fallback_id`` is `key`."""
    html = f'<div class="{FALLBACK_CLASS}" data-for="{key}">{bundle["text/html"]}</div>'
    return {**bundle, "text/html": html}


class LiveFallback:
    """A live widget's fallback output: blank, then each redraw's picture, blank again at the end."""

    __slots__ = ("_handle", "_key")

    def __init__(self, key: str) -> None:
        from IPython import display as ipython_display

        show: Any = ipython_display.display  # untyped in IPython
        self._key = key
        # Blank at first and at the end: nbval compares an output's first form, a saved notebook
        # holds its last, and both must read the same.
        self._handle: Any = show(BLANK, raw=True, display_id=True)

    def draw(self, picture: Bundle) -> None:
        self._handle.update(marked(picture, self._key), raw=True)

    def clear(self) -> None:
        self._handle.update(BLANK, raw=True)


class FallbackOutput:
    """Displays a widget and then `static()` as its fallback; `refresh()` updates every fallback shown.

    `key` is the widget's ``fallback_id``: its front-end code hides the fallbacks marked with it.
    """

    __slots__ = ("_handles", "_static", "key")

    def __init__(self, static: Callable[[], Bundle], key: str) -> None:
        self._static = static
        self._handles: list[Any] = []
        self.key = key

    def fallback(self) -> Bundle:
        """The static state, marked so that a drawn widget can hide it."""
        return marked(self._static(), self.key)

    def display(self, widget: Any) -> None:
        """Show `widget` (blank as text: the fallback holds the text), then the fallback, refreshable."""
        from IPython import display as ipython_display

        show: Any = ipython_display.display  # untyped in IPython
        show({WIDGET_MIME: widget_view(widget), "text/plain": ""}, raw=True)
        self._handles.append(show(self.fallback(), raw=True, display_id=True))

    def refresh(self) -> None:
        """Send the current fallback to every output shown so far (nothing, if none was)."""
        if not self._handles:
            return
        bundle = self.fallback()
        for handle in self._handles:
            handle.update(bundle, raw=True)
