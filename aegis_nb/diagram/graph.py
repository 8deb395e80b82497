"""The saga as a graph (graphviz DOT): steps left to right with their states, compensation edges back.

`render_dot` is pure. `render_graph` runs the `dot` executable on it; when `dot` is missing or fails
it returns our own sequence-diagram SVG with a one-line note instead, so a notebook cell never fails
for want of graphviz. Graphviz's SVG uses fixed ids (``graph0``, ``node1``): show it as an image
(`<img>` data URI, as the notebook layer does), not inlined next to another graph.
"""

from __future__ import annotations

import enum
import re
import shutil
import subprocess
from dataclasses import dataclass

from aegis_nb.diagram import labels
from aegis_nb.diagram.layout import DEFAULT_MAX_LANES, LaneKind, layout
from aegis_nb.diagram.model import LaneState, MessageKind, SequenceModel
from aegis_nb.diagram.svg import LANE_LOOKS, STATUS_COLOURS, render_svg
from aegis_nb.kernel.printable import printable, printable_line
from aegis_nb.kernel.report import SagaStatus

DOT_TIMEOUT = 30.0
_ENTITY = re.compile("&(?=#?[0-9A-Za-z]+;)")  # the start of what graphviz would read as an entity


class GraphSource(enum.Enum):
    """Who drew a graph rendering."""

    GRAPHVIZ = "graphviz"
    FALLBACK = "fallback"


@dataclass(frozen=True, slots=True)
class GraphRendering:
    """An SVG and, when graphviz could not draw it, the one-line reason."""

    svg: str
    source: GraphSource
    note: str | None = None


def quote(value: str) -> str:
    """A DOT double-quoted string that graphviz shows as `value`, and that encodes as UTF-8.

    Each ``\\n`` is a line break of the label. Every other control character is shown as its escape
    (`printable`): graphviz copies C0 characters into its SVG, which XML then refuses, and would
    draw bidi overrides. Graphviz decodes HTML entities in every label, so the ``&`` of one
    (``a &lt; b``) becomes ``&amp;`` (a lone ``&`` is drawn as it is); lone surrogates become
    U+FFFD, which `dot` can read.
    """
    lines = (printable(line).replace("\\", "\\\\").replace('"', '\\"') for line in value.split("\n"))
    return '"' + _ENTITY.sub("&amp;", "\\n".join(lines)) + '"'


def render_dot(model: SequenceModel, *, max_lanes: int = DEFAULT_MAX_LANES) -> str:
    """The DOT source: start → steps → outcome, compensations as dashed violet edges going back."""
    durations: dict[int, float] = {}
    attempts: dict[int, int] = {}
    for message in model.messages:
        if message.kind in (MessageKind.SUCCEEDED, MessageKind.FAILED, MessageKind.TIMED_OUT):
            durations[message.step] = message.duration or 0.0
        elif message.kind is MessageKind.COMPENSATE:
            attempts[message.step] = message.attempt
    status = labels.status_word(model.status)
    title = f"{printable_line(model.saga or 'saga')} · {status}"
    lines = [
        "digraph saga {",
        f"  graph [rankdir=LR, bgcolor={quote('#ffffff')}, label={quote(title)}, labelloc=t, "
        'fontname="Helvetica", fontsize=16, pad=0.3, nodesep=0.5, ranksep=0.45];',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=12, penwidth=1.6];',
        '  edge [fontname="Helvetica", fontsize=10, penwidth=1.4];',
        '  start [label="start", shape=circle, fillcolor="#1e293b", fontcolor="#ffffff", width=0.6];',
    ]
    ids: dict[int, str] = {}
    previous = "start"
    for lane in layout(model, max_lanes=max_lanes).lanes:
        if lane.kind is LaneKind.ENGINE:
            continue
        node = f"s{lane.first}"
        if lane.kind is LaneKind.FOLD:
            text = f"⋯ steps {lane.first + 1}–{lane.last + 1}"
            lines.append(
                f'  {node} [label={quote(text)}, fillcolor="#f8fafc", color="#94a3b8", style="dashed"];'
            )
        else:
            state = lane.state or LaneState.PENDING
            look = LANE_LOOKS[state]
            detail = labels.lane_caption(state)
            if lane.first in durations:
                detail += f" · {labels.duration(durations[lane.first])}"
            if attempts.get(lane.first, 1) > 1:
                detail += f"\nundo attempts: {attempts[lane.first]}"
            text = f"{lane.first + 1} · {labels.clip(model.steps[lane.first], 40)}\n{detail}"
            lines.append(
                f"  {node} [label={quote(text)}, fillcolor={quote(look.fill)}, color={quote(look.stroke)}, "
                f"fontcolor={quote(look.ink)}];"
            )
        for step in range(lane.first, lane.last + 1):
            ids[step] = node
        reached = lane.state not in (None, LaneState.PENDING)
        style = "" if reached else ', style="dashed", color="#cbd5e1"'
        lines.append(f"  {previous} -> {node} [arrowsize=0.8{style}];")
        previous = node
    colour = STATUS_COLOURS[model.status]
    lines.append(
        f'  outcome [label={quote(status)}, shape=box, style="rounded,filled,bold", '
        f'fillcolor={quote(colour)}, fontcolor="#ffffff", color={quote(colour)}];'
    )
    if model.status is SagaStatus.COMMITTED:
        lines.append(f"  {previous} -> outcome;")
    back = ids.get(model.failed_step) if model.failed_step is not None else None
    done: set[str] = set()
    for message in model.messages:
        if message.kind is not MessageKind.COMPENSATE or message.attempt != 1:
            continue
        node = ids[message.step]
        if node in done:
            continue
        done.add(node)
        source = back or previous
        lines.append(
            f'  {source} -> {node} [label="compensate", color="#7c3aed", fontcolor="#6d28d9", '
            'style="dashed", constraint=false];'
        )
        back = node
    if model.status in (SagaStatus.ROLLED_BACK, SagaStatus.STUCK) and back is not None:
        lines.append(f'  {back} -> outcome [color="#7c3aed", style="dashed", constraint=false];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_graph(model: SequenceModel, *, dot: str | None = "dot") -> GraphRendering:
    """Draw `render_dot(model)` with graphviz `dot` (a name on PATH or a path; ``None``: do not try).

    Never raises for a missing or failing `dot`: falls back to the sequence-diagram SVG with a note.
    """
    executable = shutil.which(dot) if dot is not None else None
    if executable is None:
        return _fallback(model, "graphviz `dot` is not installed; showing the sequence diagram instead")
    try:
        done = subprocess.run(
            [executable, "-Tsvg"],
            input=render_dot(model).encode("utf-8"),
            capture_output=True,
            timeout=DOT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _fallback(
            model, f"graphviz `dot` could not run ({type(exc).__name__}); showing the sequence diagram"
        )
    if done.returncode != 0:
        reason = labels.clip(done.stderr.decode("utf-8", "replace"), 100) or f"exit {done.returncode}"
        return _fallback(model, f"graphviz `dot` failed ({reason}); showing the sequence diagram")
    return GraphRendering(done.stdout.decode("utf-8"), GraphSource.GRAPHVIZ)


def _fallback(model: SequenceModel, note: str) -> GraphRendering:
    return GraphRendering(render_svg(model), GraphSource.FALLBACK, note)
