"""Tutorial 01's replay grows at a human pace in a real browser: JupyterLab, headless Debian Chromium.

The quickstart's first saga is over in milliseconds; the cell after it replays it with
``await ReplayView(run).play()``. During "Run All", a MutationObserver in the page records every
state the replay's diagram goes through, with the time: the diagram must go through every event in
order (1, 2, ... n), while its cell runs, taking about 0.4 s an event, and end on the whole rolled-
back run. Then pressing the play button beside the slider plays it again, from the first event.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jupyterlab import CHROMIUM_ARGS, Lab, running_lab

pytestmark = pytest.mark.slow

TUTORIAL = Path(__file__).resolve().parent.parent / "notebooks" / "01_quickstart.ipynb"
EVENTS = 8  # the first saga: started, flight started/ok, card started/failed, undo started/done, rolled back
PACE = 0.4  # seconds per event, `ReplayView`'s default
KERNEL_IDLE = """
() => {
  const bar = document.querySelector('.jp-NotebookPanel-toolbar');
  const name = bar && bar.querySelector("[data-jp-item-name='kernelName']");
  return !!(bar && name && bar.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
            && name.textContent.trim() && !name.textContent.includes('No Kernel'));
}
"""
# Every state of the replay's diagram: events drawn, arrows drawn, status, when, and whether its
# cell was running then.
OBSERVER = """
() => {
  window.__replay = [];
  const record = () => {
    const live = document.querySelector('.aegis-replay .aegis-live-diagram');
    if (!live) return;
    const prompt = live.closest('.jp-CodeCell').querySelector('.jp-InputPrompt');
    const state = {
      events: Number(live.dataset.events),
      arrows: live.querySelectorAll('svg g.aegis-msg').length,
      status: live.dataset.status,
      at: performance.now() / 1000,
      running: prompt.textContent.includes('*'),
    };
    const last = window.__replay[window.__replay.length - 1];
    if (!last || last.events !== state.events) window.__replay.push(state);
  };
  new MutationObserver(record).observe(document.body, {subtree: true, childList: true, attributes: true});
}
"""
PLAYED_TO_THE_END = f"""
() => {{
  const seen = window.__replay;
  return seen.length > 1 && seen[seen.length - 1].events === {EVENTS};
}}
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("lab")
    (base / "notebooks").mkdir()
    shutil.copy(TUTORIAL, base / "notebooks" / TUTORIAL.name)
    with running_lab(base) as started:
        yield started


def check_grew_at_a_human_pace(states: list[dict[str, Any]]) -> None:
    """One state per event, in order, about `PACE` apart, ending on the whole rolled-back run."""
    assert [state["events"] for state in states] == list(range(1, EVENTS + 1)), states
    arrows = [state["arrows"] for state in states]
    assert arrows == sorted(arrows), states  # never fewer drawn
    assert arrows[0] < arrows[-1], states
    gaps = [later["at"] - earlier["at"] for earlier, later in itertools.pairwise(states)]
    assert min(gaps) >= PACE * 0.5, gaps  # a timer's jitter, but never a burst
    assert states[-1]["at"] - states[0]["at"] >= (EVENTS - 1) * PACE * 0.8, gaps
    assert states[-1]["status"] == "rolled_back"


def test_the_quickstarts_replay_grows_event_by_event_and_plays_again_on_the_button(lab: Lab) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(f"{lab.url}/lab/tree/{TUTORIAL.name}?reset&token={lab.token}")
            page.wait_for_function(KERNEL_IDLE)
            page.evaluate(OBSERVER)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            page.wait_for_function(PLAYED_TO_THE_END)
            played = page.evaluate("() => window.__replay")
            assert all(state["running"] for state in played), played  # drawn by the cell's own await
            check_grew_at_a_human_pace(played)

            page.wait_for_function(KERNEL_IDLE)
            page.evaluate("() => { window.__replay = []; }")
            replay = page.locator(".aegis-replay")
            replay.get_by_role("button", name="▶ play").click()
            page.wait_for_function(PLAYED_TO_THE_END)
            again = page.evaluate("() => window.__replay")
            assert again[0]["events"] == EVENTS, again  # as the button found it: the whole run
            check_grew_at_a_human_pace(again[1:])
        finally:
            browser.close()
