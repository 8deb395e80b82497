"""The SVG sequence diagram: a pure function from a `SequenceModel` to self-contained SVG text.

Drawn like the documentation's mermaid picture (the engine and one lifeline per step, `execute()`
arrows and their replies, a red rollback box holding the `compensate()` arrows, newest first) and
coloured by outcome. Same model, same bytes: no clock, no randomness, no global counter. Element ids
derive from the run id and the number of events, so several diagrams inlined in one page never
share an id; names and error text are escaped, and made valid XML text with their control
characters shown as escapes (see `esc`). No label sits on an activation bar: an arrow label goes
in the gap between the bars its arrow crosses, on a second line at a " · " or " (budget" boundary
if it must, beyond the arrow's end or wrapped by words if it is longer still, its row taller
(`_Drawing._label`). Huge runs are folded by `layout`.

A parallel group's members, adjacent lanes, have their heads inside one labelled frame
(``∥ parallel · steps 2–3``); each run of the group's rows is framed, as Mermaid frames a ``par``
block, tabbed ``par`` (or ``one at a time`` for members undone one by one), so no two frames cross.
A rollback the saga's code asked for is stated under the headline, in the rollback's colour, not
as an error.
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import re
from dataclasses import dataclass
from html import escape

from aegis_nb.diagram import labels
from aegis_nb.diagram.layout import (
    DEFAULT_MAX_LANES,
    DEFAULT_MAX_ROWS,
    GroupSpan,
    Lane,
    LaneKind,
    Row,
    RowKind,
    layout,
)
from aegis_nb.diagram.metrics import fit, text_width, wrap
from aegis_nb.diagram.model import Group, LaneState, MessageKind, SequenceModel
from aegis_nb.kernel import phrases
from aegis_nb.kernel.printable import printable, printable_line
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.kernel.text import counted

FONT = "ui-sans-serif,system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif"

INK = "#0f172a"
MUTED = "#64748b"
LIFELINE = "#cbd5e1"

ARROW_COLOURS: dict[MessageKind, str] = {
    MessageKind.EXECUTE: "#334155",
    MessageKind.SUCCEEDED: "#15803d",
    MessageKind.FAILED: "#dc2626",
    MessageKind.TIMED_OUT: "#c2410c",
    MessageKind.COMPENSATE: "#7c3aed",
    MessageKind.COMPENSATED: "#6d28d9",
    MessageKind.COMPENSATION_FAILED: "#9f1239",
}


@dataclass(frozen=True, slots=True)
class LaneLook:
    """A lane head's colours: `ink` for the name, `caption_ink` for its state (`labels.lane_caption`).

    Both read at 4.5:1 or more on `fill` (WCAG AA for small text); the border (`stroke`) may be lighter.
    """

    fill: str
    stroke: str
    ink: str
    caption_ink: str


LANE_LOOKS: dict[LaneState, LaneLook] = {
    LaneState.PENDING: LaneLook("#f8fafc", "#cbd5e1", "#64748b", "#64748b"),
    LaneState.RUNNING: LaneLook("#dbeafe", "#2563eb", "#1e3a8a", "#1d4ed8"),
    LaneState.SUCCEEDED: LaneLook("#dcfce7", "#16a34a", "#14532d", "#15803d"),
    LaneState.FAILED: LaneLook("#fee2e2", "#dc2626", "#7f1d1d", "#b91c1c"),
    LaneState.TIMED_OUT: LaneLook("#ffedd5", "#ea580c", "#7c2d12", "#c2410c"),
    LaneState.COMPENSATING: LaneLook("#ede9fe", "#7c3aed", "#4c1d95", "#6d28d9"),
    LaneState.COMPENSATED: LaneLook("#ede9fe", "#7c3aed", "#4c1d95", "#6d28d9"),
    LaneState.NOTHING_TO_UNDO: LaneLook("#ede9fe", "#7c3aed", "#4c1d95", "#6d28d9"),
    LaneState.STUCK: LaneLook("#ffe4e6", "#9f1239", "#881337", "#9f1239"),
}

STATUS_COLOURS: dict[SagaStatus, str] = {
    SagaStatus.RUNNING: "#2563eb",
    SagaStatus.COMPENSATING: "#7c3aed",
    SagaStatus.COMMITTED: "#16a34a",
    SagaStatus.ROLLED_BACK: "#dc2626",
    SagaStatus.STUCK: "#9f1239",
}

PAD = 20
GUTTER = 64  # left margin for the "+12.3 ms" time of each row
HEAD_H = 46
ROW_H = 32
NOTE_H = 38
FOOT_LINE_H = 18  # the summary under the drawing wraps onto up to FOOT_LINES lines
FOOT_LINES = 3
MIN_LANE_W = 140
CAPTION_SIZE = 11.0  # a lane head's state line, e.g. "1 · ✓ done"
CAPTION_MIN_SIZE = 9.5
MAX_LANE_W = 200
MIN_WIDTH = 600
FEET_AFTER_ROWS = 16  # taller diagrams repeat the lane heads at the bottom, as mermaid does
ROLLBACK_LEFT = PAD + GUTTER - 8  # the rollback box's left edge, just right of the row times
WIDE_LANES = 7  # wider diagrams name the step in each label and set it by the step's end

GROUP_BAND = 20  # room above the lane heads for a parallel group's frame label
GROUP_INK = "#475569"
GROUP_STROKE = "#94a3b8"

LABEL_LINE_H = 15  # a wrapped arrow label's second line, added to its row's height
LABEL_INSET = 10  # room an arrow label leaves at each end of its arrow, clear of the activation bars
LABEL_SIZE = 12.5
LABEL_CHARS = 110  # the most characters a line of an arrow label shows, however long its arrow
LABEL_LINES = 4  # the most lines a label wrapped by words takes (a long error on a short arrow)
# Where a label too long for its arrow may go on to a second line, and how many characters of the
# mark the break drops: "ok · 10.0 ms" loses its " · ", "(budget 90.0 ms)" keeps its bracket.
LABEL_BREAKS = ((" · ", 3), (f" ({phrases.BUDGET} ", 1))

_NONCHARACTERS = re.compile("[\ufffe\uffff]")  # XML forbids them; they mean nothing to show


class Anchor(enum.Enum):
    """Where an arrow label's lines are set: the SVG ``text-anchor`` of each."""

    START = "start"
    MIDDLE = "middle"
    END = "end"


