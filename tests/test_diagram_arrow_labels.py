"""An arrow's label stays over its arrow and clear of every activation bar: too long for one line, it
goes on to a second at a boundary; too long even so, beyond the arrow's end or wrapped by words.

A label longer than its arrow used to be set from the engine rightwards and cut with "…" at the
drawing's edge, running over the activation bars on its way (``◷ timed out · 400.1 ms (budget
399.7 ms)`` over ReserveHotel's bar; tutorial 04's undo failures over the hotel's bar). Now it is
set on two lines at a ``" · "`` or ``" (budget"`` boundary, measured against the arrow's span with
`aegis_nb.diagram.metrics`, and its row is a line taller. A label too long for its arrow even then
(a long error) goes right of the step's bar, beyond the arrow's end, if it fits there so, else it is
wrapped by words on up to four lines in the widest room it has; it never crosses a bar.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest

from aegis_nb.diagram import fold, render_svg
from aegis_nb.diagram.metrics import ELLIPSIS, text_width
from aegis_nb.saga.events import SagaEvent
from tests.test_diagram_fit import DRAWINGS, SVG, extent
from tests.test_diagram_scenarios import Script


def timed_out_second_step() -> tuple[SagaEvent, ...]:
    """The issue's case: the hotel times out with a three-digit budget, so its label outgrows the arrow."""
    script = Script(deadline=100.5)
    script.step_ok(0, "BookFlight").step_times_out(1, "ReserveHotel", 399.7).undo(0, "BookFlight")
    return script.end_rollback()


def undo_fails_with_a_long_error() -> tuple[SagaEvent, ...]:
    """Tutorial 04's case: an undo failure longer than the drawing is wide on one line."""
    script = Script()
    script.step_ok(0, "BookFlight").step_ok(1, "ReserveHotel").step_fails(2, "ChargeCard", "Card Declined!")
    error = "cancel_hotel is unavailable (injected)"
    script.undo_fails(1, "ReserveHotel", error, 1, will_retry=True, ms=16.0)
    return script.undo(1, "ReserveHotel", attempt=2).undo(0, "BookFlight").end_rollback()


CASES: dict[str, Callable[[], tuple[SagaEvent, ...]]] = {
    **DRAWINGS,
    "timed_out_second_step": timed_out_second_step,
    "undo_fails_with_a_long_error": undo_fails_with_a_long_error,
}


def messages(events: tuple[SagaEvent, ...]) -> list[tuple[str, ET.Element, list[ET.Element]]]:
    """Each arrow as (its tooltip, its ``<line>``, its label's ``<text>`` lines) in drawing order."""
    root = ET.fromstring(render_svg(fold(events)))
    out = []
    for group in root.iter(f"{SVG}g"):
        if "aegis-msg" not in group.attrib.get("class", "").split():
            continue
        title, line = group.find(f"{SVG}title"), group.find(f"{SVG}line")
        assert title is not None
        assert title.text is not None
        assert line is not None
        out.append((title.text, line, group.findall(f"{SVG}text")[1:]))  # the first is the row's time
    return out


def bars(events: tuple[SagaEvent, ...]) -> list[tuple[float, float, float, float]]:
    """Each activation bar as (left, right, top, bottom)."""
    root = ET.fromstring(render_svg(fold(events)))
    return [
        (x, x + float(rect.attrib["width"]), y, y + float(rect.attrib["height"]))
        for rect in root.iter(f"{SVG}rect")
        if rect.attrib.get("class") == "aegis-activation"
        for x, y in [(float(rect.attrib["x"]), float(rect.attrib["y"]))]
    ]


def label_lines(events: tuple[SagaEvent, ...]) -> list[tuple[str, ...]]:
    return [tuple(text.text or "" for text in texts) for _, _, texts in messages(events)]


def test_a_timed_out_label_too_long_for_its_arrow_goes_on_to_a_second_line() -> None:
    assert label_lines(timed_out_second_step()) == [
        ("execute()",),
        ("ok · 10.0 ms",),
        ("execute()",),
        ("◷ timed out · 400.1 ms", "(budget 399.7 ms)"),
        ("compensate()",),
        ("undone · 5.0 ms",),
    ]


def test_a_long_undo_failure_wraps_between_its_lanes_timing_kept_instead_of_running_over_the_bar() -> None:
    assert label_lines(undo_fails_with_a_long_error())[6:] == [
        ("compensate()",),
        ("✗ undo failed: RuntimeError:", "cancel_hotel is unavailable (injected)", "· 16.0 ms · retrying"),
        ("compensate() · attempt 2",),
        ("undone · 5.0 ms",),
        ("compensate()",),
        ("undone · 5.0 ms",),
    ]


