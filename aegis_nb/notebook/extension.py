"""``%load_ext aegis_nb``: the magics, the blocking transformer and the diagram display of runs, per shell.

Loading registers one `AegisMagics` instance with the shell (its steps, engine and mock tools belong
to that shell alone), puts the transformer that makes ``%aegis_saga`` block its cell in the shell's
cleanup transformers, and makes finished `SagaRun` objects display as their diagram. Unloading
removes the transformer and the display again, and stops following the running cell.
"""

from __future__ import annotations

from typing import Any

from aegis_nb.notebook.blocking import blocking_transformer
from aegis_nb.notebook.display import register_display, unregister_display
from aegis_nb.notebook.magics import AegisMagics


def load_ipython_extension(ipython: Any) -> None:
    """Register the aegis magics with `ipython` (an IPython ``InteractiveShell``). Idempotent."""
    if not isinstance(ipython.magics_manager.registry.get(AegisMagics.__name__), AegisMagics):
        ipython.register_magics(AegisMagics(ipython))
    transformers = ipython.input_transformers_cleanup
    if blocking_transformer not in transformers:
        transformers.append(blocking_transformer)
    register_display(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Stop rewriting the aegis magics into awaits and stop drawing runs (the magics stay defined)."""
    transformers = ipython.input_transformers_cleanup
    while blocking_transformer in transformers:
        transformers.remove(blocking_transformer)
    unregister_display(ipython)
    magics = ipython.magics_manager.registry.get(AegisMagics.__name__)
    if isinstance(magics, AegisMagics):
        magics.running_cell.unfollow()
        magics.stop_watching_cells()
