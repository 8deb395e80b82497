"""Parts that need an extra fail with one error naming it and the pip line, not a bare import error.

Only the core (anyio) is always installed. The server and mock tools need the ``mcp`` extra, the views
and magics ``notebook``, the Temporal runner ``temporal``, the tracing sink ``otel``, the scripted trip
agent ``agents``; without it, a user would otherwise see ``No module named 'pydantic'`` from deep inside
a module they never imported by name. aegis-nb is on no package index, so the pip line names the two
installs that work: from a clone, and from a wheel built from one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from aegis_nb.kernel.errors import AegisError

EXTRA_MODULES: dict[str, frozenset[str]] = {
    "mcp": frozenset({"mcp", "pydantic", "pydantic_core"}),
    "notebook": frozenset({"IPython", "anywidget", "ipywidgets", "mcp", "pydantic", "pydantic_core"}),
    "temporal": frozenset({"temporalio"}),
    "otel": frozenset({"opentelemetry"}),
    "agents": frozenset({"pydantic_ai", "mcp", "pydantic", "pydantic_core"}),
}
"""The top-level modules each extra brings: a missing one of these means the extra is not installed."""

MINIMUM_VERSIONS: Mapping[str, tuple[str, tuple[int, ...]]] = MappingProxyType({"mcp": ("mcp", (2, 3))})
"""Top-level module -> (distribution, oldest release that has what we import): a module of it that is
missing while the package is installed means an older release (another package downgraded it)."""


def install_line(extra: str) -> str:
    """The pip commands that install `extra`: editable from a clone, or from the wheel a clone builds."""
    from importlib import metadata

    try:
        version = metadata.version("aegis-nb")
    except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
        version = "<version>"
    return (
        f"pip install -e '.[{extra}]' in a clone, "
        f"or pip install 'aegis_nb-{version}-py3-none-any.whl[{extra}]' from a built wheel"
    )


class MissingExtra(AegisError, ModuleNotFoundError):
    """An optional part of aegis_nb was imported without the extra that brings its dependencies.

    Also a `ModuleNotFoundError` (so ``except ImportError`` still works), with `name` the missing module.
    """

    def __init__(self, part: str, extra: str, missing: str) -> None:
        message = f"{part} needs the {extra!r} extra (no module named {missing!r})"
        super().__init__(f"{message}: {install_line(extra)}", name=missing)
        self.extra = extra


class ExtraTooOld(MissingExtra):
    """The extra's package is installed, but a release too old to have what aegis_nb imports from it."""

    def __init__(self, part: str, extra: str, missing: str, distribution: str, installed: str) -> None:
        needed = ".".join(map(str, MINIMUM_VERSIONS[missing.partition(".")[0]][1]))
        message = (
            f"{part} needs {distribution} >= {needed}, but {distribution} {installed} is installed "
            f"(no module named {missing!r}; another package may have pinned an older one)"
        )
        ModuleNotFoundError.__init__(self, f"{message}: pip install '{distribution}>={needed}'", name=missing)
        self.extra = extra


def _installed_too_old(missing: str) -> tuple[str, str] | None:
    """(distribution, installed version) when `missing` is a submodule an old installed release lacks."""
    from importlib import metadata

    top, _, rest = missing.partition(".")
    if not rest or top not in MINIMUM_VERSIONS:
        return None
    distribution, needed = MINIMUM_VERSIONS[top]
    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
    release = re.match(r"\d+(?:\.\d+)*", installed)  # "1.27.0rc1" -> 1.27.0
    if release is None:
        return None
    return (distribution, installed) if tuple(map(int, release.group().split("."))) < needed else None


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
        too_old = _installed_too_old(missing)
        if too_old is not None:
            raise ExtraTooOld(part, extra, missing, *too_old) from None
        # The original's traceback only shows the import chain that led to the missing module.
        raise MissingExtra(part, extra, missing) from None
