"""How wide a line of SVG text is drawn, roughly, so labels can be clipped or wrapped to the room they have.

An SVG cannot wrap or clip its text itself, and the drawing is sized before any browser sees it. The
estimate averages each class of characters as DejaVu Sans draws them (the widest font the diagram's
font stack falls back to, the one Linux browsers use) and comes out a few per cent wide there; on
macOS and Windows text gets more room still. Pure and deterministic, like the rest of the layer.
"""

from __future__ import annotations

import unicodedata

from aegis_nb.kernel.printable import printable_line

ELLIPSIS = "…"

# Widths in em (regular, bold). Narrow: i, l, punctuation; wide: m, w, M, W and symbols like "…".
_NARROW = frozenset(" !'(),-./:;IJ[\\]fijlrt|·")
_WIDE = frozenset("mwMW@%…—⋯")
_SYMBOLS = frozenset("#&+<=>^~")
_EM_NARROW = (0.34, 0.42)
_EM_UPPER = (0.71, 0.79)
_EM_WIDE = (1.0, 1.1)
_EM_OTHER = (0.62, 0.69)  # lower case, digits, most ASCII symbols


def _em(char: str, bold: bool) -> float:
    column = 1 if bold else 0
    if char in _NARROW:
        return _EM_NARROW[column]
    if char in _WIDE or unicodedata.east_asian_width(char) in ("W", "F"):
        return _EM_WIDE[column]  # also CJK and emoji, drawn a full em wide
    if char.isupper():
        return _EM_UPPER[column]
    if char in _SYMBOLS or ord(char) > 0x2000:
        return 0.9  # maths symbols, arrows and marks (✗ ✓ ↩ ◷ ⟲ ⚠), the same in bold
    return _EM_OTHER[column]


def text_width(text: str, size: float, *, bold: bool = False) -> float:
    """Pixels `text` takes at font size `size` (an estimate that errs wide)."""
    return size * sum(_em(char, bold) for char in text)


def fit(text: str, room: float, size: float, *, bold: bool = False) -> str:
    """`text` as one printable line, cut with an ellipsis so that it takes at most `room` pixels.

    Keeps at least one character and the ellipsis, like `labels.clip`, however small the room.
    """
    text = printable_line(text)
    if text_width(text, size, bold=bold) <= room:
        return text
    budget = room - text_width(ELLIPSIS, size, bold=bold)
    used, kept = 0.0, 0
    for char in text:
        used += size * _em(char, bold)
        if used > budget:
            break
        kept += 1
    return text[: max(1, kept)] + ELLIPSIS


def wrap(text: str, room: float, size: float, *, bold: bool = False, max_lines: int = 3) -> tuple[str, ...]:
    """`text` broken at spaces into at most `max_lines` lines of at most `room` pixels each.

    A word longer than a line is cut; what does not fit in the last line ends with an ellipsis.
    """
    words = printable_line(text).split(" ")
    lines: list[str] = []
    current = ""
    for index, word in enumerate(words):
        candidate = f"{current} {word}" if current else word
        if text_width(candidate, size, bold=bold) <= room or not current:
            current = candidate
            continue
        if len(lines) == max_lines - 1:
            # The last line: what is left is cut where the room ends.
            return (*lines, fit(" ".join([current, *words[index:]]), room, size, bold=bold))
        lines.append(fit(current, room, size, bold=bold))
        current = word
    return (*lines, fit(current, room, size, bold=bold)) if current else tuple(lines)
