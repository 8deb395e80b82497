"""A finished run replayed at a human pace: `ReplayView.play` and the play button beside its slider.

`play()` draws the run from its first event to its last, waiting `interval` seconds between two
(the wait is injected here, so nothing sleeps), and ends on the whole run, fallback included. The
play button is a front-end timer linked to the slider: same range, the interval in milliseconds.
"""

from __future__ import annotations

import re

import pytest

from aegis_nb.diagram import fold, render_svg
from aegis_nb.notebook import ReplayView
from aegis_nb.saga.events import SagaEvent
from tests.test_diagram_scenarios import SCENARIOS


class Waits:
    """Stands in for `anyio.sleep`: records each wait and what the view showed while waiting."""

    def __init__(self) -> None:
        self.view: ReplayView | None = None
        self.seen: list[tuple[float, int, int]] = []  # (seconds, slider value, events drawn)

    async def __call__(self, seconds: float) -> None:
        assert self.view is not None
        drawn = re.search(r'data-events="(\d+)"', self.view.widget.value)
        assert drawn is not None
        self.seen.append((seconds, self.view.position, int(drawn[1])))


def replay(events: tuple[SagaEvent, ...], **options: float) -> tuple[ReplayView, Waits]:
    waits = Waits()
    view = ReplayView(events, sleep=waits, **options)
    waits.view = view
    return view, waits


@pytest.mark.anyio
async def test_play_draws_every_event_in_turn_one_interval_apart_and_ends_on_the_whole_run() -> None:
    events = SCENARIOS["fail_third"]()
    view, waits = replay(events)
    await view.play()
    n = len(events)
    assert waits.seen == [(0.4, count, count) for count in range(1, n)]
    assert view.position == n
    assert render_svg(fold(events)) in view.widget.value
    assert view.widget.value.count(f"event {n} of {n}") == 1


@pytest.mark.anyio
async def test_the_interval_is_the_views_unless_play_is_given_one() -> None:
    events = SCENARIOS["timeout"]()
    view, waits = replay(events, interval=1.5)
    await view.play()
    await view.play(interval=0.1)
    n = len(events)
    assert [seconds for seconds, _, _ in waits.seen] == [1.5] * (n - 1) + [0.1] * (n - 1)
    assert [value for _, value, _ in waits.seen] == [*range(1, n), *range(1, n)]


@pytest.mark.anyio
async def test_a_bad_interval_is_refused_before_anything_moves() -> None:
    events = SCENARIOS["timeout"]()
    with pytest.raises(ValueError, match=r"^interval must be finite seconds >= 0, got -1$"):
        ReplayView(events, interval=-1)
    view, waits = replay(events)
    with pytest.raises(ValueError, match=r"^interval must be finite seconds >= 0, got nan$"):
        await view.play(interval=float("nan"))
    assert waits.seen == []
    assert view.position == len(events)


def test_the_play_button_plays_in_the_front_end_at_the_views_interval() -> None:
    events = SCENARIOS["fail_third"]()
    view = ReplayView(events, interval=0.25)
    state = view.widget.get_state()
    assert {key: state[key] for key in ("count", "position", "interval", "continuous")} == {
        "count": len(events),
        "position": len(events),
        "interval": 250,
        "continuous": True,
    }


def test_the_front_end_moving_the_slider_redraws_the_diagram_there() -> None:
    events = SCENARIOS["fail_third"]()
    view = ReplayView(events)
    for sent in ({"position": 3}, {"position": 99}, {"position": "2"}, ["position", 1]):
        view._message(view.widget, sent)
    assert view.position == len(events)  # 3, then clamped to the end; the malformed two are ignored
    view._message(view.widget, {"position": 2})
    assert view.position == 2
    assert render_svg(fold(events[:2])) in view.widget.value
    assert f"event 2 of {len(events)}: " in view.widget.value
