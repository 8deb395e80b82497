"""``%%aegis_step NAME``: a cell defining ``async def execute(ctx, ...)`` and ``compensate`` becomes a step.

The cell is checked before it runs: a syntax error, a missing ``execute``, a sync ``def`` or a missing
``compensate`` (without ``--read-only``) is reported in one line naming the step and the fix, never as
a traceback from inside aegis_nb. The cell then runs in the user's namespace, like any cell, so its
imports and helpers stay visible to the functions it defines (run in a separate namespace, an import
would vanish from under them). ``execute`` and ``compensate`` are taken out again afterwards so the
next step cell cannot pick up this one's by mistake.
"""

from __future__ import annotations

import ast
import linecache
from typing import Any

from IPython.core.error import UsageError

from aegis_nb.notebook.options import StepOptions
from aegis_nb.saga.functional import FunctionStep

_PARTS = ("execute", "compensate")
_MISSING = object()


def define_cell_step(options: StepOptions, source: str, namespace: dict[str, Any]) -> FunctionStep:
    """Check `source`, run it in `namespace` and build the step; `UsageError` with the fix otherwise."""
    name = options.name
    filename = f"<aegis_step {name}>"
    tree = _parse(name, source, filename)
    defined = _top_level_functions(tree)
    _check_definitions(name, defined, options)
    try:
        code = compile(tree, filename, "exec")
    except SyntaxError as exc:  # what only the compiler sees: top-level await, return, break...
        raise _syntax_error(name, source, exc) from None
    # Register the source so tracebacks from inside the step (when it runs) show its lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    saved = {part: namespace.get(part, _MISSING) for part in _PARTS}
    try:
        exec(code, namespace)
    except Exception as exc:
        line = _error_line(exc, filename)
        where = "" if line is None else f" (line {line}: {_source_line(source, line)!r})"
        raise UsageError(
            f"step {name} was not defined: the cell raised {type(exc).__name__}: {exc}{where}"
        ) from None
    else:
        execute = namespace["execute"]
        compensate = namespace.get("compensate") if "compensate" in defined else None
    finally:
        for part, value in saved.items():
            if value is _MISSING:
                namespace.pop(part, None)
            else:
                namespace[part] = value
    step = FunctionStep(
        execute,
        name=name,
        timeout=options.timeout,
        compensation_retry=options.compensation_retry,
        in_doubt=options.in_doubt,
        read_only=options.read_only,
    )
    if compensate is not None:
        step.compensation(compensate)
    return step


def _parse(name: str, source: str, filename: str) -> ast.Module:
    try:
        return ast.parse(source, filename)
    except SyntaxError as exc:
        raise _syntax_error(name, source, exc) from None


def _syntax_error(name: str, source: str, exc: SyntaxError) -> UsageError:
    """The one-line report of a syntax error in step `name`'s cell, with the line and a pointer."""
    line = exc.lineno or 0
    lines = source.splitlines()
    # The compiler's errors carry no text: take the line as written, so the pointer lines up.
    text = (exc.text or (lines[line - 1] if 0 < line <= len(lines) else "")).rstrip("\n")
    pointer = ""
    if exc.offset and text:
        pointer = "\n    " + " " * (exc.offset - 1) + "^"
    return UsageError(f"step {name}: syntax error on line {line} of the cell: {exc.msg}\n    {text}{pointer}")


def _top_level_functions(tree: ast.Module) -> dict[str, ast.stmt]:
    """The last top-level definition of each of execute/compensate (function or not)."""
    found: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in _PARTS:
            found[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in _PARTS:
                    found[target.id] = node
    return found


def _check_definitions(name: str, defined: dict[str, ast.stmt], options: StepOptions) -> None:
    execute = defined.get("execute")
    if execute is None:
        raise UsageError(
            f"step {name}: the cell defines no execute; write `async def execute(ctx, ...):` "
            "returning a new context (ctx.with_metadata({...})) or None"
        )
    for part, node in defined.items():
        if isinstance(node, ast.FunctionDef):
            raise UsageError(
                f"step {name}: {part} must be `async def {part}(ctx, ...)`, not `def` "
                "(a sync function cannot be cancelled at its deadline)"
            )
        if not isinstance(node, ast.AsyncFunctionDef):
            raise UsageError(f"step {name}: define {part} with `async def {part}(ctx, ...):`")
    if options.read_only and "compensate" in defined:
        raise UsageError(
            f"step {name}: --read-only says the step changes nothing, yet the cell defines compensate; "
            "drop one of them"
        )
    if not options.read_only and "compensate" not in defined:
        raise UsageError(
            f"step {name}: the cell defines no compensate; write `async def compensate(ctx, ...):` to "
            "undo what execute did, or pass --read-only if the step changes nothing"
        )


def _error_line(exc: BaseException, filename: str) -> int | None:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _source_line(source: str, line: int) -> str:
    lines = source.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""
