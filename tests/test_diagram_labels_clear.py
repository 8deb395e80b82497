"""No text of a drawn diagram sits on anything else: in every scenario diagram, no arrow label touches
an activation bar or another label, none crosses a frame's border, the frames of a parallel group
(its lane heads, each run of its rows) never cross each other, and each lane head's caption stays
inside its box (``2 · ↩ nothing to undo`` included).

Boxes are measured on the SVG itself, text by `metrics.text_width` (which errs wide), so a drawing
that passes here has room to spare in a browser.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from typing import NamedTuple

import pytest

from aegis_nb.diagram import fold, render_svg
from aegis_nb.diagram.metrics import text_width
from aegis_nb.saga.events import CompensationStarted, CompensationSucceeded, SagaEvent
from tests.diagram_runs import GROUP_SCENARIOS
from tests.test_diagram_scenarios import CROWDED, SCENARIOS, Script

SVG = "{http://www.w3.org/2000/svg}"


def stuck_hotel() -> tuple[SagaEvent, ...]:
    """Tutorial 04's stuck saga: the hotel's undo is unavailable three times, the flight's is undone."""
    script = Script()
    script.step_ok(0, "BookFlight", 5.1).step_ok(1, "ReserveHotel", 5.1)
    script.step_fails(2, "ChargeCard", "Card Declined!", ms=1.0, kind="ToolError")
    for attempt in (1, 2, 3):
        message = "cancel_hotel is unavailable (injected failure)"
        script.undo_fails(1, "ReserveHotel", message, attempt, will_retry=attempt < 3)
    return script.undo(0, "BookFlight", 15.6).end_rollback()


def hotel_found_nothing() -> tuple[SagaEvent, ...]:
    """Tutorial 02's late hotel: it timed out, its undo found nothing to undo, the flight's was undone."""
    script = Script()
    script.step_ok(0, "BookFlight", 11.3).step_times_out(1, "ReserveHotel", 188.3)
    script.wait(0.1)._emit(CompensationStarted, 1, "ReserveHotel", 1)
    script.wait(7.7)._emit(CompensationSucceeded, 1, "ReserveHotel", 1, 0.0077, True)
    return script.undo(0, "BookFlight", 8.7).end_rollback()


def long_undo_error_on_the_first_lane() -> tuple[SagaEvent, ...]:
    """The shortest arrow under a long undo error, while a later lane waits."""
    script = Script()
    script.step_ok(0, "BookFlight").step_fails(1, "ReserveHotel", "no rooms", kind="ToolError")
    script.undo_fails(0, "BookFlight", "cancel_flight is unavailable (injected failure)", 1, will_retry=False)
    return script.end_rollback()


DIAGRAMS: dict[str, Callable[[], tuple[SagaEvent, ...]]] = {
    **SCENARIOS,
    **CROWDED,
    **GROUP_SCENARIOS,
    "stuck_hotel": stuck_hotel,
    "hotel_found_nothing": hotel_found_nothing,
    "long_undo_error_on_the_first_lane": long_undo_error_on_the_first_lane,
}


class Box(NamedTuple):
    what: str
    left: float
    top: float
    right: float
    bottom: float

    def meets(self, other: Box) -> bool:
        return (
            self.left < other.right
            and other.left < self.right
            and self.top < other.bottom
            and other.top < self.bottom
        )

    def holds(self, other: Box, margin: float = 0.0) -> bool:
        return (
            self.left + margin <= other.left
            and other.right <= self.right - margin
            and self.top + margin <= other.top
            and other.bottom <= self.bottom - margin
        )

    def crosses_border(self, other: Box) -> bool:
        """Does `other` lie partly in this box and partly out (so it crosses a border)?"""
        return self.meets(other) and not self.holds(other) and not other.holds(self)


def rect(element: ET.Element, what: str) -> Box:
    x, y = float(element.get("x", 0)), float(element.get("y", 0))
    return Box(what, x, y, x + float(element.get("width", 0)), y + float(element.get("height", 0)))