@dataclass(frozen=True, slots=True)
class ArrowLabel:
    """An arrow's label as drawn: one or two lines, anchored at `at`."""

    lines: tuple[str, ...]
    anchor: Anchor
    at: float
    bold: bool


def breaks(text: str) -> tuple[tuple[str, str], ...]:
    """Each way to set `text` on two lines at a `LABEL_BREAKS` boundary, in the order they occur."""
    splits: list[tuple[int, str, str]] = []
    for mark, dropped in LABEL_BREAKS:
        start = text.find(mark)
        while start > 0:
            if text[start + len(mark) :]:
                splits.append((start, text[:start], text[start + dropped :]))
            start = text.find(mark, start + 1)
    return tuple((first, rest) for _, first, rest in sorted(splits))


def _extra_height(label: ArrowLabel | None) -> int:
    return 0 if label is None else LABEL_LINE_H * (len(label.lines) - 1)


def _open_bars(rows: tuple[Row, ...]) -> tuple[frozenset[int], ...]:
    """For each row, the lanes whose activation bar runs through its label: called in an earlier
    row and answered in this row or later (the bar starts at its call's arrow, under that label)."""
    open_lanes: set[int] = set()
    found = []
    for row in rows:
        found.append(frozenset(open_lanes))
        if row.kind is RowKind.MESSAGE and row.message is not None and row.lane is not None:
            if row.message.kind.is_call:
                open_lanes.add(row.lane)
            else:
                open_lanes.discard(row.lane)
    return tuple(found)


def esc(text: str) -> str:
    """Text safe inside an SVG element or attribute: escaped, and only characters XML allows.

    XML 1.0 forbids most C0 characters even as character references (``&#1;``): they, and the
    other controls (bidi overrides reorder the drawn text), are shown as escapes (`printable`).
    """
    return escape(printable(_NONCHARACTERS.sub("", text)), quote=True)


