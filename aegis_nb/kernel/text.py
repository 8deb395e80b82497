"""User text made printable: names and error messages may span lines or hold lone surrogates.

A validation error or a traceback brings newlines; ``os.fsdecode`` and ``errors="surrogateescape"``
turn undecodable bytes into lone surrogates, which ``str.encode("utf-8")`` refuses and XML has no
place for. Every layer that shows such text (trace lines, diagrams, notebook bundles) uses these.
"""

from __future__ import annotations

import re

_SURROGATES = re.compile("[\ud800-\udfff]")


def one_line(text: str) -> str:
    """`text` with every run of whitespace, newlines included, made one space."""
    return " ".join(text.split())


def counted(n: int, noun: str) -> str:
    """``1 step``, ``3 steps``: a count with its noun, plural when it is not one."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def replace_surrogates(text: str) -> str:
    """`text` with each lone surrogate made U+FFFD, so that it encodes as UTF-8."""
    return _SURROGATES.sub("\ufffd", text)
