"""Make every `SagaRun` display itself as its static diagram in IPython.

The saga layer must not import the diagram layer, so `SagaRun` has no ``_repr_mimebundle_`` of its
own; instead the notebook layer registers a mime-bundle printer for it with IPython's formatter. The
extension (``%load_ext aegis_nb``) and every `LiveView` shown in a kernel call `register_display`.
"""

from __future__ import annotations

from typing import Any

from aegis_nb.diagram import fold
from aegis_nb.notebook.static import Bundle, static_bundle
from aegis_nb.saga.outcome import SagaRun


def run_bundle(run: SagaRun) -> Bundle:
    """A run's static diagram: an ``<img>`` of the SVG plus the text rendering."""
    return static_bundle(fold(run.events))


def register_display(shell: Any) -> None:
    """Teach `shell` (an IPython ``InteractiveShell``) to show `SagaRun` objects as diagrams. Idempotent."""
    shell.display_formatter.mimebundle_formatter.for_type(SagaRun, run_bundle)


def unregister_display(shell: Any) -> None:
    """Undo `register_display` (for ``%unload_ext``); unknown registrations are ignored."""
    formatter = shell.display_formatter.mimebundle_formatter
    if formatter.type_printers.get(SagaRun) is run_bundle:
        formatter.pop(SagaRun)


def current_shell() -> Any:
    """The running IPython shell, or ``None`` outside IPython (and when IPython is not installed)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is in the notebook extra
        return None
    return get_ipython()
