"""The explorer of tutorial 03 obeys its controls after "Restart Kernel and Run All Cells".

A newcomer's sequence, in JupyterLab driven by headless Debian Chromium: open
``notebooks/03_deadlines.ipynb``, restart the kernel and run all cells (the cell after the explorer
presses Run four times from code, ending at a 0.6 s deadline), then set the deadline slider to 0.25
and press Run. The new run must use 0.25 s: its history row and the pane's caption say so, and it
rolls back. Before the fix the slider, drawn while a later cell awaited, sent nothing after its
first (unasked) message, and the run used 0.6 s. The explorer now sends what a person does as
custom messages, which nothing holds back, and sends nothing unasked.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jupyterlab import CHROMIUM_ARGS, Lab, running_lab

pytestmark = pytest.mark.slow

TUTORIAL = Path(__file__).resolve().parent.parent / "notebooks" / "03_deadlines.ipynb"
KERNEL_IDLE = """
() => {
  const bar = document.querySelector('.jp-NotebookPanel-toolbar');
  const name = bar && bar.querySelector("[data-jp-item-name='kernelName']");
  return !!(bar && name && bar.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
            && name.textContent.trim() && !name.textContent.includes('No Kernel'));
}
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("lab")
    (base / "notebooks").mkdir()
    shutil.copy(TUTORIAL, base / "notebooks" / TUTORIAL.name)
    with running_lab(base) as started:
        yield started


def test_the_deadline_slider_set_after_restart_and_run_all_is_the_deadline_run(lab: Lab) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=90_000)  # a whole tutorial runs first, on a shared 2-core machine
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(90_000)
            page.goto(f"{lab.url}/lab/tree/{TUTORIAL.name}?reset&token={lab.token}")
            page.wait_for_function(KERNEL_IDLE)
            page.get_by_role("menuitem", name="Kernel", exact=True).click()
            page.get_by_role("menuitem", name="Restart Kernel and Run All Cells…", exact=True).click()
            page.get_by_role("button", name="Confirm Kernel Restart").click()

            explorer = page.locator(".aegis-explorer")
            rows = explorer.locator(".aegis-history tbody tr")
            expect(rows).to_have_count(4)  # the code cell's four presses: 0.8, 0.25, 0.35, 0.6
            page.wait_for_function(KERNEL_IDLE)
            readout = explorer.get_by_role("textbox", name="deadline (s) value")
            expect(readout).to_have_value("0.60")

            # What a person does: type the value into the slider's readout, then press Run.
            readout.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("0.25")
            page.keyboard.press("Enter")
            expect(readout).to_have_value("0.25")
            expect(explorer.get_by_role("slider", name="deadline (s)", exact=True)).to_have_value("0.25")
            explorer.get_by_role("button", name="Run", exact=True).click()
            expect(rows).to_have_count(5)

            fifth = rows.filter(has=page.locator("td:first-child", has_text="5"))
            expect(fifth.locator("td").nth(1)).to_have_text("0.25 s")
            expect(fifth.locator("td").nth(4)).to_contain_text("rolled back: BookFlight")
            expect(explorer).to_contain_text("run 5: deadline 0.25 s · latency: ReserveHotel 0.1 s")
        finally:
            browser.close()
