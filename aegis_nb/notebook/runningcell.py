"""Outputs for the cell that is running, even when a task that an earlier cell started makes them.

ipykernel sends an output to the request found in the context of the code that displays it, and a
task keeps the context it was created in. A server started in one cell answers the next cell's MCP
call in its own task, so a diagram drawn while handling that call went to the cell that started the
server (JupyterLab drew it there; nbclient, past that cell, dropped it). `RunningCell` follows the
shell's cells through IPython's ``pre_run_cell`` / ``post_run_cell`` events, and `RunningCellSurface`
sends a live view's outputs to the cell that was running when it was shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aegis_nb.notebook.static import Bundle
from aegis_nb.notebook.surface import Surface

Header = dict[str, Any]


class RunningCell:
    """The request header of the cell running in `shell` now (``None`` between cells, outside ipykernel)."""

    __slots__ = ("_shell", "header")

    def __init__(self, shell: Any) -> None:
        self._shell = shell
        self.header: Header | None = None

    def follow(self) -> RunningCell:
        """Start following the shell's cells. Idempotent."""
        events = self._shell.events
        if self._began not in events.callbacks["pre_run_cell"]:
            events.register("pre_run_cell", self._began)
            events.register("post_run_cell", self._ended)
        return self

    def unfollow(self) -> None:
        """Stop following (for ``%unload_ext``)."""
        events = self._shell.events
        for name, callback in (("pre_run_cell", self._began), ("post_run_cell", self._ended)):
            if callback in events.callbacks[name]:
                events.unregister(name, callback)
        self.header = None

    def _began(self, info: object) -> None:
        # Called in the cell's own context: the shell's parent header is that cell's request.
        header = getattr(self._shell, "parent_header", None)
        self.header = dict(header) if header else None

    def _ended(self, result: object) -> None:
        self.header = None

    @contextmanager
    def outputs_to(self, header: Header | None) -> Iterator[None]:
        """Send what is displayed in the block to the request `header` (unchanged for ``None``)."""
        publisher: Any = getattr(self._shell, "display_pub", None)  # ipykernel's has a parent per context
        if header is None or not hasattr(publisher, "set_thread_parent"):
            yield
            return
        # Set for this context only (the task's copy), and reset before anything else runs in it.
        token = publisher.set_thread_parent(header)
        try:
            yield
        finally:
            publisher.reset_thread_parent(token)


class RunningCellSurface:
    """`inner`, with its outputs sent to the cell that was running when it showed (its replacement too)."""

    __slots__ = ("_cell", "_header", "_inner")

    def __init__(self, inner: Surface, cell: RunningCell) -> None:
        self._inner = inner
        self._cell = cell
        self._header: Header | None = None

    def show(self, widget: Any) -> None:
        self._header = self._cell.header
        with self._cell.outputs_to(self._header):
            self._inner.show(widget)

    def redraw(self, picture: Callable[[], Bundle]) -> None:
        with self._cell.outputs_to(self._header):
            self._inner.redraw(picture)

    def replace(self, bundle: Bundle) -> None:
        with self._cell.outputs_to(self._header):
            self._inner.replace(bundle)