def id_prefix(model: SequenceModel) -> str:
    """``aegis-<hash of run id>-<events>``: stable for one state, distinct across runs and states."""
    # surrogatepass: a caller's run id may hold lone surrogates too, and must still hash (distinctly).
    digest = hashlib.sha1(model.run_id.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"aegis-{digest}-{model.event_count}"


def render_svg(
    model: SequenceModel, *, max_lanes: int = DEFAULT_MAX_LANES, max_rows: int = DEFAULT_MAX_ROWS
) -> str:
    """The whole diagram as one ``<svg>`` element (no external references)."""
    return _Drawing(model, max_lanes, max_rows).render()


class _Drawing:
    """Geometry and drawing of one diagram; lives for one `render_svg` call."""

    def __init__(self, model: SequenceModel, max_lanes: int, max_rows: int) -> None:
        self.model = model
        self.plan = layout(model, max_lanes=max_lanes, max_rows=max_rows)
        self.prefix = id_prefix(model)
        # The engine's head is the same in every drawing, and fits the narrowest lane.
        longest = max(
            (
                text_width(self._lane_name(lane), 12.5, bold=True)
                for lane in self.plan.lanes
                if lane.kind is not LaneKind.ENGINE
            ),
            default=0.0,
        )
        self.lane_w = min(MAX_LANE_W, max(MIN_LANE_W, round(longest + 30)))
        self.cause = labels.cause_line(model)
        self.requested = labels.requested_line(model)
        noted = self.cause is not None or self.requested is not None
        self.head_top = PAD + (74 if noted else 54) + (GROUP_BAND if model.groups else 0)
        self.rows_top = self.head_top + HEAD_H + 16
        self.width = max(MIN_WIDTH, 2 * PAD + GUTTER + len(self.plan.lanes) * self.lane_w)
        self.wide = len(self.plan.lanes) > WIDE_LANES
        # Each arrow's label is set first: one that wraps makes its row a line taller.
        self.open_bars = _open_bars(self.plan.rows)
        self.labels = tuple(
            self._label(row, bars) for row, bars in zip(self.plan.rows, self.open_bars, strict=True)
        )
        self.row_tops: list[int] = []
        y = self.rows_top
        for row, label in zip(self.plan.rows, self.labels, strict=True):
            self.row_tops.append(y)
            y += NOTE_H if row.kind is RowKind.ROLLBACK else ROW_H + _extra_height(label)
        self.rows_bottom = y + 10
        long = len(self.plan.rows) > FEET_AFTER_ROWS
        self.feet_top: int | None = self.rows_bottom + 6 if long else None
        self.bottom = self.rows_bottom if self.feet_top is None else self.feet_top + HEAD_H
        self.footer = self._footer_lines()
        self.height = self.bottom + 44 + FOOT_LINE_H * (len(self.footer) - 1)

    def x(self, lane: int) -> float:
        return PAD + GUTTER + self.lane_w * lane + self.lane_w / 2

    def arrow_y(self, index: int) -> int:
        """The y of row `index`'s arrow: its row's foot, under a label of one line or two."""
        return self.row_tops[index] + ROW_H - 10 + _extra_height(self.labels[index])

    def _label(self, row: Row, bars: frozenset[int]) -> ArrowLabel | None:
        """How a message row's label is set: over its arrow, clear of every activation bar.

        The arrow is cut into gaps by the bars open on the lanes it crosses (`bars`, e.g. a group
        member still running while the next one is called); the label goes in the gap nearest the
        arrow's end where it fits, on one line, else on two at a `breaks` boundary. Failing that
        (a long error on a short arrow), it goes beyond the arrow's end, right of the step's bar, up
        to the next open bar or the drawing's edge, if it fits there so. Otherwise it is wrapped by
        words in the widest of those gaps on up to `LABEL_LINES` lines, the last cut with an
        ellipsis (the row's tooltip holds it all). It never crosses a bar: the drawing does not
        grow to make room either, or a live view would jump wider when a failure arrives.
        """
        message = row.message
        if row.kind is not RowKind.MESSAGE or message is None or row.lane is None:
            return None
        kind = message.kind
        bold = kind in (MessageKind.FAILED, MessageKind.TIMED_OUT)
        text = labels.clip(labels.message_label(message), 2 * LABEL_CHARS)
        if self.wide:
            text = labels.clip(f"{printable_line(self.model.steps[message.step])}: {text}", 2 * LABEL_CHARS)

        def width(line: str) -> float:
            return text_width(line, LABEL_SIZE, bold=bold)

        def set_in(room: float) -> tuple[str, ...] | None:
            """On one line, or two at the most even boundary, if `text` fits `room` so."""
            if width(one[0]) <= room:
                return one
            fitting = [pair for pair in splits if max(map(width, pair)) <= room]
            return fitting[0] if fitting else None

        one = (labels.clip(text, LABEL_CHARS),)
        # The most even split first: it leaves the most room either side.
        splits = sorted(
            (pair for pair in breaks(text) if max(map(len, pair)) <= LABEL_CHARS),
            key=lambda pair: max(map(width, pair)),
        )
        ends = [0, *sorted(lane for lane in bars if 0 < lane < row.lane), row.lane]
        gaps = [
            (self.x(a) + 6 + LABEL_INSET, self.x(b) - 6 - LABEL_INSET) for a, b in itertools.pairwise(ends)
        ]
        for left, right in reversed(gaps):
            lines = set_in(right - left)
            if lines is not None:
                return self._placed(lines, left, right, bold)
        after = [lane for lane in bars if lane > row.lane]
        stop = self.x(min(after)) - 6 - LABEL_INSET if after else self.width - PAD - 6
        beyond = (self.x(row.lane) + 6 + LABEL_INSET, stop)
        lines = set_in(beyond[1] - beyond[0])
        if lines is not None:
            return ArrowLabel(lines, Anchor.START, beyond[0], bold)
        left, right = max([*gaps, beyond], key=lambda gap: gap[1] - gap[0])
        lines = wrap(text, max(right - left, 1.0), LABEL_SIZE, bold=bold, max_lines=LABEL_LINES)
        if (left, right) == beyond:
            return ArrowLabel(lines, Anchor.START, left, bold)
        return self._placed(lines, left, right, bold)

    def _placed(self, lines: tuple[str, ...], left: float, right: float, bold: bool) -> ArrowLabel:
        if self.wide:
            # Readable where the gap ends, however far right that is.
            return ArrowLabel(lines, Anchor.END, right, bold)
        return ArrowLabel(lines, Anchor.MIDDLE, (left + right) / 2, bold)

    def _lane_name(self, lane: Lane) -> str:
        if lane.kind is LaneKind.ENGINE:
            return "Workflow Engine"
        if lane.kind is LaneKind.FOLD:
            return f"⋯ {lane.folded} steps"
        return printable_line(self.model.steps[lane.first])  # measured as it is drawn

    # -- drawing --------------------------------------------------------------------------------

    def render(self) -> str:
        model, p = self.model, self.prefix
        arrows = sum(1 for row in self.plan.rows if row.kind is RowKind.MESSAGE)
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" id="{p}" class="aegis-diagram" '
            f'width="{self.width}" height="{self.height}" viewBox="0 0 {self.width} {self.height}" '
            f'font-family="{FONT}" data-status="{model.status.value}" data-events="{model.event_count}" '
            f'data-arrows="{arrows}" role="img" aria-label="{esc(self._aria())}">',
            f"<title>{esc(self._aria())}</title>",
            self._defs(),
            f'<rect width="{self.width}" height="{self.height}" rx="12" fill="#ffffff" stroke="#e2e8f0"/>',
            *self._header(),
            *self._group_frames(),
            *self._lifelines(),
            *self._body(),
            *self._footer(),
            "</svg>",
        ]
        return "\n".join(parts) + "\n"

    def _aria(self) -> str:
        title = printable_line(self.model.saga or "saga")
        return f"{title}: {labels.status_word(self.model.status)} — {labels.summary(self.model)}"

    def _defs(self) -> str:
        markers = "".join(
            f'<marker id="{self.prefix}-head-{kind.name.lower()}" viewBox="0 0 10 10" refX="9" refY="5" '
            f'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
            f'<path d="M0,1 L10,5 L0,9 z" fill="{colour}"/></marker>'
            for kind, colour in ARROW_COLOURS.items()
        )
        return f"<defs>{markers}</defs>"

    def _header(self) -> list[str]:
        model = self.model
        status = labels.status_word(model.status)
        colour = STATUS_COLOURS[model.status]
        pill_w = len(status) * 8.2 + 24
        pill_x = self.width - PAD - pill_w
        title = esc(fit(model.saga or "saga", pill_x - PAD - 16, 19, bold=True))
        out = [
            f'<text x="{PAD}" y="{PAD + 20}" font-size="19" font-weight="700" fill="{INK}">{title}</text>',
            f'<g class="aegis-status"><rect x="{pill_x:.1f}" y="{PAD + 4}" width="{pill_w:.1f}" height="22" '
            f'rx="11" fill="{colour}"/><text x="{pill_x + pill_w / 2:.1f}" y="{PAD + 19}" font-size="12" '
            f'font-weight="700" fill="#ffffff" text-anchor="middle" letter-spacing="0.5">'
            f"{esc(status.upper())}</text></g>",
            f'<text x="{PAD}" y="{PAD + 42}" font-size="12.5" fill="{MUTED}">'
            f"{esc(labels.headline(model))}</text>",
        ]
        if self.cause:
            out.append(
                f'<text x="{PAD}" y="{PAD + 62}" font-size="13" font-weight="600" fill="#b91c1c">'
                f"{esc(fit('✗ ' + self.cause, self.width - 2 * PAD, 13, bold=True))}</text>"
            )
        if self.requested:
            out.append(
                f'<text class="aegis-requested" x="{PAD}" y="{PAD + 62}" font-size="13" font-weight="600" '
                f'fill="{ARROW_COLOURS[MessageKind.COMPENSATED]}">'
                f"{esc(fit('⟲ ' + self.requested, self.width - 2 * PAD, 13, bold=True))}</text>"
            )
        return out

    def _group_lanes(self, group: Group) -> tuple[int, int] | None:
        """The first and last lane that draw `group`'s members (``None``: none is drawn)."""
        drawn = [
            i
            for i, lane in enumerate(self.plan.lanes)
            if lane.kind is not LaneKind.ENGINE and lane.first <= group.last and lane.last >= group.start
        ]
        return (drawn[0], drawn[-1]) if drawn else None

    def _group_frames(self) -> list[str]:
        """Behind the lifelines: a labelled frame around each group's lane heads. The rows are framed
        by their runs (`_span_frame`); a frame from heads to bottom would cross those."""
        out: list[str] = []
        for group in self.model.groups:
            lanes = self._group_lanes(group)
            if lanes is None:
                continue
            left = self.x(lanes[0]) - self.lane_w / 2 + 3
            right = self.x(lanes[1]) + self.lane_w / 2 - 3
            top = self.head_top - GROUP_BAND
            height = self.head_top + HEAD_H + 6 - top
            label = labels.group_label(group)
            shown = fit(label, right - left - 16, 11, bold=True)
            out.append(
                f'<g class="aegis-group" data-start="{group.start}" data-size="{group.size}">'
                f"<title>{esc(label)}</title>"
                f'<rect x="{left:.1f}" y="{top}" width="{right - left:.1f}" height="{height}" '
                f'rx="10" fill="#f1f5f9" fill-opacity="0.7" stroke="{GROUP_STROKE}" stroke-width="1.2" '
                f'stroke-dasharray="6 3"/><text x="{left + 8:.1f}" y="{top + 14}" font-size="11" '
                f'font-weight="700" fill="{GROUP_INK}">{esc(shown)}</text></g>'
            )
        return out

    def _span_frame(self, span: GroupSpan) -> str:
        """A frame around a run of a group's rows, from the engine to the group's last lane (a ``par``)."""
        lanes = self._group_lanes(span.group)
        last_lane = lanes[1] if lanes is not None else len(self.plan.lanes) - 1
        left = PAD + GUTTER + 2
        right = self.x(last_lane) + self.lane_w / 2 - 8
        top = self.row_tops[span.first] + 1
        bottom = self.row_tops[span.last] + ROW_H + _extra_height(self.labels[span.last]) - 5
        tab = "∥ par" if span.concurrent else "∥ one at a time"
        label = labels.group_label(span.group, concurrent=span.concurrent)
        return (
            f'<g class="aegis-par" data-start="{span.group.start}" '
            f'data-concurrent="{str(span.concurrent).lower()}"><title>{esc(label)}</title>'
            f'<rect x="{left}" y="{top}" width="{right - left:.1f}" height="{bottom - top}" rx="6" '
            f'fill="none" stroke="{GROUP_STROKE}" stroke-width="1.2"/>'
            f'<text x="{left + 6}" y="{top + 12}" font-size="10.5" font-weight="700" fill="{GROUP_INK}" '
            f'paint-order="stroke" stroke="#ffffff" stroke-width="3">{esc(tab)}</text></g>'
        )

    def _lifelines(self) -> list[str]:
        """Dashed lifelines under a head per lane; long diagrams repeat the heads at the bottom."""
        out: list[str] = []
        for i, lane in enumerate(self.plan.lanes):
            cx = self.x(i)
            dash = "2 5" if lane.kind is LaneKind.FOLD else "5 5"
            out.append(
                f'<line x1="{cx:.1f}" y1="{self.head_top + HEAD_H}" x2="{cx:.1f}" y2="{self.rows_bottom}" '
                f'stroke="{LIFELINE}" stroke-width="1.5" stroke-dasharray="{dash}"/>'
            )
            out.append(self._head(i, lane, self.head_top, "head"))
            if self.feet_top is not None:
                out.append(self._head(i, lane, self.feet_top, "foot"))
        return out

    def _head(self, i: int, lane: Lane, top: int, where: str) -> str:
        cx, w = self.x(i), self.lane_w - 16
        name = self._lane_name(lane)
        # The estimate runs wide, and the engine's name is known to fit.
        shown = name if lane.kind is LaneKind.ENGINE else fit(name, w - 10, 12.5, bold=True)
        if lane.kind is LaneKind.ENGINE:
            fill, stroke, ink, caption, ink2 = "#1e293b", "#1e293b", "#ffffff", "engine", "#cbd5e1"
        elif lane.kind is LaneKind.FOLD:
            fill, stroke, ink, ink2 = "#f8fafc", "#94a3b8", MUTED, MUTED
            caption = f"steps {lane.first + 1}–{lane.last + 1}"
        else:
            assert lane.state is not None
            look = LANE_LOOKS[lane.state]
            fill, stroke, ink, ink2 = look.fill, look.stroke, look.ink, look.caption_ink
            caption = f"{lane.first + 1} · {labels.lane_caption(lane.state)}"
        # A long caption (``2 · ↩ nothing to undo``) is set smaller to stay inside its head.
        fitting = CAPTION_SIZE * (w - 20) / text_width(caption, CAPTION_SIZE)
        caption_size = round(max(CAPTION_MIN_SIZE, min(CAPTION_SIZE, fitting)), 1)
        caption = fit(caption, w - 20, caption_size)
        border = ' stroke-dasharray="4 3"' if lane.kind is LaneKind.FOLD else ""
        state = f' data-state="{lane.state.name.lower()}"' if lane.state is not None else ""
        return (
            f'<g class="aegis-lane-{where} aegis-lane-{lane.kind.value}"{state}><title>{esc(name)}</title>'
            f'<rect x="{cx - w / 2:.1f}" y="{top}" width="{w}" height="{HEAD_H}" rx="9" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="1.5"{border}/>'
            f'<text x="{cx:.1f}" y="{top + 19}" font-size="12.5" font-weight="700" fill="{ink}" '
            f'text-anchor="middle">{esc(shown)}</text>'
            f'<text x="{cx:.1f}" y="{top + 36}" font-size="{caption_size:g}" fill="{ink2}" '
            'text-anchor="middle">'
            f"{esc(caption)}</text></g>"
        )

    def _body(self) -> list[str]:
        """The rollback box, activation bars, forward rows, then the rollback group (note and rows)."""
        out: list[str] = []
        rollback: list[str] = []
        rollback_top: int | None = None
        compensations = 0
        for index, (row, top) in enumerate(zip(self.plan.rows, self.row_tops, strict=True)):
            if row.kind is RowKind.ROLLBACK:
                rollback_top = top
                rollback.append(self._rollback_note(top))
            elif rollback_top is None:
                out.append(self._row(index))
            else:
                rollback.append(self._row(index))
                if row.message is not None:
                    compensations += row.message.kind is MessageKind.COMPENSATE
                else:
                    compensations += dict(row.kinds).get(MessageKind.COMPENSATE, 0)
        frames = [self._span_frame(span) for span in self.plan.spans]
        if rollback_top is None:
            return [*frames, *self._activations(), *out]
        top = rollback_top
        box = (
            f'<rect class="aegis-rollback-box" x="{ROLLBACK_LEFT}" y="{top - 6}" '
            f'width="{self.width - PAD - ROLLBACK_LEFT - 6}" height="{self.rows_bottom - top + 2}" rx="10" '
            f'fill="#fee2e2" fill-opacity="0.45" stroke="#f87171" stroke-width="1.5"/>'
            f'<text x="{self.width - PAD - 14}" y="{top + 12}" font-size="11" font-weight="700" '
            f'fill="#b91c1c" text-anchor="end" letter-spacing="1">{phrases.ROLLBACK.upper()}</text>'
        )
        # Under everything: the box, then the activation bars, then arrows and their labels.
        return [
            box,
            *frames,
            *self._activations(),
            *out,
            f'<g class="aegis-rollback" data-compensations="{compensations}">',
            *rollback,
            "</g>",
        ]

    def _activations(self) -> list[str]:
        """Narrow bars on a step's lifeline from each call to its reply (open while it runs)."""
        bars: list[str] = []
        open_at: dict[int, tuple[float, MessageKind]] = {}
        for index, row in enumerate(self.plan.rows):
            message = row.message
            if row.kind is not RowKind.MESSAGE or message is None or row.lane is None:
                continue
            y = self.arrow_y(index)
            if message.kind.is_call:
                open_at[row.lane] = (y, message.kind)
            elif row.lane in open_at:
                start, _ = open_at.pop(row.lane)
                bars.append(self._bar(row.lane, start, y, message.kind))
        for lane, (start, kind) in sorted(open_at.items()):
            bars.append(self._bar(lane, start, self.rows_bottom - 6, kind))
        return bars

    def _bar(self, lane: int, top: float, bottom: float, kind: MessageKind) -> str:
        colour = ARROW_COLOURS[kind]
        return (
            f'<rect class="aegis-activation" x="{self.x(lane) - 5:.1f}" y="{top:.1f}" width="10" '
            f'height="{max(4.0, bottom - top):.1f}" rx="2" fill="#ffffff" stroke="{colour}" '
            'stroke-width="1.5"/>'
        )

    def _rollback_note(self, top: int) -> str:
        """The note over the engine's lifeline, moved right as far as it takes to sit inside the box."""
        text = f"⟲ {phrases.ROLLBACK_TRIGGERED}"
        w = len(text) * 7.2 + 24
        left = max(self.x(0) - w / 2, ROLLBACK_LEFT + 8)
        cx = left + w / 2
        return (
            f'<g class="aegis-note"><rect x="{left:.1f}" y="{top + 4}" width="{w:.1f}" height="24" '
            f'rx="6" fill="#fff7ed" stroke="#fb923c"/><text x="{cx:.1f}" y="{top + 20}" font-size="12" '
            f'font-weight="700" fill="#9a3412" text-anchor="middle">{esc(text)}</text></g>'
        )

    def _row(self, index: int) -> str:
        row, top, label = self.plan.rows[index], self.row_tops[index], self.labels[index]
        y = self.arrow_y(index)
        if row.kind is RowKind.FOLD and row.lane is None:
            folded = labels.fold_label(row.arrows, row.kinds)
            return (
                f'<g class="aegis-fold"><rect x="{PAD + GUTTER}" y="{top + 4}" '
                f'width="{self.width - 2 * PAD - GUTTER}" height="{ROW_H - 8}" rx="6" fill="#f1f5f9"/>'
                f'<text x="{self.width / 2:.1f}" y="{top + 21}" font-size="12" font-style="italic" '
                f'fill="{MUTED}" text-anchor="middle">{esc(folded)}</text></g>'
            )
        assert row.lane is not None
        x0, x1 = self.x(0) + 6, self.x(row.lane) - 6
        if row.kind is RowKind.FOLD:
            folded = labels.fold_label(row.arrows, row.kinds)
            return (
                f'<g class="aegis-fold"><line x1="{x0:.1f}" y1="{y}" x2="{x1:.1f}" y2="{y}" stroke="#94a3b8" '
                f'stroke-width="2" stroke-dasharray="1 5" stroke-linecap="round"/>'
                f'<text x="{x0 + 8:.1f}" y="{y - 7}" font-size="12" font-style="italic" fill="{MUTED}" '
                f'paint-order="stroke" stroke="#ffffff" stroke-width="4">{esc(folded)}</text></g>'
            )
        message = row.message
        assert message is not None
        kind = message.kind
        colour = ARROW_COLOURS[kind]
        start, end = (x0, x1) if kind.is_call else (x1, x0)
        dash = "" if kind.is_call else ' stroke-dasharray="6 4"'
        assert label is not None
        weight = "600" if label.bold else "500"
        ink = INK if kind is MessageKind.EXECUTE else colour
        offset = message.time - self.model.started
        step = printable_line(self.model.steps[message.step])
        # The last line sits where a one-line label does; a first line above it.
        last = len(label.lines) - 1
        texts = "".join(
            f'<text x="{label.at:.1f}" y="{y - 7 - LABEL_LINE_H * (last - n)}" font-size="{LABEL_SIZE}" '
            f'font-weight="{weight}" fill="{ink}" text-anchor="{label.anchor.value}" paint-order="stroke" '
            f'stroke="#ffffff" stroke-width="4" stroke-linejoin="round">{esc(line)}</text>'
            for n, line in enumerate(label.lines)
        )
        return (
            f'<g class="aegis-msg aegis-{kind.name.lower()}" data-seq="{message.seq}" '
            f'data-step="{message.step}"><title>{esc(step)}: {esc(labels.message_label(message))}</title>'
            f'<text x="{PAD + GUTTER - 10}" y="{y + 4}" font-size="10.5" fill="#94a3b8" text-anchor="end">'
            f"+{esc(labels.duration(offset))}</text>"
            f'<line x1="{start:.1f}" y1="{y}" x2="{end:.1f}" y2="{y}" stroke="{colour}" stroke-width="1.8"'
            f'{dash} marker-end="url(#{self.prefix}-head-{kind.name.lower()})"/>{texts}</g>'
        )

    def _footer_lines(self) -> tuple[str, ...]:
        """The summary, wrapped: cut to one line, it lost what was rolled back or left standing."""
        folded = [(self.plan.folded_steps, "step"), (self.plan.folded_rows, "row")]
        parts = [counted(n, noun) for n, noun in folded if n]
        note = f"  (folded: {', '.join(parts)})" if parts else ""
        text = labels.summary(self.model) + note
        return wrap(text, self.width - 2 * PAD, 12.5, bold=True, max_lines=FOOT_LINES) or ("",)

    def _footer(self) -> list[str]:
        colour = STATUS_COLOURS[self.model.status] if self.model.finished else MUTED
        return [
            f'<text x="{PAD}" y="{self.bottom + 26 + FOOT_LINE_H * n}" font-size="12.5" font-weight="600" '
            f'fill="{colour}">{esc(line)}</text>'
            for n, line in enumerate(self.footer)
        ]
