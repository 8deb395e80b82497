"""The live view, the replay and the explorer beyond JupyterLab: Notebook 7 and marimo, in headless
Debian Chromium via Playwright (JupyterLab itself: test_browser_live, test_replay_browser,
test_magics_browser).

Each front end runs the same code on the same anywidget models: the travel saga with a pause in
every step, drawn live; the page samples the live diagram every 25 ms (through shadow roots, where
a front end uses them) and must see it grow through intermediate states while the saga runs, to the
rolled-back run with both compensations (in Notebook 7 the live output then turns into the
static picture, as in JupyterLab; in marimo the view stays live). Then the replay's play button
plays the run again event by event, and the explorer's Run button runs its saga, once as it is
and once with a step made to fail, each adding its row to the history. In Notebook 7 the cells
run with "Run All"; marimo runs them itself (``marimo run``), the view shown by its own cell and
drawn in by the next. Where no widget manager exists (JupyterLab with its own switched off), the
live view's fallback output grows instead, a picture per redraw, and ends as the static diagram.
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.jupyterlab import CHROMIUM_ARGS, running_lab, running_marimo
from tests.test_browser_live import KERNEL_READY, SVG, decode_img

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

SETUP = """
import anyio

from aegis_nb import AegisContext, WorkflowEngine
from aegis_nb.notebook import LiveView, ReplayView
from aegis_nb.notebook.explorer import SagaExplorer

PAUSE = 0.4


class TravelStep:
    def __init__(self, name, declined=False, pause=PAUSE):
        self.name, self.declined, self.pause = name, declined, pause

    async def execute(self, ctx):
        await anyio.sleep(self.pause)
        if self.declined:
            raise ValueError("Card Declined!")
        return ctx.with_metadata({self.name: "OK"})

    async def compensate(self, ctx):
        await anyio.sleep(self.pause)


saga = [TravelStep("BookFlight"), TravelStep("ReserveHotel"), TravelStep("ChargeCard", declined=True)]
quick = [TravelStep("BookFlight", pause=0.1), TravelStep("ChargeCard", pause=0.1)]
"""
JUPYTER_CELLS = [
    SETUP,
    "view = LiveView().show()\n"
    "run = await WorkflowEngine().run_saga(saga, AegisContext(), name='book_vacation', sinks=[view])\n"
    "view.flush()",
    "ReplayView(run, interval=0.3)",
    "SagaExplorer.of(quick, deadline=2.0, name='trip')",
]
MARIMO_NOTEBOOK = (
    "import marimo\n\napp = marimo.App()\n\n\n@app.cell\ndef _():\n"
    + "".join(f"    {line}\n" if line else "\n" for line in SETUP.strip().splitlines())
    + "    view = LiveView()\n"
    "    return AegisContext, ReplayView, SagaExplorer, WorkflowEngine, quick, saga, view\n\n\n"
    "@app.cell\ndef _(view):\n    view\n    return\n\n\n"
    "@app.cell\nasync def _(AegisContext, WorkflowEngine, saga, view):\n"
    "    run = await WorkflowEngine().run_saga(saga, AegisContext(), name='book_vacation', sinks=[view])\n"
    "    return (run,)\n\n\n"
    "@app.cell\ndef _(ReplayView, run):\n    ReplayView(run, interval=0.3)\n    return\n\n\n"
    "@app.cell\ndef _(SagaExplorer, quick):\n"
    "    SagaExplorer.of(quick, deadline=2.0, name='trip')\n    return\n"
)
EVENTS = 12  # started; 3 x (started, done or failed); 2 x (undo started, undone); rolled back
# Every 25 ms: the live diagram's and the replay's state, each time it changed.
SAMPLER = """
() => {
  const deep = (root, selector) => {
    const found = root.querySelector(selector);
    if (found) return found;
    for (const node of root.querySelectorAll('*')) {
      if (node.shadowRoot) {
        const inner = deep(node.shadowRoot, selector);
        if (inner) return inner;
      }
    }
    return null;
  };
  window.__seen = {live: [], replay: []};
  const sample = (key, selector) => {
    const diagram = deep(document, selector);
    if (!diagram) return;
    const svg = diagram.querySelector('svg.aegis-diagram');
    const box = svg && svg.querySelector('g.aegis-rollback');
    const state = {
      events: Number(diagram.dataset.events),
      status: diagram.dataset.status,
      compensations: box ? Number(box.dataset.compensations) : 0,
      at: performance.now() / 1000,
    };
    const seen = window.__seen[key];
    const last = seen[seen.length - 1];
    if (!last || last.events !== state.events) seen.push(state);
  };
  // Where no widget is drawn: the live view's fallback picture, an <img> of the SVG.
  const picture = () => {
    const img = deep(document, '.aegis-fallback img');
    if (!img) return;
    const svg = atob(img.src.split(',')[1]);
    const events = Number((svg.match(/data-events="(\\d+)"/) || [0, 0])[1]);
    const status = (svg.match(/data-status="([a-z_]+)"/) || [0, ''])[1];
    const seen = window.__seen.picture;
    const last = seen[seen.length - 1];
    if (!last || last.events !== events) seen.push({events, status, compensations: 0, at: 0});
  };
  window.__seen.picture = [];
  window.__sampler = setInterval(() => {
    sample('live', '.aegis-live .aegis-live-diagram');
    sample('replay', '.aegis-replay .aegis-live-diagram');
    picture();
  }, 25);
}
"""
REACHED = "([key, events]) => (window.__seen[key] || []).some(state => state.events === events)"


def check_grew(states: list[dict[str, Any]]) -> None:
    """Seen growing while the saga ran, through its rollback, not just finished."""
    counts = [state["events"] for state in states]
    assert counts == sorted(counts), states
    assert len([n for n in counts if 1 <= n < EVENTS]) >= 3, states
    assert "compensating" in [state["status"] for state in states], states


def check_rolled_back(svg: str) -> None:
    """The whole run's diagram: rolled back, both steps undone."""
    root = ET.fromstring(svg)
    assert (root.attrib["data-status"], root.attrib["data-events"]) == ("rolled_back", str(EVENTS))
    box = next(g for g in root.iter(f"{SVG}g") if g.attrib.get("class") == "aegis-rollback")
    assert box.attrib["data-compensations"] == "2"


