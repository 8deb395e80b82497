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
"""

from __future__ import annotations

import re

from aegis_nb.diagram import labels
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
    for i, message in enumerate(model.messages):
        if i == model.rollback_at:
            lines += _open_rollback()
            indent = "        "
        arrow = _arrow(message)
        if arrow is not None:
            lines.append(indent + arrow)
    if model.rollback_at is not None:
        if model.rollback_at >= len(model.messages):
            lines += _open_rollback()
        if model.status is SagaStatus.STUCK and model.report is not None:
            standing = ", ".join(
                f"S{model.report.steps.index(name) + 1}" for name in model.report.left_standing
            )
            stuck = f"{phrases.STUCK.capitalize()} - {phrases.NOT_UNDONE}"
            lines.append(f"        Note over E: {stuck} {text(standing)}")
        lines.append("    end")
    return "\n".join(lines) + "\n"


def _open_rollback() -> list[str]:
    # The documentation page's own note, word for word (not `phrases.ROLLBACK_TRIGGERED`).
    return ["", f"    rect {ROLLBACK_COLOUR}", "        Note over E: Rollback Triggered"]


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
