"""Nothing in a drawing runs out of its room: text stays inside the SVG and its boxes, and reads on them.

An SVG neither wraps nor clips text, so a long name, error or summary simply ran past the edge (and
was cut off by the browser) or under the status pill. These checks measure every ``<text>`` with the
same estimate the drawing uses (`aegis_nb.diagram.metrics`, a few per cent wider than DejaVu Sans,
the widest font of the stack) over ordinary and crowded runs. `test_metrics_*` pin that estimate.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest

from aegis_nb.diagram import fold, render_svg
from aegis_nb.diagram.metrics import fit, text_width, wrap
from aegis_nb.diagram.svg import LANE_LOOKS
from aegis_nb.saga.events import SagaEvent
from tests.test_diagram_scenarios import CROWDED, SCENARIOS, many_steps

SVG = "{http://www.w3.org/2000/svg}"

DRAWINGS: dict[str, Callable[[], tuple[SagaEvent, ...]]] = {
    **SCENARIOS,
    **CROWDED,
    "thousand_steps": lambda: many_steps(1000, fail_at=700),
    "rolling_back": lambda: SCENARIOS["compensation_fails"]()[:12],
}


def extent(text: ET.Element) -> tuple[float, float]:
    """Left and right x of a ``<text>``, from its anchor and the estimated width of what it says."""
    width = text_width(
        text.text or "",
        float(text.attrib["font-size"]),
        bold=int(text.attrib.get("font-weight", "400")) >= 600,
    )
    x = float(text.attrib["x"])
    anchor = text.attrib.get("text-anchor", "start")
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return left, left + width


def drawing(name: str) -> ET.Element:
    return ET.fromstring(render_svg(fold(DRAWINGS[name]())))


@pytest.mark.parametrize("name", sorted(DRAWINGS))
def test_every_text_stays_inside_the_drawing(name: str) -> None:
    root = drawing(name)
    width = float(root.attrib["width"])
    outside = [
        (text.text, round(left), round(right))
        for text in root.iter(f"{SVG}text")
        for left, right in [extent(text)]
        if left < 0 or right > width - 6
    ]
    assert outside == []


@pytest.mark.parametrize("name", sorted(DRAWINGS))
def test_lane_names_stay_inside_their_heads(name: str) -> None:
    root = drawing(name)
    spilling = []
    for head in root.iter(f"{SVG}g"):
        if not head.attrib.get("class", "").startswith("aegis-lane-"):
            continue
        rect, label = head.find(f"{SVG}rect"), head.find(f"{SVG}text")
        assert rect is not None
        assert label is not None
        left, right = extent(label)
        box_left = float(rect.attrib["x"])
        if left < box_left or right > box_left + float(rect.attrib["width"]):
            spilling.append(label.text)
    assert spilling == []


@pytest.mark.parametrize("name", sorted(DRAWINGS))
def test_the_title_stops_short_of_the_status_pill(name: str) -> None:
    root = drawing(name)
    title = next(root.iter(f"{SVG}text"))
    pill = next(g for g in root.iter(f"{SVG}g") if g.attrib.get("class") == "aegis-status")
    rect = pill.find(f"{SVG}rect")
    assert rect is not None
    assert extent(title)[1] < float(rect.attrib["x"]) - 8


@pytest.mark.parametrize("name", ["fail_first", "timeout", "compensation_fails", "one_step_long_failure"])
def test_the_rollback_note_sits_inside_the_rollback_box(name: str) -> None:
    root = drawing(name)
    box = next(r for r in root.iter(f"{SVG}rect") if r.attrib.get("class") == "aegis-rollback-box")
    note = next(g for g in root.iter(f"{SVG}g") if g.attrib.get("class") == "aegis-note").find(f"{SVG}rect")
    assert note is not None
    box_left = float(box.attrib["x"])
    note_left = float(note.attrib["x"])
    assert (
        box_left < note_left < note_left + float(note.attrib["width"]) < box_left + float(box.attrib["width"])
    )


def luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two ``#rrggbb`` colours."""
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_lane_heads_read_at_wcag_aa_on_their_fill() -> None:
    """The state under a step's name is 11px text: it needs 4.5:1 (a pending step's was 1.4:1)."""
    ratios = {
        state.name: (round(contrast(look.fill, look.ink), 1), round(contrast(look.fill, look.caption_ink), 1))
        for state, look in LANE_LOOKS.items()
    }
    assert {name: pair for name, pair in ratios.items() if min(pair) < 4.5} == {}


def test_the_mermaid_rollback_box_lets_its_arrows_read_on_light_and_dark_themes() -> None:
    """Mermaid draws message text #333 (light theme) or #ddd (dark): both must read on the box."""
    from aegis_nb.diagram.mermaid import ROLLBACK_COLOUR

    match = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)", ROLLBACK_COLOUR)
    assert match is not None
    *rgb, alpha = match.groups()
    opacity = float(alpha) if alpha is not None else 1.0

    def over(background: int) -> str:
        mixed = (round(opacity * int(c) + (1 - opacity) * background) for c in rgb)
        return "#" + "".join(f"{c:02x}" for c in mixed)

    assert contrast(over(0xFF), "#333333") >= 4.5
    assert contrast(over(0x11), "#dddddd") >= 4.5


# -- the estimate -------------------------------------------------------------------------------------


def test_metrics_measure_by_character_class() -> None:
    assert text_width("", 10) == 0
    assert text_width("il", 10) == pytest.approx(6.8)
    assert text_width("ab", 10) == pytest.approx(12.4)
    assert text_width("AB", 10, bold=True) == pytest.approx(15.8)
    assert text_width("mW…", 10) == pytest.approx(30.0)
    assert text_width("日本", 10) == pytest.approx(20.0)
    assert text_width("✗ ok", 10) == pytest.approx(9.0 + 3.4 + 12.4)


def test_metrics_fit_cuts_with_an_ellipsis_only_when_needed() -> None:
    assert fit("execute()", 100, 12.5) == "execute()"
    assert fit("ChargeCard failed\n(injected)", 200, 12.5) == "ChargeCard failed (injected)"
    assert fit("ChargeCard failed (injected by --fail)", 100, 12.5) == "ChargeCard f…"  # 93.75 px
    assert fit("ChargeCard", 1, 12.5) == "C…"  # never empty, like labels.clip


def test_metrics_wrap_breaks_at_spaces_and_cuts_the_last_line() -> None:
    text = "Card Declined! — rolled back: ReserveHotel, BookFlight"
    assert wrap(text, 1000, 12.5) == (text,)
    assert wrap(text, 200, 12.5) == ("Card Declined! — rolled back:", "ReserveHotel, BookFlight")
    assert wrap(text, 150, 12.5, max_lines=2) == ("Card Declined! —", "rolled back: Reserve…")
    assert wrap("Supercalifragilistic expialidocious", 60, 12.5) == ("Superc…", "expiali…")
    assert wrap("", 100, 12.5) == ()
