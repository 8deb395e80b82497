"""The layering of DESIGN.md, enforced: a lower layer never imports a higher one, no module reaches
into another's private (underscore) names, and modules import each other in one direction."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import aegis_nb

PACKAGE = Path(aegis_nb.__file__).parent

# Which aegis_nb layers (first package below aegis_nb) each layer may import.
ALLOWED: dict[str, set[str]] = {
    "kernel": set(),
    "saga": {"kernel"},
    "server": {"kernel", "saga", "tracing"},
    "gateway": {"kernel", "saga", "server"},
    "mock": {"kernel", "saga", "server"},
    "diagram": {"kernel", "saga"},
    "temporal": {"kernel", "saga"},
    "tracing": {"kernel", "saga"},
    "notebook": {"kernel", "saga", "diagram", "mock", "server"},
}
# Third-party packages a layer may not import (the pure layers stay pure).
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "kernel": {"mcp", "ipywidgets", "IPython", "graphviz", "temporalio", "pydantic"},
    "saga": {"mcp", "ipywidgets", "IPython", "graphviz", "temporalio"},
    "diagram": {"mcp", "ipywidgets", "IPython", "ipykernel", "temporalio"},
    # Spans from events, on the OpenTelemetry API alone: exporters are the user's (the otel extra).
    "tracing": {"mcp", "ipywidgets", "IPython", "graphviz", "temporalio", "pydantic"},
}


def imports_of(path: Path) -> set[str]:
    """Every module name imported by `path`, including those inside functions and TYPE_CHECKING."""
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def layer_files(layer: str) -> list[Path]:
    root = PACKAGE / layer
    return sorted(root.rglob("*.py")) if root.is_dir() else []


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_point_down(layer: str) -> None:
    violations = []
    for path in layer_files(layer):
        for name in imports_of(path):
            parts = name.split(".")
            if parts[0] == "aegis_nb" and len(parts) > 1:
                target = parts[1]
                if target != layer and target not in ALLOWED[layer]:
                    violations.append(f"{path.relative_to(PACKAGE)} imports {name}")
            if parts[0] in FORBIDDEN_THIRD_PARTY.get(layer, set()):
                violations.append(f"{path.relative_to(PACKAGE)} imports third-party {name}")
    assert violations == []


def test_every_package_is_a_known_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(ALLOWED)


def test_aegismcp_alias_only_reexports() -> None:
    alias = PACKAGE.parent / "aegismcp"
    for path in sorted(alias.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            is_docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            is_all = isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
                "__all__"
            ]
            assert is_docstring or is_all or isinstance(node, ast.Import | ast.ImportFrom), (
                f"{path} does more than re-export: {ast.dump(node)[:80]}"
            )


# -- private names ----------------------------------------------------------------------------------


def is_private(name: str) -> bool:
    """``_name``: private to the module that defines it. Dunders (``__init__``) are the language's and
    sunders (``_repr_mimebundle_``, IPython's display protocol) are public protocols."""
    return name.startswith("_") and not name.endswith("_")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, ast.Module]:
    """Every module of aegis_nb, parsed, by dotted name."""
    return {
        module_name(path): ast.parse(path.read_text(), str(path)) for path in sorted(PACKAGE.rglob("*.py"))
    }


@functools.cache
def private_names_defined(module: str) -> frozenset[str]:
    """The private names `module` defines: its functions, classes and globals, its classes' methods and
    attributes (``self._x = ...``, ``__slots__`` entries), and the names it imports as private."""
    names: set[str] = set()
    for node in ast.walk(modules()[module]):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # a __slots__ entry
    return frozenset(filter(is_private, names))


def reach_ins(module: str) -> Iterator[str]:
    """Where `module` uses a private name of another aegis_nb module.

    Two forms are found: ``from aegis_nb.x import _y`` (x another module), and ``something._y`` where
    ``_y`` is defined in another aegis_nb module and not in this one: a module's private function
    (``codec._field``), a class's private method called on the class or on an instance
    (``AegisContext._build``, ``ctx._with_budget``). ``self._y`` and ``cls._y`` are a class's own. What
    it cannot see: a private name that this module also defines for itself (two modules that each
    have a ``_data``), and names reached through ``getattr`` strings.
    """
    for node in ast.walk(modules()[module]):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "aegis_nb":
            for alias in node.names:
                if is_private(alias.name) and node.module != module:
                    yield f"{module}:{node.lineno} imports {alias.name} from {node.module}"
        elif isinstance(node, ast.Attribute) and is_private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in private_names_defined(module):
                continue
            owners = sorted(other for other in modules() if node.attr in private_names_defined(other))
            if owners:
                yield f"{module}:{node.lineno} uses {ast.unparse(node)} (private to {', '.join(owners)})"


def test_no_module_uses_another_modules_private_names() -> None:
    assert [where for module in sorted(modules()) for where in reach_ins(module)] == []


# -- import direction -------------------------------------------------------------------------------


def imported_modules(module: str, *, inside_functions: bool) -> set[str]:
    """The aegis_nb modules `module` imports when it is imported (and, with `inside_functions`, when
    its functions run). ``if TYPE_CHECKING:`` imports are types only and do not count; neither does
    the module's own package, which Python has already begun importing."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)  # a submodule
            elif inside_functions or not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for block in blocks(node):
                    visit(block)

    visit(modules()[module].body)
    return {name for name in names if name in modules() and not f"{module}.".startswith(f"{name}.")}


def blocks(node: ast.AST) -> Iterator[list[ast.stmt]]:
    """The statement lists nested in `node` (a class's or function's body, both arms of an ``if``, a
    ``try``'s handlers, a ``match``'s cases, ...)."""
    for field in ("body", "orelse", "finalbody"):
        inner = getattr(node, field, None)
        if isinstance(inner, list):
            yield inner
    for child in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
        yield child.body


def import_cycles(*, within: str, inside_functions: bool) -> list[list[str]]:
    """The cycles among the modules under `within`, each as the path that closes it."""
    graph = {
        module: imported_modules(module, inside_functions=inside_functions)
        for module in modules()
        if module.startswith(within)
    }
    cycles: list[list[str]] = []
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append([*path[path.index(module) :], module])
            return
        if module in done or module not in graph:
            return
        for target in sorted(graph[module]):
            walk(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        walk(module, [])
    return cycles


def test_no_two_modules_import_each_other_at_import_time() -> None:
    assert import_cycles(within="aegis_nb", inside_functions=False) == []


def test_kernel_modules_import_each_other_one_way_even_inside_functions() -> None:
    # A lazy import hides a cycle without breaking it: errors.py and report.py used to need each
    # other (SagaFailed carries a report; ErrorInfo asks `is_refusal`). The kernel is the base every
    # reader starts from, so its modules read in one order.
    assert import_cycles(within="aegis_nb.kernel", inside_functions=True) == []


def test_the_readme_architecture_names_every_kernel_saga_and_tracing_module() -> None:
    # The README's map of the core stays true: a module added, moved or removed updates its row.
    readme = (PACKAGE.parent / "README.md").read_text()
    start = readme.index("\n## Architecture\n")
    section = readme[start : readme.find("\n## ", start + 1)]
    named = set(re.findall(r"`((?:kernel|saga|tracing)/[\w/]+\.py)`", section))
    on_disk = {
        str(path.relative_to(PACKAGE))
        for layer in ("kernel", "saga", "tracing")
        for path in layer_files(layer)
        if path.name != "__init__.py" or path.parent.name == "durable"
    }
    assert sorted(named) == sorted(on_disk)
