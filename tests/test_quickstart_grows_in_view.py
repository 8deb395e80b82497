"""Tutorial 01's first saga is seen growing during "Restart Kernel and Run All Cells", in JupyterLab
at 1280x800 driven by headless Debian Chromium.

Before, its two steps took microseconds: the diagram appeared finished (or not at all, while "Run
All" had moved the notebook to its bottom). Now each step has 0.8 s of latency, and the page samples
the first saga's live diagram every 25 ms: it must be drawn soon after Run All starts, on screen, and
go through more than one state (events drawn) while it runs forward, before it rolls back.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jupyterlab import CHROMIUM_ARGS, Lab, running_lab
from tests.test_explorer_after_run_all import KERNEL_IDLE

pytestmark = pytest.mark.slow

TUTORIAL = Path(__file__).resolve().parent.parent / "notebooks" / "01_quickstart.ipynb"
# Samples the first saga's live diagram at every change of the page (and every 25 ms): when, how many
# events it drew, its status, and whether it was on screen. A view waiting for its first event draws
# an empty diagram (0 events), the same for every view: the first run is the first with events.
SAMPLER = """
() => {
  window.__seen = [];
  window.__t0 = performance.now();
  let first = null;
  const sample = () => {
    for (const svg of document.querySelectorAll('.aegis-live svg.aegis-diagram')) {
      if (svg.dataset.events === '0') continue;
      const run = svg.id.split('-').slice(0, 2).join('-');
      first = first || run;
      if (run !== first) continue;
      const box = svg.getBoundingClientRect();
      const shown = box.bottom > 0 && box.top < window.innerHeight && box.height > 0;
      window.__seen.push([performance.now() - window.__t0, svg.dataset.events, svg.dataset.status, shown]);
    }
  };
  new MutationObserver(sample).observe(document.body, { childList: true, subtree: true });
  window.__sampler = setInterval(sample, 25);
}
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("lab")
    (base / "notebooks").mkdir()
    shutil.copy(TUTORIAL, base / "notebooks" / TUTORIAL.name)
    with running_lab(base) as started:
        yield started


def test_the_first_saga_grows_on_screen_during_run_all(lab: Lab) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(120_000)
            page.goto(f"{lab.url}/lab/tree/{TUTORIAL.name}?reset&token={lab.token}")
            page.wait_for_function(KERNEL_IDLE)
            page.get_by_role("menuitem", name="Kernel", exact=True).click()
            page.get_by_role("menuitem", name="Restart Kernel and Run All Cells…", exact=True).click()
            page.evaluate(SAMPLER)
            page.get_by_role("button", name="Confirm Kernel Restart").click()
            # The first saga's diagram goes live, then ends as the static picture in its cell.
            page.wait_for_function("() => window.__seen.some((s) => s[2] !== 'running')")
            seen: list[tuple[float, str, str, bool]] = page.evaluate("() => window.__seen")
        finally:
            browser.close()
    assert seen, "the first saga's live diagram was never drawn"
    # Drawn soon after Run All began (the kernel restarts and loads the extension first: generous).
    assert seen[0][0] < 60_000, seen[0]
    running_in_view = {events for _, events, status, shown in seen if shown and status == "running"}
    # execute() on the flight, then its reply and execute() on the card: each seen on screen.
    assert len(running_in_view) >= 2, seen
