"""The words every view uses for what a run did: one table, so renaming a phrase is one edit.

The trace (`saga.trace`), the MCP progress messages (`server.progress`), the diagrams
(`diagram.labels`, the SVG, text, DOT and Mermaid renderings) and `SagaReport.summary` all word a
run's events and outcomes from here, each in its own layout (arrows, symbols, timings). It lives
in the kernel, the lowest layer, because `SagaReport.summary` needs it and every layer above may
import the kernel. Views read these names at call time (``phrases.UNDONE``), never copy them into
tables of their own at import, so a phrase changed here is changed everywhere.

Only words about what happened are here: the nouns views count things with (step, attempt, row),
their symbols and their chrome stay theirs, and Mermaid keeps the documentation page's own words
("Success", "Fails"). ``tests/test_one_vocabulary.py`` checks that no view spells one of these
phrases itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aegis_nb.kernel.printable import printable_line

# -- where a run stands (`SagaStatus`) --------------------------------------------------------------

STARTED: Final = "started"
RUNNING: Final = "running"
ROLLING_BACK: Final = "rolling back"
COMMITTED: Final = "committed"
ROLLED_BACK: Final = "rolled back"
STUCK: Final = "stuck"
WAITING: Final = "waiting for a saga to start"
NOT_STARTED: Final = "no saga has started yet"

# -- what a step did, forward ------------------------------------------------------------------------

PENDING: Final = "pending"
EXECUTE: Final = "execute()"
EXECUTING: Final = "executing"
OK: Final = "ok"
"""A step's reply to `execute()`."""
DONE: Final = "done"
"""A step that succeeded, as a state."""
FAILED: Final = "failed"
TIMED_OUT: Final = "timed out"

# -- what its compensation did -----------------------------------------------------------------------

ROLLBACK: Final = "rollback"
ROLLBACK_TRIGGERED: Final = "Rollback triggered"
COMPENSATE: Final = "compensate()"
COMPENSATING: Final = "compensating"
UNDOING: Final = "undoing"
UNDONE: Final = "undone"
NOT_UNDONE: Final = f"not {UNDONE}"
NOTHING_TO_UNDO: Final = "nothing to undo"
COULD_NOT_UNDO: Final = "could not undo"
COMPENSATION_FAILED: Final = "compensation failed"
UNDO_FAILED: Final = "undo failed"
# The trace and progress speak of the next attempt ahead, an arrow label of the one it shows.
WILL_RETRY: Final = "will retry"
GIVING_UP: Final = "giving up"
RETRYING: Final = "retrying"
GAVE_UP: Final = "gave up"

# -- time -----------------------------------------------------------------------------------------------

DEADLINE: Final = "deadline"
NO_DEADLINE: Final = f"no {DEADLINE}"
DEADLINE_SET: Final = f"{DEADLINE} set"
BUDGET: Final = "budget"


def listed(names: Sequence[str], at_most: int | None = None) -> str:
    """``A, B, C`` as printable names; past `at_most`, ``1000 steps: A, B … Z`` (a picture's width)."""
    if at_most is None or len(names) <= at_most:
        return ", ".join(printable_line(name) for name in names)
    first, second, last = (printable_line(name) for name in (names[0], names[1], names[-1]))
    return f"{len(names)} steps: {first}, {second} … {last}"