def check_replays_and_explores(page: Page) -> None:
    """The replay's play button plays the run from its first event; the explorer runs on Run."""
    from playwright.sync_api import expect

    page.evaluate("() => { window.__seen.replay = []; }")
    page.locator(".aegis-replay").get_by_role("button", name="▶ play").click()
    page.wait_for_function(
        "() => { const s = window.__seen.replay; return s.length > 2 && s[s.length - 1].events === 12; }"
    )
    replayed = [state["events"] for state in page.evaluate("() => window.__seen.replay")]
    assert replayed[replayed.index(1) :] == list(range(1, EVENTS + 1)), replayed

    explorer = page.locator(".aegis-explorer")
    rows = explorer.locator(".aegis-history tbody tr")
    explorer.get_by_role("button", name="Run", exact=True).click()
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_contain_text("committed: BookFlight, ChargeCard")
    explorer.get_by_role("button", name="ChargeCard fails").click()
    expect(explorer.get_by_role("button", name="ChargeCard fails")).to_have_attribute("aria-pressed", "true")
    explorer.get_by_role("button", name="Run", exact=True).click()
    expect(rows).to_have_count(2)
    expect(explorer.locator(".aegis-history")).to_contain_text(
        "ChargeCard failed (injected by --fail) — rolled back: BookFlight"
    )


@pytest.fixture
def browser_page() -> Iterator[Page]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=60_000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


def test_in_notebook_7_the_view_grows_rolls_back_replays_and_explores(
    tmp_path: Path, browser_page: Page
) -> None:
    import nbformat

    (tmp_path / "notebooks").mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in JUPYTER_CELLS]
    nbformat.write(notebook, tmp_path / "notebooks" / "views.ipynb")
    page = browser_page
    with running_lab(tmp_path, app="jupyter-notebook") as server:
        page.goto(f"{server.url}/notebooks/views.ipynb?token={server.token}")
        page.wait_for_function(KERNEL_READY)  # Notebook 7 has JupyterLab's notebook toolbar
        page.evaluate(SAMPLER)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        # The live output becomes the static picture of the same run at its end, as in JupyterLab.
        static = page.locator(".jp-CodeCell").nth(1).locator(".aegis-static img")
        static.wait_for()
        check_grew(page.evaluate("() => window.__seen.live"))
        rolled_back = "book_vacation: rolled back — Card Declined! — rolled back: ReserveHotel, BookFlight"
        assert static.get_attribute("alt") == rolled_back
        source = static.get_attribute("src")
        assert source is not None
        check_rolled_back(decode_img(source))
        page.locator(".aegis-explorer").wait_for()
        check_replays_and_explores(page)


def test_in_marimo_the_view_grows_rolls_back_replays_and_explores(tmp_path: Path, browser_page: Page) -> None:
    notebook = tmp_path / "views.py"
    notebook.write_text(MARIMO_NOTEBOOK)
    page = browser_page
    with running_marimo(notebook) as server:
        page.goto(server.url)
        page.evaluate(SAMPLER)  # the cells run once the page has connected: the sampler is first
        page.wait_for_function(REACHED, arg=["live", EVENTS])
        check_grew(page.evaluate("() => window.__seen.live"))
        # The view stays live in marimo (no output to swap): its own diagram is the whole run.
        live = page.locator(".aegis-live svg.aegis-diagram")
        check_rolled_back(live.evaluate("(svg) => new XMLSerializer().serializeToString(svg)"))
        page.locator(".aegis-explorer").wait_for()
        check_replays_and_explores(page)


def test_without_a_widget_manager_the_fallback_picture_grows_and_ends_static(
    tmp_path: Path, browser_page: Page
) -> None:
    """JupyterLab with its widget manager switched off stands for a front end that has none."""
    import nbformat

    (tmp_path / "notebooks").mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in JUPYTER_CELLS[:2]]
    nbformat.write(notebook, tmp_path / "notebooks" / "views.ipynb")
    page = browser_page
    managers = ("@jupyter-widgets/jupyterlab-manager", "anywidget")
    with running_lab(tmp_path, disabled=managers) as server:
        page.goto(f"{server.url}/lab/tree/views.ipynb?reset&token={server.token}")
        page.wait_for_function(KERNEL_READY)
        page.evaluate(SAMPLER)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        static = page.locator(".jp-CodeCell").nth(1).locator(".aegis-static img").last
        expect_alt = "book_vacation: rolled back — Card Declined! — rolled back: ReserveHotel, BookFlight"
        page.wait_for_function(
            "(alt) => [...document.querySelectorAll('.aegis-static img')].some(img => img.alt === alt)",
            arg=expect_alt,
        )
        check_grew(page.evaluate("() => window.__seen.picture"))
        assert page.evaluate("() => window.__seen.live") == []  # no widget was drawn
        source = static.get_attribute("src")
        assert source is not None
        check_rolled_back(decode_img(source))