def text_box(element: ET.Element, what: str) -> Box:
    """The box a text element takes: its estimated width placed by its anchor, its line's height."""
    text = "".join(element.itertext())
    size = float(element.get("font-size", 12))
    width = text_width(text, size, bold=element.get("font-weight") in ("600", "700"))
    x, y = float(element.get("x", 0)), float(element.get("y", 0))
    anchor = element.get("text-anchor", "start")
    left = x - width / 2 if anchor == "middle" else x - width if anchor == "end" else x
    return Box(f"{what} {text!r}", left, y - 0.8 * size, left + width, y + 0.2 * size)


def groups(root: ET.Element, cls: str) -> Iterator[ET.Element]:
    for element in root.iter(f"{SVG}g"):
        if cls in element.get("class", "").split():
            yield element


def collisions(svg: str) -> list[str]:
    """Every place where a label sits on a bar, a label, or a frame's border, or frames cross."""
    root = ET.fromstring(svg)
    bars = [rect(r, "bar") for r in root.iter(f"{SVG}rect") if r.get("class") == "aegis-activation"]
    arrow_labels = [
        text_box(t, "label")
        for g in groups(root, "aegis-msg")
        for t in g.iter(f"{SVG}text")
        if t.get("paint-order") == "stroke"
    ]
    frames, texts = [], list(arrow_labels)
    for cls in ("aegis-group", "aegis-par"):
        for g in groups(root, cls):
            frames.append(rect(next(g.iter(f"{SVG}rect")), cls))
            texts.append(text_box(next(g.iter(f"{SVG}text")), f"{cls} tab"))
    found = []
    for n, label in enumerate(arrow_labels):
        found += [f"{label.what} on {bar.what} at x={bar.left}" for bar in bars if label.meets(bar)]
        found += [f"{label.what} crosses {frame.what}" for frame in frames if frame.crosses_border(label)]
        found += [f"{label.what} on {other.what}" for other in texts[n + 1 :] if label.meets(other)]
    for n, frame in enumerate(frames):
        found += [
            f"{frame.what} crosses {other.what}" for other in frames[n + 1 :] if frame.crosses_border(other)
        ]
    for head in groups(root, "aegis-lane-step"):  # the engine's name is known to fit (the estimate errs wide)
        box = rect(next(head.iter(f"{SVG}rect")), "head")
        for line in head.iter(f"{SVG}text"):
            shown = text_box(line, "head text")
            if not box.holds(Box(shown.what, shown.left, box.top + 4, shown.right, box.top + 5), margin=3):
                found.append(f"{shown.what} touches its head's border")
    return found


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
def test_no_label_sits_on_a_bar_a_frame_or_another_label(name: str) -> None:
    events = DIAGRAMS[name]()
    assert collisions(render_svg(fold(events))) == []


@pytest.mark.parametrize("name", ["stuck_hotel", "group_member_fails_while_others_run"])
def test_no_label_collides_at_any_moment_of_the_run(name: str) -> None:
    """Live views redraw after every event: each intermediate drawing is clear too."""
    events = DIAGRAMS[name]()
    for n in range(1, len(events) + 1):
        assert collisions(render_svg(fold(events[:n]))) == [], f"after {n} events"


def test_a_long_undo_error_wraps_between_its_lanes_instead_of_running_over_the_bar() -> None:
    svg = render_svg(fold(stuck_hotel()))
    root = ET.fromstring(svg)
    failed = next(g for g in groups(root, "aegis-msg") if "aegis-compensation_failed" in g.get("class", ""))
    lines = ["".join(t.itertext()) for t in failed.iter(f"{SVG}text") if t.get("paint-order") == "stroke"]
    assert (
        " ".join(lines)
        == "✗ undo failed: RuntimeError: cancel_hotel is unavailable (injected failure) · 2.0 ms · retrying"
    )
    assert len(lines) > 2
