"""At 1280x800 (a laptop), in JupyterLab driven by headless Debian Chromium, tutorial 03's explorer and
tutorial 04's rehearsals read without squinting: no table cell breaks a word across lines ("outco|me",
"ChargeC|ard", "commit|ted"), none wraps a setting in two ("ReserveHotel 0.1 / s"), and the explorer's
two diagrams are shown at their own size, one above the other, not squeezed side by side to 420 px.

Each tutorial is copied, restarted and run whole ("Restart Kernel and Run All Cells"), as a newcomer
does. A word is broken when the rectangles the browser lays its letters out in sit on more than one
line.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from tests.jupyterlab import CHROMIUM_ARGS, Lab, running_lab
from tests.test_explorer_after_run_all import KERNEL_IDLE

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

_T = TypeVar("_T")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
EXPLORER = "03_deadlines.ipynb"
REHEARSALS = "04_when_compensation_fails.ipynb"

QUEUED = """
() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
  .some((prompt) => prompt.textContent.includes('*'))
"""
BROKEN_WORDS = """
(selector) => {
  const broken = [];
  for (const cell of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(match[0]);
      }
    }
  }
  return broken;
}
"""
WRAPPED = """
(selector) => [...document.querySelectorAll(selector)].filter((cell) => {
  const range = document.createRange();
  range.selectNodeContents(cell);
  return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size > 1;
}).map((cell) => cell.textContent)
"""
PANES = """
() => [...document.querySelectorAll('.aegis-explorer .aegis-static img')].map((img) => ({
  shown: img.getBoundingClientRect().width, natural: img.naturalWidth,
  left: Math.round(img.getBoundingClientRect().left),
}))
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("lab")
    (base / "notebooks").mkdir()
    for name in (EXPLORER, REHEARSALS):
        shutil.copy(NOTEBOOKS / name, base / "notebooks" / name)
    with running_lab(base) as started:
        yield started


def run_all(lab: Lab, name: str, check: Callable[[Page], _T]) -> _T:
    """Restart and run all of tutorial `name` at 1280x800, then `check` the page."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(120_000)
            page.goto(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}")
            page.wait_for_function(KERNEL_IDLE)
            page.get_by_role("menuitem", name="Kernel", exact=True).click()
            page.get_by_role("menuitem", name="Restart Kernel and Run All Cells…", exact=True).click()
            page.get_by_role("button", name="Confirm Kernel Restart").click()
            # The stored outputs stay until their cells run again: wait for the whole run to end.
            page.wait_for_function(QUEUED)
            page.wait_for_function(f"() => !({QUEUED})()")
            page.wait_for_function(KERNEL_IDLE)
            return check(page)
        finally:
            browser.close()


def test_the_explorer_shows_its_diagrams_whole_and_its_history_unbroken(lab: Lab) -> None:
    def check(page: Page) -> tuple[Any, Any, Any]:
        explorer = page.locator(".aegis-explorer")
        explorer.locator(".aegis-history tbody tr").nth(3).wait_for()  # the next cell's four runs
        explorer.scroll_into_view_if_needed()
        history = ".aegis-explorer .aegis-history"
        return (
            page.evaluate(PANES),
            page.evaluate(BROKEN_WORDS, f"{history} td, {history} th"),
            page.evaluate(WRAPPED, f"{history} td:not(:last-child), {history} th"),
        )

    panes, broken, wrapped = run_all(lab, EXPLORER, check)
    assert len(panes) == 2, panes
    for pane in panes:
        assert pane["shown"] >= min(pane["natural"], 560) - 1, panes  # its own size, not half of it
    assert panes[0]["left"] == panes[1]["left"], panes  # one above the other in a laptop's column
    assert broken == []
    assert wrapped == []  # a setting ("ReserveHotel 0.1 s") on one line


def test_the_rehearsal_tables_break_no_word(lab: Lab) -> None:
    def check(page: Page) -> Any:
        page.locator(".aegis-rehearsal").nth(1).wait_for()  # 04's second rehearsal: the careless one
        return page.evaluate(BROKEN_WORDS, ".aegis-rehearsal td, .aegis-rehearsal th")

    assert run_all(lab, REHEARSALS, check) == []
