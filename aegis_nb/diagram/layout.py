"""Which lanes and rows a drawing shows: everything for normal sagas, a folded digest for huge ones.

A sequence diagram of 30 steps is wide but readable; one of 1,000 is not. Past `max_lanes` the
first steps, a window around the failure (or the frontier) and the last step keep their lifelines,
and each gap becomes one folded lane; consecutive arrows to a folded lane become one summary row.
Past `max_rows` per phase the middle rows are folded too. The SVG and the text rendering share this,
so both degrade the same way and cost the same bounded work however long the run.

A parallel group's rows are consecutive (the saga waits for the whole group), in the forward part
and again where its members are undone: each such run of rows is a `GroupSpan`, which the views
frame as one block (`group_spans`; Mermaid applies it to the messages).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from aegis_nb.diagram.model import Group, LaneState, Message, MessageKind, SequenceModel

DEFAULT_MAX_LANES = 36
DEFAULT_MAX_ROWS = 120
_HEAD_STEPS = 3
_KEEP_HEAD_ROWS = 24
_FOLD_WINDOW = 12  # lifelines kept around the failure (or frontier) once a saga is folded


class LaneKind(enum.Enum):
    ENGINE = "engine"
    STEP = "step"
    FOLD = "fold"


@dataclass(frozen=True, slots=True)
class Lane:
    """A lifeline: the engine, one step (`first == last`), or a fold of steps `first..last`."""

    kind: LaneKind
    first: int = -1
    last: int = -1
    state: LaneState | None = None

    @property
    def folded(self) -> int:
        return self.last - self.first + 1 if self.kind is LaneKind.FOLD else 0


class RowKind(enum.Enum):
    MESSAGE = "message"
    FOLD = "fold"
    ROLLBACK = "rollback"


class Row(NamedTuple):
    """One line of the drawing.

    MESSAGE: one arrow to `lane`. FOLD: `arrows` arrows summarised by kind (`lane` is the folded lane,
    or ``None`` when rows of many lanes were folded). ROLLBACK: the "rollback triggered" note.
    A named tuple: one is built per arrow per redraw.
    """

    kind: RowKind
    in_rollback: bool
    lane: int | None = None
    message: Message | None = None
    arrows: int = 0
    kinds: tuple[tuple[MessageKind, int], ...] = ()


class GroupSpan(NamedTuple):
    """Items `first` .. `last` (rows, or messages) are all of parallel group `group`'s members.

    `concurrent` says the members ran (or were undone) side by side: always forward, where they
    start together; in the rollback only when one's compensation began before another's ended
    (``compensation="reverse_start"`` undoes them one at a time, newest start first).
    """

    group: Group
    first: int
    last: int
    in_rollback: bool
    concurrent: bool


@dataclass(frozen=True, slots=True)
class Layout:
    lanes: tuple[Lane, ...]
    rows: tuple[Row, ...]
    folded_steps: int
    folded_rows: int
    spans: tuple[GroupSpan, ...] = ()


def group_spans(model: SequenceModel, items: Sequence[tuple[int | None, bool]]) -> tuple[GroupSpan, ...]:
    """The runs of `items` (each its step, or ``None`` for a row of no one step, and whether it is in
    the rollback) that belong to one parallel group, within one phase."""
    if not model.groups:
        return ()
    spans: list[GroupSpan] = []
    current: Group | None = None
    first = 0
    for position, (step, in_rollback) in enumerate([*items, (None, False)]):
        group = None if step is None else model.group_of(step)
        if current is not None and (group is not current or in_rollback != items[first][1]):
            spans.append(_span(current, first, position - 1, items))
            current = None
        if group is not None and current is None:
            current, first = group, position
    return tuple(spans)


def _span(group: Group, first: int, last: int, items: Sequence[tuple[int | None, bool]]) -> GroupSpan:
    in_rollback = items[first][1]
    steps = [step for step, _ in items[first : last + 1]]
    # Undone one at a time when each member's arrows are consecutive; side by side when they mix.
    runs = [step for n, step in enumerate(steps) if n == 0 or steps[n - 1] != step]
    concurrent = not in_rollback or len(runs) != len(set(runs))
    return GroupSpan(group, first, last, in_rollback, concurrent)


def layout(
    model: SequenceModel, *, max_lanes: int = DEFAULT_MAX_LANES, max_rows: int = DEFAULT_MAX_ROWS
) -> Layout:
    """The lanes and rows to draw for `model`."""
    lanes, lane_of = _lanes(model, max_lanes)
    at = len(model.messages) if model.rollback_at is None else model.rollback_at
    forward = _section(model.messages[:at], lanes, lane_of, in_rollback=False)
    rollback = _section(model.messages[at:], lanes, lane_of, in_rollback=True)
    forward, folded_rows = _cap(forward, max_rows, in_rollback=False)
    rows = forward
    if model.rollback_at is not None:
        rollback, n = _cap(rollback, max_rows, in_rollback=True)
        folded_rows += n
        rows = [*forward, Row(RowKind.ROLLBACK, True), *rollback]
    folded_steps = sum(lane.folded for lane in lanes)
    spans = group_spans(model, [(_row_step(row, lanes), row.in_rollback) for row in rows])
    return Layout(tuple(lanes), tuple(rows), folded_steps, folded_rows, spans)


def _row_step(row: Row, lanes: Sequence[Lane]) -> int | None:
    """The step row `row` is about: its message's, or a folded lane's first (so the rows of a big
    group's folded members stay in the group's span); ``None`` for a note and a fold of many lanes."""
    if row.lane is None or row.kind is RowKind.ROLLBACK:
        return None
    if row.message is not None:
        return row.message.step
    return lanes[row.lane].first


def _lanes(model: SequenceModel, max_lanes: int) -> tuple[list[Lane], list[int]]:
    """The lanes, and for each step the index of the lane that draws it."""
    n = len(model.steps)
    if n + 1 <= max_lanes:
        shown = set(range(n))
    else:
        focus = model.failed_step
        if focus is None:
            focus = max((m.step for m in model.messages), default=0)
        window = max(1, min(_FOLD_WINDOW, max_lanes - _HEAD_STEPS - 4))
        shown = set(range(min(_HEAD_STEPS, n)))
        shown.update(range(max(0, focus + 3 - window), min(n, focus + 3)))
        shown.add(n - 1)
    lanes = [Lane(LaneKind.ENGINE)]
    lane_of = [0] * n
    gap_start: int | None = None
    for index in range(n):
        if index not in shown:
            # The fold lane is appended when the gap ends, at the position it has now.
            gap_start = index if gap_start is None else gap_start
            lane_of[index] = len(lanes)
            continue
        if gap_start is not None:
            lanes.append(Lane(LaneKind.FOLD, gap_start, index - 1))
            gap_start = None
        lane_of[index] = len(lanes)
        lanes.append(Lane(LaneKind.STEP, index, index, model.lanes[index]))
    return lanes, lane_of


def _section(
    messages: Sequence[Message], lanes: list[Lane], lane_of: list[int], *, in_rollback: bool
) -> list[Row]:
    """One row per message; consecutive messages to the same folded lane become one fold row."""
    rows: list[Row] = []
    group: list[Message] = []
    group_lane = -1
    for message in messages:
        lane = lane_of[message.step]
        if lanes[lane].kind is LaneKind.FOLD:
            if group and group_lane != lane:
                rows.append(_summarise(group_lane, in_rollback, group))
                group = []
            group_lane = lane
            group.append(message)
            continue
        if group:
            rows.append(_summarise(group_lane, in_rollback, group))
            group = []
        rows.append(Row(RowKind.MESSAGE, in_rollback, lane, message))
    if group:
        rows.append(_summarise(group_lane, in_rollback, group))
    return rows


def _summarise(lane: int | None, in_rollback: bool, items: Iterable[Row | Message]) -> Row:
    """One fold row standing for `items` (messages, rows and earlier folds), counted by kind."""
    counts: Counter[MessageKind] = Counter()
    for item in items:
        if isinstance(item, Message):
            counts[item.kind] += 1
        elif item.message is not None:
            counts[item.message.kind] += 1
        else:
            counts.update(dict(item.kinds))
    kinds = tuple((kind, counts[kind]) for kind in MessageKind if counts[kind])
    return Row(RowKind.FOLD, in_rollback, lane, None, sum(counts.values()), kinds)


def _cap(rows: list[Row], max_rows: int, *, in_rollback: bool) -> tuple[list[Row], int]:
    """Fold the middle of `rows` into one row when there are more than `max_rows`."""
    if len(rows) <= max_rows:
        return rows, 0
    head = min(_KEEP_HEAD_ROWS, max_rows // 3)
    tail = max_rows - head - 1
    middle = rows[head : len(rows) - tail]
    summary = _summarise(None, in_rollback, middle)
    return [*rows[:head], summary, *rows[len(rows) - tail :]], len(middle)
