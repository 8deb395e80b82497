"""The magics in a real front end: JupyterLab on 127.0.0.1, headless Debian Chromium via Playwright.

"Run All" must run a blocking ``%aegis_saga`` cell to its end before the next cell starts; a
``--background`` saga's live output must turn into the static diagram in its own cell when it ends
during a later cell; and the ``--interactive`` explorer must run the saga when its Run button is
pressed in the browser, reading the toggles as they are at that moment. A rehearsal matrix, even one
with long verdicts, fits its output on a 1280 px screen. Screenshots of the explorer and of a
rehearsal matrix go to `assets/` under ``make assets``, for the README and the tutorials.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jupyterlab import CHROMIUM_ARGS, Lab, running_lab, screenshot_folder

pytestmark = pytest.mark.slow

KERNEL_IDLE = """
() => {
  const bar = document.querySelector('.jp-NotebookPanel-toolbar');
  const name = bar && bar.querySelector("[data-jp-item-name='kernelName']");
  return !!(bar && name && bar.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
            && name.textContent.trim() && !name.textContent.includes('No Kernel'));
}
"""
CELLS = [
    "%load_ext aegis_nb\nimport anyio",
    "%%aegis_step BookFlight\nasync def execute(ctx):\n    await anyio.sleep(0.3)\n"
    "    return ctx.with_metadata({'flight': 'FL-1'})\n\nasync def compensate(ctx):\n    pass",
    "%%aegis_step ChargeCard\nasync def execute(ctx):\n    await anyio.sleep(0.3)\n    return None\n\n"
    "async def compensate(ctx):\n    pass",
    "%aegis_saga BookFlight ChargeCard --fail ChargeCard=Declined --name trip -o run",
    "print('after the saga:', run.status.value)",
    "%aegis_saga BookFlight ChargeCard --interactive --deadline 2 --name trip -o last",
    "%%aegis_rehearse --name trip\nBookFlight\nChargeCard",
    "import asyncio\nrelease = asyncio.Event()",
    "%%aegis_step Hold\nasync def execute(ctx):\n    await release.wait()\n\n"
    "async def compensate(ctx):\n    pass",
    "%aegis_saga Hold --background --name held -o held",
    "release.set()\nprint('background:', (await _).status.value)",
    "%aegis_mock travel",
    "from aegis_nb.mock import travel_steps, trip_context\n"
    "TripFlight, TripHotel, TripCard = travel_steps(travel)\n"
    "trip = trip_context('4242424242424242', traveller='ada')",
    # 04's careless hotel: its undo only looks the bookings up, so the widest verdicts appear.
    "%%aegis_step CarelessHotel --in-doubt\nasync def execute(ctx, city, nights):\n"
    "    hotel = await travel.call_tool(\n"
    "        'reserve_hotel', {'city': city, 'nights': nights, 'idempotency_key': ctx.idempotency_key}\n"
    "    )\n    return ctx.with_metadata({'hotel': hotel})\n\n"
    "async def compensate(ctx, city, nights):\n    await travel.call_tool('list_bookings')",
    "%%aegis_rehearse --mock travel --context trip --name careless\nTripFlight(destination='Lisbon')\n"
    "CarelessHotel(city='Lisbon', nights=3)\nTripCard",
]
OVERFLOW = """
(output) => ({scroll: output.scrollWidth, client: output.clientWidth})
"""


def write_notebook(path: Path) -> None:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nbformat.write(notebook, path)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("lab")
    (base / "notebooks").mkdir()
    write_notebook(base / "notebooks" / "magics.ipynb")
    with running_lab(base) as started:
        yield started


def test_run_all_waits_for_the_saga_and_the_explorer_runs_on_a_button_press(
    lab: Lab, tmp_path_factory: pytest.TempPathFactory
) -> None:
    shots = screenshot_folder(tmp_path_factory)
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1200}, device_scale_factor=1)
            page.set_default_timeout(60_000)
            page.goto(f"{lab.url}/lab/tree/magics.ipynb?reset&token={lab.token}")
            page.wait_for_function(KERNEL_IDLE)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            cells = page.locator(".jp-CodeCell")

            # The cell after the saga ran only once the saga had rolled back.
            expect(cells.nth(4).locator(".jp-OutputArea-output")).to_have_text("after the saga: rolled_back")
            expect(cells.nth(3).locator(".aegis-static img")).to_have_count(1)
            # The rollback's one line is plain output, not a pink stderr block.
            expect(
                cells.nth(3).locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            ).to_have_count(0)
            expect(
                cells.nth(3).locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']")
            ).to_have_text("Declined — rolled back: BookFlight · SagaRolledBack in aegis_last_error")

            # A background saga: its cell returned at once; a later cell let it finish, and its live
            # output was then swapped, in place, for the static diagram.
            expect(cells.nth(10).locator(".jp-OutputArea-output")).to_have_text("background: committed")
            expect(cells.nth(9).locator(".aegis-static img")).to_have_count(1)
            expect(cells.nth(9).locator(".aegis-static img")).to_have_attribute(
                "alt", "held: committed — committed: Hold"
            )

            rehearsal = cells.nth(6).locator(".aegis-rehearsal")
            expect(rehearsal).to_contain_text("✓ safe: in all 5 scenarios every rollback completes")
            page.wait_for_function(KERNEL_IDLE)
            rehearsal.screenshot(path=str(shots / "rehearsal.png"))

            explorer = cells.nth(5).locator(".aegis-explorer")
            history = explorer.locator(".aegis-history tbody tr")
            explorer.get_by_role("button", name="Run", exact=True).click()
            expect(history).to_have_count(1)
            expect(history.nth(0)).to_contain_text("committed: BookFlight, ChargeCard")
            explorer.get_by_role("button", name="ChargeCard fails").click()
            explorer.get_by_role("button", name="Run", exact=True).click()
            expect(history).to_have_count(2)
            expect(explorer.locator(".aegis-history")).to_contain_text(
                "ChargeCard failed (injected by --fail) — rolled back: BookFlight"
            )
            expect(explorer).to_contain_text("run 1: deadline 2 s")  # the previous run, beside the new one
            expect(explorer.locator(".aegis-static img")).to_have_count(2)
            explorer.screenshot(path=str(shots / "explorer.png"))

            # A laptop screen: both rehearsal tables fit their output, verdict first, cells wrapped.
            page.set_viewport_size({"width": 1280, "height": 800})
            careless = cells.nth(14).locator(".aegis-rehearsal")
            expect(careless).to_contain_text("✗ unsafe")
            expect(careless.locator("thead th").nth(2)).to_have_text("ledger after")
            for table in (rehearsal, careless):
                output = table.locator("xpath=ancestor::div[contains(@class,'jp-OutputArea-output')][1]")
                width = output.evaluate(OVERFLOW)
                assert width["scroll"] <= width["client"], width
        finally:
            browser.close()
    assert (shots / "explorer.png").stat().st_size > 10_000
    assert (shots / "rehearsal.png").stat().st_size > 5_000
