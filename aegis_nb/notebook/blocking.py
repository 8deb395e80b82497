"""Make ``%aegis_saga`` block its cell, so "Run All" runs sagas in order.

A magic is a plain function and the kernel's event loop is already running when it is called, so it
can neither await the saga nor run a loop of its own. Instead, an input transformer (IPython's
``input_transformers_cleanup``, run before magics are expanded) rewrites the magic into a top-level
``await`` of the same magic's async form; IPython then runs the cell as a coroutine on the kernel's
loop, and the cell ends when the saga does::

    %aegis_saga BookFlight ChargeCard -o run
    # becomes
    await get_ipython().magics_manager.registry['AegisMagics'].run_async('aegis_saga', 'BookFlight ...', None)

Only lines that start a statement at the top level of a cell (column 0) are rewritten, and the cell
form only when the magic is its first line; anything else falls back to the synchronous magic. Which
lines start a statement is decided by tokenizing the cell as IPython does for its own magics, so a
``%aegis_saga`` line inside a string or a bracket is text, not a magic. The body of another cell
magic (``%%bash``...) is not Python and is left alone entirely.
"""

from __future__ import annotations

import re
import tokenize

from IPython.core.inputtransformer2 import (
    assemble_continued_line,
    find_end_of_continued_line,
    make_tokens_by_line,
)

BLOCKING_MAGICS = ("aegis_saga", "aegis_rehearse")
HOOK = "get_ipython().magics_manager.registry['AegisMagics'].run_async"

_CELL = re.compile(r"^%%(" + "|".join(BLOCKING_MAGICS) + r")(?![\w?])(.*)$")
_LINE = re.compile(r"^%(" + "|".join(BLOCKING_MAGICS) + r")(?![\w?])(.*)$")


def blocking_transformer(lines: list[str]) -> list[str]:
    """Rewrite the aegis magics of a cell into awaits (other lines are returned unchanged)."""
    if not lines:
        return lines
    cell = _CELL.match(lines[0].rstrip("\r\n"))
    if cell is not None:
        if cell[2].rstrip().endswith("?"):
            return lines
        body = "".join(lines[1:])
        return [f"await {HOOK}({cell[1]!r}, {cell[2]!r}, {body!r})\n"]
    if lines[0].startswith("%%"):
        return lines  # another cell magic: its body is that magic's input, not lines of Python
    # One magic at a time, tokenizing again after each rewrite (as IPython does for its own): a
    # magic's text is not Python, and an unclosed bracket in it must not swallow the next line.
    rewritten, seen = list(lines), set[int]()
    while True:
        try:
            rows = _statement_rows(rewritten)
        except SyntaxError:  # bad indentation: IPython's own transforms report it next, in the same words
            return lines
        row = next((row for row in rows if row not in seen and _LINE.match(rewritten[row])), None)
        if row is None:
            return rewritten
        seen.add(row)
        # A magic line continues over lines ending in a backslash, as IPython's own magics do.
        end = find_end_of_continued_line(rewritten, row)
        match = _LINE.match(assemble_continued_line(rewritten, (row, 0), end))
        assert match is not None
        if not match[2].rstrip().endswith("?"):  # `%aegis_saga?` asks for help: IPython's to answer
            rewritten[row : end + 1] = [f"await {HOOK}({match[1]!r}, {match[2]!r}, None)\n"]


def _statement_rows(lines: list[str]) -> list[int]:
    """Indices of the lines that start a statement at column 0 with ``%``.

    IPython's own tokenizer helper groups the tokens by logical line (a string or bracket spanning
    lines is one), tolerating IPython syntax and unfinished input, as its magic transformer does.
    """
    rows = []
    for logical in make_tokens_by_line(lines):
        first = next((token for token in logical if token.type not in _LAYOUT), None)
        if first is not None and first.string == "%" and first.start[1] == 0:
            rows.append(first.start[0] - 1)
    return rows


_LAYOUT = {tokenize.INDENT, tokenize.DEDENT, tokenize.NL, tokenize.COMMENT}
