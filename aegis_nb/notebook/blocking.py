"""Make ``%aegis_saga`` block its cell, so "Run All" runs sagas in order.

A magic is a plain function and the kernel's event loop is already running when it is called, so it
can neither await the saga nor run a loop of its own. Instead, an input transformer (IPython's
``input_transformers_cleanup``, run before magics are expanded) rewrites the magic into a top-level
``await`` of the same magic's async form; IPython then runs the cell as a coroutine on the kernel's
loop, and the cell ends when the saga does::

    %aegis_saga BookFlight ChargeCard -o run
    # becomes
    await get_ipython().magics_manager.registry['AegisMagics'].run_async('aegis_saga', 'BookFlight ...', None)

Only lines at the top level of a cell (column 0) are rewritten, and the cell form only when the
magic is its first line; anything else falls back to the synchronous magic.
"""

from __future__ import annotations

import re

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
    rewritten = []
    for line in lines:
        match = _LINE.match(line.rstrip("\r\n"))
        if match is None or match[2].rstrip().endswith("?"):
            rewritten.append(line)
        else:
            rewritten.append(f"await {HOOK}({match[1]!r}, {match[2]!r}, None)\n")
    return rewritten
