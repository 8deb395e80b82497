"""The layering of DESIGN.md, enforced: a lower layer never imports a higher one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aegis_nb

PACKAGE = Path(aegis_nb.__file__).parent

# Which aegis_nb layers (first package below aegis_nb) each layer may import.
ALLOWED: dict[str, set[str]] = {
    "kernel": set(),
    "saga": {"kernel"},
    "server": {"kernel", "saga"},
    "mock": {"kernel", "saga", "server"},
    "diagram": {"kernel", "saga"},
    "temporal": {"kernel", "saga"},
    "notebook": {"kernel", "saga", "diagram", "mock", "server"},
}
# Third-party packages a layer may not import (the pure layers stay pure).
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "kernel": {"mcp", "ipywidgets", "IPython", "graphviz", "temporalio", "pydantic"},
    "saga": {"mcp", "ipywidgets", "IPython", "graphviz", "temporalio"},
    "diagram": {"mcp", "ipywidgets", "IPython", "ipykernel", "temporalio"},
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
