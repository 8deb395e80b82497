"""The words of the diagrams: durations, arrow labels, status names, summaries. Shared by every view.

Only names, timings and the engine's already secret-scrubbed `ErrorInfo` text are ever used, never
context metadata, so no view can leak a `Secret`. Names and error text are untrusted (an upstream
tool's message): every one is made a printable line here (`printable_line`), so each view shows the
same visible escapes instead of control characters.
"""

from __future__ import annotations

import re

from aegis_nb.diagram.model import Group, LaneState, Message, MessageKind, SequenceModel
from aegis_nb.kernel import phrases
from aegis_nb.kernel.printable import printable, printable_line
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaStatus
from aegis_nb.kernel.text import counted


def status_word(status: SagaStatus) -> str:
    """``rolled back``: how a run's status is shown (upper-cased on the SVG's pill and in text)."""
    match status:
        case SagaStatus.RUNNING:
            return phrases.RUNNING
        case SagaStatus.COMPENSATING:
            return phrases.ROLLING_BACK
        case SagaStatus.COMMITTED:
            return phrases.COMMITTED
        case SagaStatus.ROLLED_BACK:
            return phrases.ROLLED_BACK
        case SagaStatus.STUCK:
            return phrases.STUCK


def kind_word(kind: MessageKind) -> str:
    """``undone``: what an arrow of this kind is, as a folded row counts them."""
    match kind:
        case MessageKind.EXECUTE:
            return phrases.EXECUTE
        case MessageKind.SUCCEEDED:
            return phrases.OK
        case MessageKind.FAILED:
            return phrases.FAILED
        case MessageKind.TIMED_OUT:
            return phrases.TIMED_OUT
        case MessageKind.COMPENSATE:
            return phrases.COMPENSATE
        case MessageKind.COMPENSATED:
            return phrases.UNDONE
        case MessageKind.COMPENSATION_FAILED:
            return phrases.COMPENSATION_FAILED


def lane_caption(state: LaneState) -> str:
    """``↩ undone``: a step's state, under its name on the lane head (SVG) or its node (DOT)."""
    match state:
        case LaneState.PENDING:
            return phrases.PENDING
        case LaneState.RUNNING:
            return f"{phrases.RUNNING}…"
        case LaneState.SUCCEEDED:
            return f"✓ {phrases.DONE}"
        case LaneState.FAILED:
            return f"✗ {phrases.FAILED}"
        case LaneState.TIMED_OUT:
            return f"◷ {phrases.TIMED_OUT}"
        case LaneState.COMPENSATING:
            return f"{phrases.UNDOING}…"
        case LaneState.COMPENSATED:
            return f"↩ {phrases.UNDONE}"
        case LaneState.NOTHING_TO_UNDO:
            return f"↩ {phrases.NOTHING_TO_UNDO}"
        case LaneState.STUCK:
            return f"⚠ {phrases.NOT_UNDONE}"


def duration(seconds: float) -> str:
    """``0.42 ms``, ``12.3 ms``, ``1.25 s``: short, and stable for snapshot tests."""
    if seconds < 0.001:
        return f"{seconds * 1000:.2f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def clip(text: str, limit: int) -> str:
    """`text` as one printable line, cut to `limit` characters with an ellipsis."""
    text = printable_line(text)
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"


def error_text(error: ErrorInfo | None) -> str:
    """``ValueError: Card Declined!`` as one printable line."""
    if error is None:
        return phrases.FAILED
    return printable_line(f"{error.type}: {error.message}" if error.message else error.type)


def budget_text(budget: float | None) -> str:
    """`` (budget 400.0 ms)``, or nothing when the budget is not known."""
    return "" if budget is None else f" ({phrases.BUDGET} {duration(budget)})"


def message_label(message: Message) -> str:
    """What an arrow says, e.g. ``ok · 10.0 ms`` or ``✗ ValueError: Card Declined! · 10.1 ms``."""
    took = "" if message.duration is None else f" · {duration(message.duration)}"
    match message.kind:
        case MessageKind.EXECUTE:
            return phrases.EXECUTE
        case MessageKind.SUCCEEDED:
            return f"{phrases.OK}{took}"
        case MessageKind.FAILED:
            if message.failure in (FailureKind.CANCELLED, FailureKind.INTERRUPTED):
                return f"✗ {message.failure.value}{took}"
            return f"✗ {error_text(message.error)}{took}"
        case MessageKind.TIMED_OUT:
            return f"◷ {phrases.TIMED_OUT}{took}{budget_text(message.budget)}"
        case MessageKind.COMPENSATE:
            again = "" if message.attempt == 1 else f" · attempt {message.attempt}"
            return f"{phrases.COMPENSATE}{again}"
        case MessageKind.COMPENSATED:
            return f"{phrases.NOTHING_TO_UNDO if message.nothing_to_undo else phrases.UNDONE}{took}"
        case MessageKind.COMPENSATION_FAILED:
            then = (
                phrases.RETRYING
                if message.will_retry
                else f"{phrases.GAVE_UP} after {counted(message.attempt, 'attempt')}"
            )
            return f"✗ {phrases.UNDO_FAILED}: {error_text(message.error)}{took} · {then}"
    raise AssertionError(message.kind)  # pragma: no cover