@pytest.mark.parametrize("name", sorted(CASES))
def test_labels_set_over_their_arrow_stay_clear_of_every_activation_bar(name: str) -> None:
    """Each line of a label crosses no bar; one set over its arrow lies between the arrow's ends."""
    events = CASES[name]()
    drawn = bars(events)
    crossing = []
    for title, line, texts in messages(events):
        ends = sorted((float(line.attrib["x1"]), float(line.attrib["x2"])))
        if texts[0].attrib["text-anchor"] == "start":
            ends = [ends[1], math.inf]  # beyond the arrow's end (see the docstring)
        for text in texts:
            left, right = extent(text)
            baseline = float(text.attrib["y"])
            top, bottom = baseline - float(text.attrib["font-size"]), baseline + 3
            over_bar = any(
                left < bar_right and bar_left < right and top < bar_bottom and bar_top < bottom
                for bar_left, bar_right, bar_top, bar_bottom in drawn
            )
            if over_bar or left < ends[0] or right > ends[1]:
                crossing.append((title, text.text))
    assert crossing == []


def settings(text: str) -> list[tuple[str, ...]]:
    """Every way the rule may set `text`: one line, or two at each " · " (dropped) or " (budget" (kept)."""
    out: list[tuple[str, ...]] = [(text,)]
    for mark, kept in ((" · ", ""), (" (budget ", "(budget ")):
        at = text.find(mark)
        while at > 0:
            out.append((text[:at], kept + text[at + len(mark) :]))
            at = text.find(mark, at + 1)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_only_a_label_too_long_for_its_arrow_even_on_two_lines_is_set_beyond_it(name: str) -> None:
    """Measured with the drawing's own estimate, against the arrow's span less 10 px at each end."""
    events = CASES[name]()
    root = ET.fromstring(render_svg(fold(events)))
    wide = sum(1 for g in root.iter(f"{SVG}g") if "aegis-lane-head" in g.attrib.get("class", "")) > 7
    could_fit = []
    for title, line, texts in messages(events):
        if texts[0].attrib["text-anchor"] != "start":
            continue
        text = title if wide else title.split(": ", 1)[1]
        bold = int(texts[0].attrib["font-weight"]) >= 600
        room = abs(float(line.attrib["x2"]) - float(line.attrib["x1"])) - 20
        if any(max(text_width(part, 12.5, bold=bold) for part in lines) <= room for lines in settings(text)):
            could_fit.append(title)
    assert could_fit == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_label_on_two_lines_over_its_arrow_says_all_its_tooltip_says(name: str) -> None:
    """Nothing of a label on two lines is cut: its lines, joined at the break (or, wrapped by words, at
    spaces), end its tooltip; only one wrapped on all four lines may end in an ellipsis."""
    cut = []
    for title, _, texts in messages(CASES[name]()):
        lines = [text.text or "" for text in texts]
        if len(lines) == 1:
            continue
        first, second = lines[0], lines[-1]
        joined = f"{first} {second}" if second.startswith("(") else f"{first} · {second}"
        words = " ".join(lines)
        if len(lines) == 2 and (title == joined or title.endswith(f": {joined}")):
            continue
        if title.endswith(words) or (len(lines) == 4 and words.endswith(ELLIPSIS) and words[:-1] in title):
            continue
        cut.append((title, *lines))
    assert cut == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_make_room_for_two_line_labels_and_bars_meet_their_arrows(name: str) -> None:
    """A label's first line clears the arrow above it; each bar runs from a call's arrow to its reply's."""
    events = CASES[name]()
    arrows = messages(events)
    crowded = []
    previous_y: float | None = None
    for title, line, texts in arrows:
        y = float(line.attrib["y1"])
        label_top = float(texts[0].attrib["y"]) - float(texts[0].attrib["font-size"])
        if previous_y is not None and label_top < previous_y + 2:
            crowded.append(title)
        previous_y = y
    assert crowded == []
    arrow_ys = {float(line.attrib["y1"]) for _, line, _ in arrows}
    root = ET.fromstring(render_svg(fold(events)))
    # A bar still open (a step running when the drawing was made) runs to the foot of the rows.
    rows_bottom = max(float(line.attrib["y2"]) for line in root.iter(f"{SVG}line"))
    loose = [
        (top, bottom)
        for _, _, top, bottom in bars(events)
        if top not in arrow_ys or bottom not in {*arrow_ys, rows_bottom - 6}
    ]
    assert loose == []
