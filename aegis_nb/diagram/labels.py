"""The words of the diagrams: durations, arrow labels, status names, summaries. Shared by every view.

Only names, timings and the engine's already secret-scrubbed `ErrorInfo` text are ever used, never
context metadata, so no view can leak a `Secret`. Names and error text are untrusted (an upstream
tool's message): every one is made a printable line here (`printable_line`), so each view shows the
same visible escapes instead of control characters.
"""

from __future__ import annotations

from collections.abc import Sequence

from aegis_nb.diagram.model import Message, MessageKind, SequenceModel
from aegis_nb.kernel.printable import printable, printable_line
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaStatus
from aegis_nb.kernel.text import counted

STATUS_WORDS: dict[SagaStatus, str] = {
    SagaStatus.RUNNING: "running",
    SagaStatus.COMPENSATING: "rolling back",
    SagaStatus.COMMITTED: "committed",
    SagaStatus.ROLLED_BACK: "rolled back",
    SagaStatus.STUCK: "stuck",
}

KIND_WORDS: dict[MessageKind, str] = {
    MessageKind.EXECUTE: "execute()",
    MessageKind.SUCCEEDED: "ok",
    MessageKind.FAILED: "failed",
    MessageKind.TIMED_OUT: "timed out",
    MessageKind.COMPENSATE: "compensate()",
    MessageKind.COMPENSATED: "undone",
    MessageKind.COMPENSATION_FAILED: "compensation failed",
}


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
        return "failed"
    return printable_line(f"{error.type}: {error.message}" if error.message else error.type)


def message_label(message: Message) -> str:
    """What an arrow says, e.g. ``ok · 10.0 ms`` or ``✗ ValueError: Card Declined! · 10.1 ms``."""
    took = "" if message.duration is None else f" · {duration(message.duration)}"
    match message.kind:
        case MessageKind.EXECUTE:
            return "execute()"
        case MessageKind.SUCCEEDED:
            return f"ok{took}"
        case MessageKind.FAILED:
            if message.failure in (FailureKind.CANCELLED, FailureKind.INTERRUPTED):
                return f"✗ {message.failure.value}{took}"
            return f"✗ {error_text(message.error)}{took}"
        case MessageKind.TIMED_OUT:
            budget = "" if message.budget is None else f" (budget {duration(message.budget)})"
            return f"◷ timed out{took}{budget}"
        case MessageKind.COMPENSATE:
            return "compensate()" if message.attempt == 1 else f"compensate() · attempt {message.attempt}"
        case MessageKind.COMPENSATED:
            return f"undone{took}"
        case MessageKind.COMPENSATION_FAILED:
            then = (
                "retrying" if message.will_retry else f"gave up after {counted(message.attempt, 'attempt')}"
            )
            return f"✗ undo failed: {error_text(message.error)}{took} · {then}"
    raise AssertionError(message.kind)  # pragma: no cover


def fold_label(count: int, kinds: tuple[tuple[MessageKind, int], ...]) -> str:
    """A folded row, e.g. ``⋯ 1880 arrows folded: 940 execute(), 940 ok``."""
    parts = ", ".join(f"{n} {KIND_WORDS[kind]}" for kind, n in kinds)
    return f"⋯ {count} arrows folded: {parts}"


def headline(model: SequenceModel) -> str:
    """``3 steps · 31.2 ms · deadline 100.0 ms · run 1a2b3c4d``."""
    n = len(model.steps)
    parts = [counted(n, "step"), duration(model.elapsed)]
    if model.has_deadline:
        parts.append(f"deadline {duration(model.deadline - model.started)}")
    parts.append(f"run {printable(model.run_id[:8])}")  # a caller may choose the run id
    return " · ".join(parts)


def cause_line(model: SequenceModel) -> str | None:
    """Why the run rolled back, naming the step; ``None`` while nothing failed."""
    if model.cause is None and model.failure is None:
        return None
    where = "" if model.failed_step is None else f"{printable_line(model.steps[model.failed_step])}: "
    if model.failure is FailureKind.TIMEOUT:
        budgets = [
            m.budget for m in model.messages if m.kind is MessageKind.TIMED_OUT and m.budget is not None
        ]
        return f"{where}timed out" + (f" (budget {duration(budgets[-1])})" if budgets else "")
    if model.failure in (FailureKind.CANCELLED, FailureKind.INTERRUPTED):
        assert model.failure is not None
        return f"{where}{model.failure.value}"
    return f"{where}{error_text(model.cause)}"


_LISTED = 8  # names listed in a summary before it says "N steps, first … last"


def names(items: Sequence[object]) -> str:
    """``A, B, C``, or ``1000 steps: A, B … Z`` when there are too many to list."""
    if len(items) <= _LISTED:
        return ", ".join(printable_line(str(item)) for item in items)
    first, second, last = (printable_line(str(item)) for item in (items[0], items[1], items[-1]))
    return f"{len(items)} steps: {first}, {second} … {last}"


def summary(model: SequenceModel) -> str:
    """One line a person can act on: like `SagaReport.summary`, with long step lists shortened."""
    report = model.report
    if report is not None:
        reason = str(report.cause) if report.cause is not None else "failed"
        undone = names(report.compensated) or "nothing to undo"
        if not report.compensation_failures:
            return f"{reason} — rolled back: {undone}"
        standing = "; ".join(
            f"{printable_line(f.step)} ({f.error}, after {counted(f.attempts, 'attempt')})"
            for f in report.compensation_failures[:_LISTED]
        )
        more = len(report.compensation_failures) - _LISTED
        if more > 0:
            standing += f"; and {more} more"
        return f"{reason} — could not undo: {standing} — rolled back: {undone}"
    if model.status is SagaStatus.COMMITTED:
        return f"committed: {names(model.steps)}"
    if not model.run_id:
        return "waiting for a saga to start"
    if model.status is SagaStatus.COMPENSATING:
        return f"rolling back: {cause_line(model)}"
    running = [m.step for m in model.messages if m.kind is MessageKind.EXECUTE]
    if not running:
        return "started"
    index = running[-1]
    return f"running step {index + 1} of {len(model.steps)}: {printable_line(model.steps[index])}"
