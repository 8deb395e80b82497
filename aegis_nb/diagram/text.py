"""The sequence diagram as plain text: for terminals, logs, `make demo` and `text/plain` bundles.

One line per arrow, with its time since the start, the step it goes to and what it says; the
rollback rows sit inside a bracket, and a parallel group's rows inside a double one headed by the
group (``╓ ∥ parallel · steps 2–3``). Folds huge runs exactly as the SVG does. Names and error text
are shown as printable lines (`printable_line`): an escape sequence in a tool's error cannot clear
the screen or overwrite a row, nor a newline start a fake one.
"""

from __future__ import annotations

from aegis_nb.diagram import labels
from aegis_nb.diagram.layout import (
    DEFAULT_MAX_LANES,
    DEFAULT_MAX_ROWS,
    LaneKind,
    Layout,
    Row,
    RowKind,
    layout,
)
from aegis_nb.diagram.model import SequenceModel
from aegis_nb.kernel import phrases
from aegis_nb.kernel.printable import printable_line

_NAME_LIMIT = 28


def render_text(
    model: SequenceModel, *, max_lanes: int = DEFAULT_MAX_LANES, max_rows: int = DEFAULT_MAX_ROWS
) -> str:
    """The whole run as text, ending with a newline: no control character but the line ends, and
    valid UTF-8 (lone surrogates become U+FFFD)."""
    if not model.run_id:
        return f"({phrases.NOT_STARTED})\n"
    plan = layout(model, max_lanes=max_lanes, max_rows=max_rows)
    status = labels.status_word(model.status).upper()
    # A saga name or an error may span lines (a validation error does): each row stays one line.
    lines = [printable_line(f"{model.saga} — {status} · {labels.headline(model)}")]
    cause = labels.cause_line(model)
    if cause:
        lines.append(f"✗ {cause}")
    requested = labels.requested_line(model)
    if requested:
        lines.append(f"⟲ {requested}")
    lines.append("")
    names = [_lane_name(model, plan, row) for row in plan.rows]
    width = max((len(name) for name in names), default=0)
    starts = {span.first: span for span in plan.spans}
    ends = {span.last for span in plan.spans}
    # Rows of a group are marked in a column of their own, there only when the run has groups.
    margin = "  " if plan.spans else ""
    bar = "  "
    for index, (row, name) in enumerate(zip(plan.rows, names, strict=True)):
        if row.kind is RowKind.ROLLBACK:
            lines.append(f"┌─ ⟲ {phrases.ROLLBACK_TRIGGERED}")
            bar = "│ "
            continue
        span = starts.get(index)
        if span is not None:
            lines.append(f"{bar}╓ {labels.group_label(span.group, concurrent=span.concurrent)}")
            margin = "║ "
        lines.append(f"{bar}{margin}{_row(model, row, name, width)}".rstrip())
        if index in ends:
            lines.append(f"{bar}╙")
            margin = "  "
    if bar != "  ":
        lines.append("└─")
    lines.append(printable_line(labels.summary(model)))
    return "\n".join(lines) + "\n"


def _lane_name(model: SequenceModel, plan: Layout, row: Row) -> str:
    if row.lane is None or row.kind is RowKind.ROLLBACK:
        return ""
    lane = plan.lanes[row.lane]
    if lane.kind is LaneKind.FOLD:
        return f"{lane.first + 1}–{lane.last + 1} (folded)"
    return f"{lane.first + 1} {labels.clip(model.steps[lane.first], _NAME_LIMIT)}"


def _row(model: SequenceModel, row: Row, name: str, width: int) -> str:
    if row.kind is RowKind.FOLD:
        label = labels.fold_label(row.arrows, row.kinds)
        if row.lane is None:
            return f"{'':>9}  {label}"
        return f"{'':>9}  Engine ⇢ {name:<{width}}  {label}"
    message = row.message
    assert message is not None
    arrow = "→" if message.kind.is_call else "←"
    at = "+" + labels.duration(message.time - model.started)
    return f"{at:>9}  Engine {arrow} {name:<{width}}  {labels.clip(labels.message_label(message), 120)}"
