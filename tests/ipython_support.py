"""A fresh IPython shell with aegis_nb loaded, for the magics tests, and cell helpers."""

from __future__ import annotations

import atexit
from collections.abc import Iterator
from contextlib import contextmanager

from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.error import UsageError
from IPython.core.interactiveshell import ExecutionResult, InteractiveShell
from traitlets.config import Config


@contextmanager
def loaded_shell(*cells: str) -> Iterator[InteractiveShell]:
    """A fresh shell (no history file, displays captured) with ``%load_ext aegis_nb`` and `cells` run."""
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    shell.display_pub = CapturingDisplayPublisher()
    try:
        for cell in ("%load_ext aegis_nb", *cells):
            ok(shell, cell)
        yield shell
    finally:
        InteractiveShell.clear_instance()
        # Every shell registers its exit clean-up with atexit, which kept it (and all its cells
        # made) alive to the end of the run, then ran a full garbage collection for each one as
        # pytest exited: a minute or more of a run spent after its last test.
        atexit.unregister(shell.atexit_operations)


def ok(shell: InteractiveShell, cell: str) -> ExecutionResult:
    """Run `cell` as a notebook would (in the history, so ``_`` and ``Out`` work); fail if it fails."""
    result: ExecutionResult = shell.run_cell(cell, store_history=True)
    if not result.success:
        raise AssertionError(f"cell failed: {result.error_before_exec or result.error_in_exec!r}")
    return result


def usage_error(shell: InteractiveShell, cell: str) -> str:
    """The one-line message of the `UsageError` the cell raised (IPython shows no traceback for it)."""
    result = shell.run_cell(cell)
    error = result.error_in_exec or result.error_before_exec
    assert isinstance(error, UsageError), f"expected a UsageError, got {error!r}"
    return str(error)
