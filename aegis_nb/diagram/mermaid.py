"""Mermaid `sequenceDiagram` text of a run, in the vocabulary of the documentation's diagram.

For the documentation's scenario (flight, hotel, card declined) this says what the page says: the
engine ``E`` and one participant ``S1..Sn`` per step, ``execute()`` arrows, ``Success`` and
``Fails (reason)`` replies, and a rollback ``rect`` box opening with ``Note over E: Rollback
Triggered`` that holds the ``compensate()`` arrows, newest first (a compensation that succeeds draws
no reply, as on the page). The box is a translucent red, not the page's near-black ``rgb(60, 20,
20)``: on a light theme (JupyterLab's and GitHub's default) that hid the arrows and their labels
inside it. Beyond the page: timeouts, retried and failed compensations (``--x`` replies) and a
closing note when something could not be undone. JupyterLab renders it offline
(``text/vnd.mermaid`` or a ```` ```mermaid ```` fence).

A parallel group is a ``par ... and ... end`` block, one branch per member holding that member's
arrows, forward and again inside the rollback box where its members are undone side by side;
members undone one at a time (``compensation="reverse_start"``) keep their order under a note that
names the group. A rollback the saga's code asked for (`Saga.rollback(reason)`) says so in its note,
with the reason, not as a failure.
"""

from __future__ import annotations

import re

from aegis_nb.diagram import labels
from aegis_nb.diagram.layout import GroupSpan, group_spans
from aegis_nb.diagram.model import Message, MessageKind, SequenceModel
from aegis_nb.kernel import phrases
from aegis_nb.kernel.printable import printable_line
from aegis_nb.kernel.report import FailureKind, SagaStatus

ROLLBACK_COLOUR = "rgba(220, 38, 38, 0.12)"  # mermaid's own text reads on it, on light and dark themes
_ENTITIES = {"#": "#35;", ";": "#59;", "<": "#lt;", ">": "#gt;", "%": "#37;"}
# ``%`` too: mermaid reads ``%%{...}%%`` anywhere in the source as a directive that reconfigures the
# diagram (and drops the text), so a step name or error message could otherwise restyle it.
_UNSAFE = re.compile("[#;<>%]")


def text(value: str) -> str:
    """`value` as one printable line (`printable_line`) and safe as mermaid text: ``#;<>%`` become
    entity codes."""
    return _UNSAFE.sub(lambda m: _ENTITIES[m.group()], printable_line(value))


def render_mermaid(model: SequenceModel) -> str:
    """The run as a mermaid ``sequenceDiagram`` (empty participants list before the run starts)."""
    lines = ["sequenceDiagram", "    participant E as Workflow Engine"]
    lines += [
        f"    participant S{i + 1} as Step {i + 1} ({text(name)})" for i, name in enumerate(model.steps)
    ]
    lines.append("")
    indent = "    "
    at = len(model.messages) if model.rollback_at is None else model.rollback_at
    spans = {
        span.first: span
        for span in group_spans(model, [(m.step, i >= at) for i, m in enumerate(model.messages)])
    }
    i = 0
    while i < len(model.messages):
        if i == model.rollback_at:
            lines += _open_rollback(model)
            indent = "        "
        span = spans.get(i)
        if span is not None:
            lines += _group(model, span, indent)
            i = span.last + 1
            continue
        arrow = _arrow(model.messages[i])
        if arrow is not None:
            lines.append(indent + arrow)
        i += 1
    if model.rollback_at is not None:
        if model.rollback_at >= len(model.messages):
            lines += _open_rollback(model)
        if model.status is SagaStatus.STUCK and model.report is not None:
            standing = ", ".join(
                f"S{model.report.steps.index(name) + 1}" for name in model.report.left_standing
            )
            stuck = f"{phrases.STUCK.capitalize()} - {phrases.NOT_UNDONE}"
            lines.append(f"        Note over E: {stuck} {text(standing)}")
        lines.append("    end")
    return "\n".join(lines) + "\n"


def _open_rollback(model: SequenceModel) -> list[str]:
    # The documentation page's own note, word for word (not `phrases.ROLLBACK_TRIGGERED`).
    note = "Rollback Triggered"
    requested = labels.requested_line(model)
    if requested is not None:
        note += f" - {text(requested)}"
    return ["", f"    rect {ROLLBACK_COLOUR}", f"        Note over E: {note}"]


def _group(model: SequenceModel, span: GroupSpan, indent: str) -> list[str]:
    """A group's arrows: a ``par`` block of one branch per member, or, for members undone one at a
    time, their arrows in order under a note over the group's participants."""
    messages = model.messages[span.first : span.last + 1]
    group = span.group
    if not span.concurrent:
        where = f"S{group.start + 1},S{group.last + 1}" if group.size > 1 else f"S{group.start + 1}"
        note = f"{indent}Note over {where}: {text(labels.group_label(group, concurrent=False))}"
        return [note, *(indent + arrow for arrow in map(_arrow, messages) if arrow is not None)]
    lines: list[str] = []
    members = sorted({message.step for message in messages})
    for n, step in enumerate(members):
        keyword = "par" if n == 0 else "and"
        lines.append(f"{indent}{keyword} Step {step + 1} ({text(model.steps[step])})")
        branch = (_arrow(message) for message in messages if message.step == step)
        lines += [f"{indent}    {arrow}" for arrow in branch if arrow is not None]
    lines.append(f"{indent}end")
    return lines


def _arrow(message: Message) -> str | None:
    """The arrow for `message`; successful compensations draw none, as on the page."""
    step = f"S{message.step + 1}"
    match message.kind:
        case MessageKind.EXECUTE:
            return f"E->>{step}: {phrases.EXECUTE}"
        case MessageKind.SUCCEEDED:
            return f"{step}-->>E: Success"
        case MessageKind.FAILED:
            if message.failure in (FailureKind.CANCELLED, FailureKind.INTERRUPTED):
                assert message.failure is not None
                return f"{step}-->>E: Fails ({message.failure.value})"
            reason = message.error.message or message.error.type if message.error else phrases.FAILED
            return f"{step}-->>E: Fails ({text(labels.clip(reason, 80))})"
        case MessageKind.TIMED_OUT:
            return f"{step}-->>E: Times out{labels.budget_text(message.budget)}"
        case MessageKind.COMPENSATE:
            again = "" if message.attempt == 1 else f" (attempt {message.attempt})"
            return f"E->>{step}: {phrases.COMPENSATE}{again}"
        case MessageKind.COMPENSATED:
            return None
        case MessageKind.COMPENSATION_FAILED:
            error = message.error
            reason = text(labels.clip((error.message or error.type) if error else phrases.FAILED, 80))
            then = phrases.WILL_RETRY if message.will_retry else phrases.GAVE_UP
            return f"{step}--xE: Compensation fails ({reason}), {then}"
    raise AssertionError(message.kind)  # pragma: no cover
