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
from aegis_nb.diagram.layout import DEFAULT_MAX_LANES, LaneKind, group_spans, layout
from aegis_nb.diagram.model import Group, LaneState, MessageKind, SequenceModel
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
    """The DOT source: start → steps → outcome, compensations as dashed violet edges going back.

    A parallel group's members sit side by side (one rank) in a labelled cluster: the step before
    fans out to each member and each member joins the step after.
    """
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
    previous = ["start"]  # the nodes the next one follows: a group's members all lead on
    before_group: list[str] = []  # what the current group's members each follow
    current: Group | None = None
    fan_out: list[str] = []
    for lane in layout(model, max_lanes=max_lanes).lanes:
        if lane.kind is LaneKind.ENGINE:
            continue
        group = model.group_of(lane.first) if lane.kind is LaneKind.STEP else None
        if current is not None and group is not current:
            # Edges after the cluster: one inside it would pull the step before into it.
            lines += ["  }", *fan_out]
            current, fan_out = None, []
        if group is not None and current is None:
            current, before_group, previous = group, previous, []
            lines.append(
                f"  subgraph cluster_g{group.start} {{ label={quote(labels.group_label(group))}; "
                'style="dashed,rounded"; color="#64748b"; fontcolor="#334155"; fontsize=11; rank=same;'
            )
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
        if current is None:
            lines += [f"  {source} -> {node} [arrowsize=0.8{style}];" for source in previous]
            previous = [node]
        else:
            fan_out += [f"  {source} -> {node} [arrowsize=0.8{style}];" for source in before_group]
            previous.append(node)
    if current is not None:
        lines += ["  }", *fan_out]
    colour = STATUS_COLOURS[model.status]
    lines.append(
        f'  outcome [label={quote(status)}, shape=box, style="rounded,filled,bold", '
        f'fillcolor={quote(colour)}, fontcolor="#ffffff", color={quote(colour)}];'
    )
    if model.status is SagaStatus.COMMITTED:
        lines += [f"  {source} -> outcome;" for source in previous]
    at = len(model.messages) if model.rollback_at is None else model.rollback_at
    spans = group_spans(model, [(m.step, n >= at) for n, m in enumerate(model.messages)])
    side_by_side = {span.group for span in spans if span.in_rollback and span.concurrent}
    failed = ids.get(model.failed_step) if model.failed_step is not None else None
    back = [failed] if failed is not None else [previous[-1]]
    stage: list[str] = []  # the nodes undone last, together when a group's members were
    stage_group: Group | None = None
    done: set[str] = set()
    for message in model.messages:
        if message.kind is not MessageKind.COMPENSATE or message.attempt != 1:
            continue
        node = ids[message.step]
        if node in done:
            continue
        done.add(node)
        group = model.group_of(message.step)
        if group is None or group != stage_group or group not in side_by_side:
            back, stage, stage_group = stage or back, [], group
        stage.append(node)  # undone alongside the stage's others: from the same nodes
        lines += [
            f'  {source} -> {node} [label="compensate", color="#7c3aed", fontcolor="#6d28d9", '
            'style="dashed", constraint=false];'
            for source in back
        ]
    last = stage or ([failed] if failed is not None else [])
    if model.status in (SagaStatus.ROLLED_BACK, SagaStatus.STUCK):
        lines += [
            f'  {node} -> outcome [color="#7c3aed", style="dashed", constraint=false];' for node in last
        ]
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
