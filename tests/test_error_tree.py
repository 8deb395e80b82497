"""The error tree drawn in `aegis_nb.kernel.errors`' docstring is the tree of classes, whole.

Every `AegisError` subclass defined anywhere in aegis_nb is drawn, under its own parent, in the
module it is defined in, with the builtins it also derives from; and nothing is drawn that does not
exist. Read from the source (ast), so the parts that need an extra need not be imported.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import aegis_nb
from aegis_nb.kernel import errors

PACKAGE = Path(aegis_nb.__file__).parent
BRANCH = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)\s*(?:\((?P<notes>[^)]*)\)?)?")


@dataclass(frozen=True)
class Node:
    """One error class: its parent in the tree, the builtins it also is, and where it is defined."""

    parent: str
    builtins: tuple[str, ...]
    module: str


def drawn() -> dict[str, Node]:
    """The tree as the docstring draws it, by class name: ``(also X)`` names a builtin base, any other
    note the module (under aegis_nb) it is defined in, kernel.errors when none is given."""
    doc = errors.__doc__ or ""
    lines = doc[doc.index("    AegisError\n") :].split("\n\n")[0].splitlines()[1:]
    tree: dict[str, Node] = {}
    parents = ["AegisError"]  # the class open at each depth
    for line in lines:
        found = BRANCH.match(line.removeprefix("    "))
        if found is None:  # a continued description
            continue
        depth = len(found["indent"]) // 5
        del parents[depth + 1 :]
        notes = [note.strip() for note in (found["notes"] or "").split(",") if note.strip()]
        builtins = tuple(note.removeprefix("also ") for note in notes if note.startswith("also "))
        places = [note for note in notes if not note.startswith("also ")]
        parent = parents[depth]
        # A class drawn with no module lives where its parent does (the journal errors).
        module = places[0] if places else tree[parent].module if parent in tree else "kernel.errors"
        tree[found["name"]] = Node(parent, builtins, module)
        parents.append(found["name"])
    return tree


def defined() -> dict[str, Node]:
    """Every class deriving from `AegisError` in aegis_nb's source, by class name (a name used by
    two of them would be an error in itself: the drawing could not tell them apart)."""
    classes: list[tuple[str, list[str], str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
                classes.append((node.name, bases, module))
    errors = {"AegisError"}
    while True:  # grow the set of error names until no class derives from one not yet in it
        more = {name for name, bases, _ in classes if set(bases) & errors} - errors
        if not more:
            break
        errors |= more
    known = {name for name, _, _ in classes}
    tree: dict[str, Node] = {}
    for name, bases, module in classes:
        ours = [base for base in bases if base in errors]
        if not ours:
            continue
        assert name not in tree, f"two errors are named {name}: {tree[name].module} and {module}"
        (parent,) = ours
        tree[name] = Node(parent, tuple(base for base in bases if base not in known), module)
    return tree


def test_the_drawn_error_tree_is_the_tree_of_classes() -> None:
    actual, pictured = defined(), drawn()
    assert {name: (node.parent, node.builtins) for name, node in sorted(pictured.items())} == {
        name: (node.parent, node.builtins) for name, node in sorted(actual.items())
    }
    # Drawn in the module that defines it, or in the package it is imported from (saga.durable).
    misplaced = [
        (name, pictured[name].module, node.module)
        for name, node in actual.items()
        if not f"{node.module}.".startswith(f"{pictured[name].module}.")
    ]
    assert misplaced == []
