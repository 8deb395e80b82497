"""Parts that need an extra fail with one error naming it and the pip line, not a bare import error.

Only the core (anyio) is always installed. The server and mock tools need the ``mcp`` extra, the views
and magics ``notebook``, the Temporal runner ``temporal``; without it, a user would otherwise see
``No module named 'pydantic'`` from deep inside a module they never imported by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aegis_nb.kernel.errors import AegisError

EXTRA_MODULES: dict[str, frozenset[str]] = {
    "mcp": frozenset({"mcp", "pydantic", "pydantic_core"}),
    "notebook": frozenset({"IPython", "anywidget", "ipywidgets", "mcp", "pydantic", "pydantic_core"}),
    "temporal": frozenset({"temporalio"}),
}
"""The top-level modules each extra brings: a missing one of these means the extra is not installed."""


class MissingExtra(AegisError, ModuleNotFoundError):
    """An optional part of aegis_nb was imported without the extra that brings its dependencies.

    Also a `ModuleNotFoundError` (so ``except ImportError`` still works), with `name` the missing module.
    """

    def __init__(self, part: str, extra: str, missing: str) -> None:
        message = f"{part} needs the {extra!r} extra (no module named {missing!r})"
        super().__init__(f"{message}: pip install 'aegis-nb[{extra}]'", name=missing)
        self.extra = extra


@contextmanager
def needs_extra(extra: str, part: str) -> Iterator[None]:
    """Turn a missing module of `extra` in the block into a `MissingExtra` naming `part` and the extra.

    Any other missing module (one the extra does not bring) is re-raised as it was: it is another fault.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing.partition(".")[0] not in EXTRA_MODULES[extra]:
            raise
        # The original's traceback only shows the import chain that led to the missing module.
        raise MissingExtra(part, extra, missing) from None
