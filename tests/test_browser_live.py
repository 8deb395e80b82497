"""The live view in a real browser: JupyterLab on 127.0.0.1, headless Debian Chromium via Playwright.

Two more cells: the run's Mermaid, which JupyterLab must render as a diagram (not an error), and a
10,000-event saga whose view must stay under the server's message rate limit and end complete.

The notebook `tests/notebooks/live_travel.ipynb` runs the travel saga (flight, hotel, card declined)
with a pause inside every step. While its cell runs, a MutationObserver in the page records each
state of the live diagram; the test then checks that the diagram grew while the cell was still
running, that the live output was swapped for the static ``<img>`` whose SVG holds the rollback box
with two compensations, and takes screenshots (into `assets/` under ``make assets``). The second
test converts the saved notebook to HTML with nbconvert, without a kernel, and finds the static
diagram there.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.jupyterlab import CHROMIUM_ARGS, Lab, running_lab, screenshot_folder

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).parent / "notebooks" / "live_travel.ipynb"
SVG = "{http://www.w3.org/2000/svg}"
# The execution indicator says idle before a kernel is attached: also wait for the kernel's name.
KERNEL_READY = """
() => {
  const bar = document.querySelector('.jp-NotebookPanel-toolbar');
  const name = bar && bar.querySelector("[data-jp-item-name='kernelName']");
  return !!(bar && name && bar.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
            && name.textContent.trim() && !name.textContent.includes('No Kernel'));
}
"""

# Records every state the live diagram goes through, and whether its cell was running at the time.
OBSERVER = """
() => {
  window.__aegis = [];
  const record = () => {
    const live = document.querySelector('.aegis-live-diagram');
    const cell = live ? live.closest('.jp-CodeCell') : null;
    const prompt = cell ? cell.querySelector('.jp-InputPrompt') : null;
    const svg = live ? live.querySelector('svg.aegis-diagram') : null;
    if (!svg) return;
    const state = {
      events: Number(live.dataset.events),
      status: live.dataset.status,
      arrows: svg.querySelectorAll('g.aegis-msg').length,
      running: prompt ? prompt.textContent.includes('*') : false,
    };
    const last = window.__aegis[window.__aegis.length - 1];
    if (!last || last.events !== state.events || last.running !== state.running) window.__aegis.push(state);
  };
  new MutationObserver(record).observe(document.body, {subtree: true, childList: true, attributes: true});
}
"""


@dataclass(frozen=True)
class Session:
    """What the browser saw, and the notebook it saved."""

    states: list[dict[str, Any]]
    static_svg: str
    run_output_svg: str
    big_svg: str
    big_printed: str
    saved: Path
    server_log: str
    log_fits: bool  # the live view's event log showed whole lines, none cut


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("lab")
    (base / "notebooks").mkdir()
    shutil.copy(NOTEBOOK, base / "notebooks" / NOTEBOOK.name)
    with running_lab(base) as started:
        yield started


def decode_img(src: str) -> str:
    prefix = "data:image/svg+xml;base64,"
    assert src.startswith(prefix)
    return base64.b64decode(src[len(prefix) :]).decode("utf-8")


def drive(page: Page, lab: Lab, shots: Path) -> tuple[list[dict[str, Any]], str, str, str, str, bool]:
    """Open the notebook, run it, watch the diagram, take the screenshots, save the notebook."""
    page.set_default_timeout(60_000)
    page.goto(f"{lab.url}/lab/tree/{NOTEBOOK.name}?reset&token={lab.token}")
    page.wait_for_function(KERNEL_READY)
    page.evaluate(OBSERVER)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    # Mid-rollback: the live widget shows the red box with the hotel being undone.
    page.wait_for_function(
        "() => (window.__aegis || []).some(s => s.status === 'compensating' && s.arrows >= 7)"
    )
    page.locator(".aegis-live").first.screenshot(path=str(shots / "live-view-rolling-back.png"))
    # The event log under the diagram shows its last lines whole: no box cutting one in half.
    log_fits = page.locator(".aegis-live .aegis-log").first.evaluate(
        "(log) => log.scrollHeight <= log.clientHeight"
    )
    cells = page.locator(".jp-CodeCell")
    cells.nth(2).locator(".aegis-static img").wait_for()  # `run` shows its diagram
    cells.nth(3).locator(".jp-RenderedMermaid figure img").wait_for()  # JupyterLab drew our Mermaid
    page.wait_for_function(KERNEL_READY)
    cells.nth(1).locator(".aegis-static img").screenshot(path=str(shots / "live-view.png"))
    states = page.evaluate("() => window.__aegis")
    static_src = cells.nth(1).locator(".aegis-static img").get_attribute("src")
    run_src = cells.nth(2).locator(".aegis-static img").get_attribute("src")
    big = cells.nth(4)
    big.locator(".aegis-static img").wait_for()
    big.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']").wait_for()
    big_src = big.locator(".aegis-static img").get_attribute("src")
    big_printed = big.locator(
        ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']"
    ).inner_text()
    assert static_src is not None
    assert run_src is not None
    assert big_src is not None
    with page.expect_response(lambda r: r.request.method == "PUT" and "/api/contents/" in r.url) as put:
        page.locator(".jp-NotebookPanel-toolbar [data-jp-item-name='save'] button").click()
    assert put.value.ok
    return states, static_src, run_src, big_src, big_printed, log_fits


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshot_folder(tmp_path_factory)


@pytest.fixture(scope="module")
def session(lab: Lab, shots: Path) -> Session:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, device_scale_factor=2)
        try:
            states, static_src, run_src, big_src, big_printed, log_fits = drive(page, lab, shots)
        except PlaywrightError as exc:
            shot = lab.root.parent / "failure.png"
            page.screenshot(path=str(shot))
            seen = page.evaluate("() => window.__aegis || null")
            pytest.fail(f"{exc}\nstates seen: {seen}\npage at failure: {shot}")
        finally:
            browser.close()
    return Session(
        states,
        decode_img(static_src),
        decode_img(run_src),
        decode_img(big_src),
        big_printed,
        lab.root / NOTEBOOK.name,
        "".join(lab.log),
        log_fits,
    )


def rollback_group(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    return next(g for g in root.iter(f"{SVG}g") if g.attrib.get("class") == "aegis-rollback")


def test_the_diagram_grows_while_the_cell_runs_and_ends_with_the_rollback(
    session: Session, shots: Path
) -> None:
    running = [state for state in session.states if state["running"]]
    counts = sorted({state["events"] for state in running})
    assert len([n for n in counts if 1 <= n < 12]) >= 3, session.states  # intermediate states, seen live
    assert counts == sorted(counts)
    assert any(state["status"] == "compensating" for state in running)
    root = ET.fromstring(session.static_svg)
    assert root.attrib["data-status"] == "rolled_back"
    assert root.attrib["data-events"] == "12"
    box = rollback_group(session.static_svg)
    assert box.attrib["data-compensations"] == "2"
    undone = [
        (g.attrib["class"], g.attrib["data-step"])
        for g in box.iter(f"{SVG}g")
        if "aegis-msg" in g.attrib["class"]
    ]
    assert undone == [
        ("aegis-msg aegis-compensate", "1"),
        ("aegis-msg aegis-compensated", "1"),
        ("aegis-msg aegis-compensate", "0"),
        ("aegis-msg aegis-compensated", "0"),
    ]
    assert session.run_output_svg == session.static_svg  # `run` displays the same static diagram
    assert session.log_fits
    assert (shots / "live-view.png").stat().st_size > 10_000


def test_ten_thousand_events_stay_under_the_rate_limit_and_end_complete(session: Session) -> None:
    printed = re.fullmatch(r"10000 events, (\d+) redraws\s*", session.big_printed)
    assert printed is not None, session.big_printed
    assert 2 <= int(printed.group(1)) <= 200  # ~20 per second of saga, not one per event
    root = ET.fromstring(session.big_svg)
    assert root.attrib["data-events"] == "10000"  # the last state, not a stale one
    assert root.attrib["data-status"] == "rolled_back"
    assert rollback_group(session.big_svg).attrib["data-compensations"] == "2499"
    assert "rate exceeded" not in session.server_log
    assert "rate_limit" not in session.server_log


def test_the_saved_notebook_shows_the_static_diagram_without_a_kernel(
    session: Session, tmp_path: Path
) -> None:
    out = tmp_path / "live_travel.html"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nbconvert",
            "--to",
            "html",
            f"--output-dir={tmp_path}",
            str(session.saved),
        ],
        check=True,
        capture_output=True,
    )
    html = out.read_text()
    sources = re.findall(r'<img [^>]*src="(data:image/svg\+xml;base64,[A-Za-z0-9+/=]+)"', html)
    # The swapped live output, `run`, the Mermaid as JupyterLab drew and saved it, the big run.
    assert len(sources) == 4
    svg = decode_img(sources[0])
    assert svg == session.static_svg
    assert decode_img(sources[1]) == session.static_svg
    assert "Rollback Triggered" in decode_img(sources[2])
    assert decode_img(sources[3]) == session.big_svg
    assert rollback_group(svg).attrib["data-compensations"] == "2"
    assert "Card Declined! — rolled back: ReserveHotel, BookFlight" in html  # the text/plain fallback too
