r"""Untrusted text made safe to show: control characters neutralised, visibly, for every rendering.

An upstream tool's error message, a step's or a saga's name reach terminals (``aegis-nb runs``,
the demo trace), reprs, MCP progress messages and images (SVG, graphviz). Raw, an escape sequence
there clears the screen or retitles the terminal (``\x1b[2J``, ``\x1b]0;…\x07``), a ``\r`` or
``\x1b[2K`` overwrites a line with a fake one, a bidi override reorders what a reader sees
("Trojan Source"), and C0 characters make an SVG ill-formed XML. Only renderings use this: the
journal and the structured report keep the original text.

The convention: each such character is shown as Python's ``repr`` shows it, ``\x1b``, ``\x07``,
``\n``, ``\x85``, ``\u202e``, so a reader sees that something was there and what, in ASCII that
every terminal and font can draw, and a rendering reads the same as the value's repr. It is a
display form, not an encoding: a backslash in the text is left as it is, so the text ``\x1b`` and
an escape character look alike, and nothing decodes it back.

One-line fields (the text diagram's rows, the trace, ``aegis-nb runs``, `SagaReport.summary`,
progress messages) first fold runs of whitespace, line breaks and tabs included, into one space
(`printable_line`): a validation error's lines then read as one line of words, and no newline can
start a fake line.
"""

from __future__ import annotations

import re

from aegis_nb.kernel.text import one_line, replace_surrogates

BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Characters that reorder the text around them: the embeddings, overrides and isolates ("Trojan
Source" uses these) and the three invisible direction marks."""

_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029" + "".join(sorted(BIDI_CONTROLS)) + "]")
"""C0, DEL, C1, the line and paragraph separators (some renderers break lines there) and bidi."""

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def printable(text: str) -> str:
    r"""`text` with every control character shown as its escape, e.g. ``\x1b[2J`` for ESC ``[2J``.

    Escaped: C0 (tab and newline included), DEL, C1, U+2028/U+2029 and the bidi controls; a lone
    surrogate becomes U+FFFD (it cannot be encoded). What is left holds none of them, and text that
    held none comes back unchanged, so applying it twice is applying it once.
    """
    if text.isprintable():  # no control, separator or surrogate: the usual name, left as it is
        return text
    return _CONTROLS.sub(_escape, replace_surrogates(text))


def printable_line(text: str) -> str:
    """`text` as one printable line: whitespace runs (line breaks too) one space, then `printable`."""
    if text.isprintable() and "  " not in text and text.strip(" ") == text:
        return text  # already one printable line (the usual step name): nothing to fold or escape
    return printable(one_line(text))


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")
