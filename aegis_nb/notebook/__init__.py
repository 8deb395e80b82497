"""Notebook layer: the live sequence-diagram widget, replay, static renderings and IPython display.

Importing it imports ipywidgets (the ``notebook`` extra) but shows nothing and registers nothing;
`register_display(shell)` (called by the extension and by `LiveView.show`) makes `SagaRun` objects
display as diagrams.
"""

from aegis_nb.kernel.extras import needs_extra

with needs_extra("notebook", "aegis_nb.notebook (LiveView, ReplayView, SagaDiagram)"):
    from aegis_nb.notebook.coalesce import Coalescer, LoopScheduler, Scheduler
    from aegis_nb.notebook.display import register_display, run_bundle, unregister_display
    from aegis_nb.notebook.live import LiveView
    from aegis_nb.notebook.replay import ReplayView
    from aegis_nb.notebook.static import GraphView, MermaidView, SagaDiagram, static_bundle
    from aegis_nb.notebook.surface import JupyterSurface, NullSurface, Surface


__all__ = [
    "Coalescer",
    "GraphView",
    "JupyterSurface",
    "LiveView",
    "LoopScheduler",
    "MermaidView",
    "NullSurface",
    "ReplayView",
    "SagaDiagram",
    "Scheduler",
    "Surface",
    "register_display",
    "run_bundle",
    "static_bundle",
    "unregister_display",
]
