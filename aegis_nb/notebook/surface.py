"""Where a live view is shown and how its output is swapped for the static rendering at the end.

Injected into `LiveView` so tests and benchmarks run without a kernel or a front end.
"""

from __future__ import annotations

from typing import Any, Protocol

from aegis_nb.notebook.static import Bundle


class Surface(Protocol):
    """A place for one live output at a time."""

    def show(self, widget: Any) -> None:
        """Display `widget` as a new output."""
        ...

    def replace(self, bundle: Bundle) -> None:
        """Replace the output shown last with `bundle` (a mime-type dict)."""
        ...


class JupyterSurface:
    """IPython display with a display id, so the live widget can be replaced in place."""

    __slots__ = ("_handle",)

    def __init__(self) -> None:
        self._handle: Any = None

    def show(self, widget: Any) -> None:
        from IPython import display as ipython_display

        show: Any = ipython_display.display  # untyped in IPython
        self._handle = show(widget, display_id=True)

    def replace(self, bundle: Bundle) -> None:
        if self._handle is not None:
            self._handle.update(bundle, raw=True)


class NullSurface:
    """Shows nothing: for benchmarks and code that only wants the widget object."""

    __slots__ = ()

    def show(self, widget: Any) -> None:
        """Nothing to show on."""

    def replace(self, bundle: Bundle) -> None:
        """Nothing to replace."""
