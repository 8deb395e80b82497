"""Regressions in the live view's lifecycle and the magics' concurrency.

Each test here failed before its fix: on trio a saga run by a compensation took the view over from the
run still compensating; a run interrupted mid-rollback left its cell's view live and ticking forever;
a background run that ended late overwrote the ``-o`` variable of the newer run of the same cell; a
huge ``--deadline`` gave the explorer's slider an infinite (non-JSON) maximum; and two clicks on Run
started two overlapping runs. Nothing sleeps: time is moved by hand, runs wait on events.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("IPython")
pytest.importorskip("ipywidgets")

from IPython.core.interactiveshell import InteractiveShell

from aegis_nb.diagram import SequenceBuilder, fold
from aegis_nb.kernel.context import AegisContext
from aegis_nb.notebook import LiveView, run_bundle, static_bundle
from aegis_nb.notebook.cellsurface import WIDGET_MIME
from aegis_nb.notebook.render import live_html
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.testing import EventCapture
from tests.ipython_support import loaded_shell, ok
from tests.test_live_and_trace_fixes import abandoned_run, live_timers
from tests.test_magics import displays, magics
from tests.test_widget_live import FakeScheduler, RecordingSurface, Step

# -- the live view ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_saga_run_by_a_compensation_does_not_take_the_view_over() -> None:
    """On trio the compensation runs in the followed run's own task, yet that run is not over."""
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)

    class UndoneBySaga:
        name = "Book"

        async def execute(self, ctx: AegisContext) -> None:
            return None

        async def compensate(self, ctx: AegisContext) -> None:
            await engine.run_saga([Step("Refund")], AegisContext(), name="refund")

    run = await engine.run_saga([UndoneBySaga(), Step("Charge", fail=True)], AegisContext(), name="outer")
    clock.advance(0.0)
    assert surface.shown == [view.widget]
    assert surface.replaced == [run_bundle(run)]
    assert view.events == run.events


@pytest.mark.anyio
async def test_stop_leaves_a_run_interrupted_mid_rollback_static_and_not_ticking() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    interrupted = await abandoned_run(engine)
    view.stop()  # what a magic does once the run's await is over, however it ended
    assert surface.shown == [view.widget]
    assert surface.replaced == [static_bundle(fold(interrupted))]
    redraws = view.redraws
    clock.advance(10.0)
    assert (view.redraws, live_timers(clock)) == (redraws, 0)


def test_stop_before_any_run_started_says_no_saga_ran() -> None:
    surface = RecordingSurface()
    view = LiveView(scheduler=FakeScheduler(), surface=surface)
    view.stop()
    assert view.widget.value == live_html(SequenceBuilder().snapshot(), ["no saga ran"])
    assert (surface.shown, surface.replaced) == ([], [])


# -- the magics -------------------------------------------------------------------------------------


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with loaded_shell() as ip:
        yield ip


BOOK = "%%aegis_step Book\nasync def execute(ctx):\n    return None\nasync def compensate(ctx):\n    pass\n"


def test_a_saga_interrupted_mid_rollback_ends_its_cell_with_the_static_diagram(
    shell: InteractiveShell,
) -> None:
    ok(shell, "class Interrupted(BaseException):\n    pass")  # a kernel interrupt, without stopping pytest
    ok(
        shell,
        "%%aegis_step Book\nasync def execute(ctx):\n    return None\n"
        "async def compensate(ctx):\n    raise Interrupted\n",
    )
    ok(shell, "%%aegis_step Charge --read-only\nasync def execute(ctx):\n    raise RuntimeError('declined')")
    capture = EventCapture()
    magics(shell).engine.subscribe(capture)
    result = shell.run_cell("%aegis_saga Book Charge")
    assert type(result.error_in_exec).__name__ == "Interrupted"
    assert [type(event).__name__ for event in capture][-1] == "CompensationStarted"  # no final event
    shown = displays(shell)
    assert sorted(shown[0]["data"]) == [WIDGET_MIME, "text/plain"]
    # The fallback (blank, and blanked), the widget blanked, then the static diagram.
    blank = {"text/plain": ""}
    assert [output["data"] for output in shown[1:]] == [blank, blank, blank, static_bundle(fold(capture))]


def test_a_background_run_that_ends_late_does_not_overwrite_the_newer_runs_variable(
    shell: InteractiveShell,
) -> None:
    ok(shell, "import asyncio\ngates = {'first': asyncio.Event(), 'second': asyncio.Event()}")
    ok(
        shell,
        "%%aegis_step Hold\nasync def execute(ctx, gate):\n    await gates[gate].wait()\n"
        "async def compensate(ctx, gate):\n    pass\n",
    )
    # The same cell run twice while its first run still goes on.
    ok(shell, "%%aegis_saga --background --name first -o run\nHold('first')")
    ok(shell, "first = _")
    ok(shell, "%%aegis_saga --background --name second -o run\nHold('second')")
    ok(shell, "second = _")
    ok(shell, "gates['second'].set()\nsecond_run = await second")
    ok(shell, "gates['first'].set()\nfirst_run = await first")
    namespace = shell.user_ns
    assert (namespace["first_run"].saga, namespace["second_run"].saga) == ("first", "second")
    assert namespace["run"] is namespace["second_run"]


def test_a_huge_deadline_keeps_the_explorers_slider_finite(shell: InteractiveShell) -> None:
    ok(shell, BOOK)
    ok(shell, "explorer = %aegis_saga Book --deadline 1e308 --interactive")
    explorer = shell.user_ns["explorer"]
    assert (explorer.deadline.value, explorer.deadline.max) == (1e308, sys.float_info.max)
    json.dumps(explorer.widget.get_state(), allow_nan=False)  # widget state travels as strict JSON


def test_a_second_click_while_a_run_goes_on_starts_no_second_run(shell: InteractiveShell) -> None:
    ok(shell, BOOK)
    ok(shell, "explorer = %aegis_saga Book --interactive")
    # Both clicks reach the kernel (whose loop runs: the cell awaits) before the first run starts.
    ok(
        shell,
        "import asyncio\nexplorer.run_button.click()\nexplorer.run_button.click()\n"
        "await asyncio.gather(*explorer._pending)",
    )
    trials = shell.user_ns["explorer"].trials
    assert [(trial.number, trial.run.status.value) for trial in trials] == [(1, "committed")]
