"""The README's code blocks, each with the label that says where it runs.

A label is an HTML comment on the line before a fence, ``<!-- run: KIND -->`` (invisible on GitHub),
KIND one of `KINDS`. `blocks` reads them all, labelled or not, so a test can refuse the unlabelled.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"

KINDS = ("notebook", "script", "server", "shell", "output", "policy")
"""notebook: a cell of one notebook, run in order in one kernel; script: a file run by ``python``;
server: a script serving MCP over stdio; shell: commands; output: what the block before printed;
policy: a gateway policy file."""

LABEL = re.compile(r"<!-- run: (?P<kind>[\w-]+) -->")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block of the README."""

    kind: str | None
    """The label's kind, None when the line before the fence is no label."""
    language: str
    code: str
    line: int
    """The fence's line number (1-based), for test ids and messages."""

    @property
    def name(self) -> str:
        return f"{self.kind}-line{self.line}"


def blocks(text: str | None = None) -> list[Block]:
    """Every fenced block of the README (or of `text`), in order."""
    lines = (README.read_text() if text is None else text).split("\n")
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = lines[index]
        if not opening.startswith("```"):
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        label = LABEL.fullmatch(lines[index - 1].strip()) if index else None
        code = "\n".join(lines[index + 1 : end]) + "\n"
        kind = label["kind"] if label else None
        found.append(Block(kind, opening[3:].strip(), code, index + 1))
        index = end + 1
    return found


def printed_by(all_blocks: list[Block]) -> dict[int, Block]:
    """Each block that an `output` block follows, by its line -> that output block."""
    return {before.line: block for before, block in itertools.pairwise(all_blocks) if block.kind == "output"}


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