def fold_label(count: int, kinds: tuple[tuple[MessageKind, int], ...]) -> str:
    """A folded row, e.g. ``⋯ 1880 arrows folded: 940 execute(), 940 ok``."""
    parts = ", ".join(f"{n} {kind_word(kind)}" for kind, n in kinds)
    return f"⋯ {count} arrows folded: {parts}"


def headline(model: SequenceModel) -> str:
    """``3 steps · 31.2 ms · deadline 100.0 ms · run 1a2b3c4d`` (``4 steps, 1 parallel group · …``)."""
    n = len(model.steps)
    steps = counted(n, "step")
    if model.groups:
        steps += f", {counted(len(model.groups), 'parallel group')}"
    parts = [steps, duration(model.elapsed)]
    if model.has_deadline:
        parts.append(f"{phrases.DEADLINE} {duration(model.deadline - model.started)}")
    parts.append(f"run {run_label(model.run_id)}")
    return " · ".join(parts)


_GENERATED_RUN_ID = re.compile(r"[0-9a-f]{32}")
RUN_ID_SHOWN = 40
"""The most of a caller's run id a headline shows (a workflow id, a handle) before eliding it."""


def run_label(run_id: str) -> str:
    """A generated run id cut to 8 hex digits (as git cuts hashes); a caller's own id (a Temporal
    workflow id such as ``trip-lisbon-1``) whole, as it has no shorter form that still names the run."""
    if _GENERATED_RUN_ID.fullmatch(run_id):
        return run_id[:8]
    shown = printable(run_id)
    return shown if len(shown) <= RUN_ID_SHOWN else shown[: RUN_ID_SHOWN - 1] + "…"


def cause_line(model: SequenceModel) -> str | None:
    """Why the run rolled back, naming the step; ``None`` while nothing failed (and for a rollback
    the saga's own code asked for: `requested_line`)."""
    if (model.cause is None and model.failure is None) or model.requested:
        return None
    where = "" if model.failed_step is None else f"{printable_line(model.steps[model.failed_step])}: "
    if model.failure is FailureKind.TIMEOUT:
        budgets = [
            m.budget for m in model.messages if m.kind is MessageKind.TIMED_OUT and m.budget is not None
        ]
        return f"{where}{phrases.TIMED_OUT}{budget_text(budgets[-1] if budgets else None)}"
    if model.failure in (FailureKind.CANCELLED, FailureKind.INTERRUPTED):
        assert model.failure is not None
        return f"{where}{model.failure.value}"
    return f"{where}{error_text(model.cause)}"


def requested_line(model: SequenceModel) -> str | None:
    """``rolled back: too expensive`` for a rollback the saga's code asked for, with its reason; not
    an error, so no view draws it as one. ``None`` for any other run."""
    if not model.requested:
        return None
    reason = printable_line(model.cause.message) if model.cause is not None else ""
    return f"{phrases.ROLLED_BACK}: {reason}" if reason else phrases.ROLLED_BACK


def steps_span(group: Group) -> str:
    """``steps 2–3``: the members of a parallel group, by their numbers (from 1)."""
    if group.size == 1:
        return f"step {group.start + 1}"
    return f"steps {group.start + 1}–{group.last + 1}"


def group_label(group: Group, *, concurrent: bool = True) -> str:
    """``∥ parallel · steps 2–3``; ``… · one at a time`` for members undone one by one."""
    label = f"∥ parallel · {steps_span(group)}"
    return label if concurrent else f"{label} · one at a time"


_LISTED = 8  # names listed in a summary before it says "N steps, first … last"


def summary(model: SequenceModel) -> str:
    """One line a person can act on: the run's `SagaReport.summary` once it finished, shortened to
    fit a picture; what it is doing while it runs."""
    if model.report is not None:
        return model.report.summary(at_most=_LISTED)
    if not model.run_id:
        return phrases.WAITING
    if model.status is SagaStatus.COMPENSATING:
        # A requested rollback says why only when it ends (the report holds the reason).
        cause = cause_line(model)
        return f"{phrases.ROLLING_BACK}: {cause}" if cause else phrases.ROLLING_BACK
    running = [m.step for m in model.messages if m.kind is MessageKind.EXECUTE]
    if not running:
        return phrases.STARTED
    index = running[-1]
    name = printable_line(model.steps[index])
    # A dynamic saga's steps are not known ahead: there is no "of N".
    of = "" if model.dynamic else f" of {len(model.steps)}"
    group = model.group_of(index)
    if group is not None:
        return f"{phrases.RUNNING} {steps_span(group)}{of} (parallel): {_members(model, group)}"
    return f"{phrases.RUNNING} step {index + 1}{of}: {name}"


def _members(model: SequenceModel, group: Group) -> str:
    return phrases.listed(model.steps[group.start : group.last + 1], _LISTED)
