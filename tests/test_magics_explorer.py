"""``%aegis_saga --interactive``: the controls are read when a run starts; each run lands beside the last.

The options it is given are kept (the ``--fail`` message) and fit (sliders widen to hold ``--deadline``
and ``--latency``; a huge deadline keeps them finite); it works as an expression while the kernel's
loop runs; a second click while a run goes on starts no second run.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("ipywidgets")

from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import ExecutionResult, InteractiveShell
from traitlets.config import Config

from aegis_nb.notebook.cellsurface import WIDGET_MIME
from aegis_nb.notebook.explorer import SagaExplorer, history_html
from aegis_nb.notebook.injection import Fault
from tests.ipython_support import loaded_shell, ok
from tests.test_magics import define
from tests.test_magics_repeated_steps import agency_shell
from tests.test_untrusted_text import REPLACED, SURROGATE, UNDECODABLE

__all__ = ["agency_shell"]  # the fixture, imported so pytest finds it here

STEPS = [
    "%%aegis_step BookFlight\nasync def execute(ctx):\n    return ctx.with_metadata({'flight': 'F1'})\n"
    "async def compensate(ctx):\n    pass\n",
    "%%aegis_step ChargeCard\nasync def execute(ctx):\n    return None\n"
    "async def compensate(ctx):\n    pass\n",
]


@pytest.fixture
def explorer() -> Iterator[tuple[InteractiveShell, SagaExplorer]]:
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    shell.display_pub = CapturingDisplayPublisher()
    for cell in ["%load_ext aegis_nb", *STEPS]:
        assert shell.run_cell(cell).success
    result = shell.run_cell(
        "%aegis_saga BookFlight ChargeCard --interactive --deadline 0.3 --name trip -o last"
    )
    assert result.success, result.error_in_exec
    assert isinstance(result.result, SagaExplorer)
    yield shell, result.result
    InteractiveShell.clear_instance()


def test_the_explorer_shows_a_slider_per_step_and_a_toggle_per_step(
    explorer: tuple[InteractiveShell, SagaExplorer],
) -> None:
    _, view = explorer
    assert view.deadline.value == 0.3
    assert sorted(view.latency) == sorted(view.failing) == ["BookFlight", "ChargeCard"]
    bundle = view._repr_mimebundle_()
    assert sorted(bundle) == [WIDGET_MIME, "text/plain"]
    assert bundle["text/plain"] == (
        "saga explorer for trip (BookFlight, ChargeCard): set the sliders and toggles, then press Run"
    )


def test_each_press_reads_the_controls_and_keeps_the_previous_outcome(
    explorer: tuple[InteractiveShell, SagaExplorer],
) -> None:
    shell, view = explorer
    view.run_button.click()  # no loop is running here: the press runs the saga to the end
    assert [t.run.status.value for t in view.trials] == ["committed"]
    assert shell.user_ns["last"] is view.trials[0].run

    view.latency["ChargeCard"].value = 0.5  # past the 0.3 s deadline
    view.run_button.click()
    view.deadline.value = 1.0
    view.failing["BookFlight"].value = True
    view.run_button.click()

    assert [(t.deadline, t.latencies, t.failing, t.run.status.value) for t in view.trials] == [
        (0.3, (("BookFlight", 0.0), ("ChargeCard", 0.0)), (), "committed"),
        (0.3, (("BookFlight", 0.0), ("ChargeCard", 0.5)), (), "rolled_back"),
        (1.0, (("BookFlight", 0.0), ("ChargeCard", 0.5)), ("BookFlight",), "rolled_back"),
    ]
    assert view.trials[1].run.report.failure_kind is not None
    assert view.trials[1].run.report.failure_kind.value == "timeout"
    assert view.trials[2].run.report.cause is not None
    assert view.trials[2].run.report.cause.message == "BookFlight failed (injected by --fail)"
    assert view.trials[1].settings_text() == "deadline 0.3 s · latency: ChargeCard 0.5 s"
    # The previous pane holds run 2, the current one run 3; the history is sorted by deadline.
    assert view.widget.previous.startswith('<div style="font-size:12px;color:#475569">run 2: deadline 0.3 s')
    assert view.widget.current.startswith('<div style="font-size:12px;color:#475569">run 3: deadline 1 s')
    history = view.widget.history
    assert history.index(">1</td>") < history.index(">2</td>") < history.index(">3</td>")
    assert not view.run_button.disabled
    assert shell.user_ns["last"] is view.trials[2].run


def test_the_history_is_sorted_by_deadline_so_the_flip_is_plain(
    explorer: tuple[InteractiveShell, SagaExplorer],
) -> None:
    _, view = explorer
    assert repr(view.history()) == "no runs yet: press Run"
    view.latency["ChargeCard"].value = 0.2
    for deadline in (0.5, 0.1, 0.3):
        view.deadline.value = deadline
        view.run_button.click()
    assert repr(view.history()) == (
        "run 2: deadline 0.1 s · latency: ChargeCard 0.2 s → rolled back\n"
        "run 3: deadline 0.3 s · latency: ChargeCard 0.2 s → committed\n"
        "run 1: deadline 0.5 s · latency: ChargeCard 0.2 s → committed"
    )


def test_the_history_table_pads_its_cells_and_gives_the_deadline_one_column(
    explorer: tuple[InteractiveShell, SagaExplorer],
) -> None:
    """JupyterLab leaves an output's table cells unpadded: without its own padding, "settings" ran
    into "outcome". The deadline is a column of its own, so the rest is split into latency and failing."""
    _, view = explorer
    view.run_button.click()
    view.latency["BookFlight"].value = 0.05
    view.failing["ChargeCard"].value = True
    view.deadline.value = 0.2
    view.run_button.click()
    cell = "padding:3px 10px;border-bottom:1px solid #e2e8f0;vertical-align:top;text-align:"
    nowrap = ";white-space:nowrap"  # only the outcome wraps: "BookFlight 0.05 s" is one setting
    failed = "ChargeCard failed (injected by --fail) — rolled back: BookFlight"
    assert history_html(view.trials) == (
        '<div style="overflow-x:auto"><table class="aegis-history" '
        'style="font-size:12px;border-collapse:collapse;margin-top:8px">'
        "<thead><tr>"
        f'<th style="{cell}right;font-weight:600{nowrap}">run</th>'
        f'<th style="{cell}right;font-weight:600{nowrap}">deadline</th>'
        f'<th style="{cell}left;font-weight:600{nowrap}">latency</th>'
        f'<th style="{cell}left;font-weight:600{nowrap}">failing</th>'
        f'<th style="{cell}left;font-weight:600{nowrap}">outcome</th>'
        "</tr></thead><tbody>"
        f'<tr><td style="{cell}right{nowrap}">2</td><td style="{cell}right{nowrap}">0.2 s</td>'
        f'<td style="{cell}left{nowrap}">BookFlight 0.05 s</td><td style="{cell}left{nowrap}">ChargeCard</td>'
        f'<td style="{cell}left;color:#b91c1c">{failed}</td>'
        "</tr>"
        f'<tr><td style="{cell}right{nowrap}">1</td><td style="{cell}right{nowrap}">0.3 s</td>'
        f'<td style="{cell}left{nowrap}">none</td><td style="{cell}left{nowrap}">none</td>'
        f'<td style="{cell}left;color:#15803d">committed: BookFlight, ChargeCard</td>'
        "</tr></tbody></table></div>"
    )


# -- options given to --interactive ----------------------------------------------------------------


# Regression guard: x = %aegis_saga ... --interactive works while the kernel's loop runs.
def test_interactive_as_an_expression_works_while_the_kernels_loop_runs(
    agency_shell: InteractiveShell,
) -> None:
    async def kernel_cell(source: str) -> ExecutionResult:
        # What ipykernel does: the cell runs on the kernel's loop, which is running.
        return await agency_shell.run_cell_async(source, transformed_cell=agency_shell.transform_cell(source))

    result = asyncio.run(kernel_cell("explorer = %aegis_saga Pay --interactive --name pay"))
    assert result.error_in_exec is None
    explorer = agency_shell.user_ns["explorer"]
    assert isinstance(explorer, SagaExplorer)
    assert explorer._repr_mimebundle_()["text/plain"] == (
        "saga explorer for pay (Pay): set the sliders and toggles, then press Run"
    )


# Regression guard: the explorer keeps the --fail message it was given.
def test_interactive_keeps_the_fail_message_it_was_given(agency_shell: InteractiveShell) -> None:
    view: object = ok(agency_shell, '%aegis_saga Pay --interactive --fail "Pay=Card Declined!"').result
    assert isinstance(view, SagaExplorer)
    assert view.settings().faults == {"Pay": Fault(fail=True, message="Card Declined!")}
    view.run_button.click()  # no loop runs here: the press runs the saga to the end
    assert str(view.trials[0].run.report.cause) == "Card Declined!"
    # Off and on again: the message comes back with the toggle.
    view.failing["Pay"].value = False
    assert view.settings().faults == {}
    view.failing["Pay"].value = True
    assert view.settings().faults == {"Pay": Fault(fail=True, message="Card Declined!")}


# Regression guard: the explorer widens its sliders to hold --deadline and --latency, not clamps them.
def test_interactive_widens_its_sliders_to_hold_the_values_it_was_given(
    agency_shell: InteractiveShell,
) -> None:
    view: object = ok(agency_shell, "%aegis_saga Pay --interactive --deadline 0.01 --latency Pay=3").result
    assert isinstance(view, SagaExplorer)
    deadline, latency = view.deadline, view.latency["Pay"]
    assert (deadline.value, deadline.min, deadline.step, deadline.max) == (0.01, 0.01, 0.01, 5.0)
    assert (latency.value, latency.min, latency.max) == (3.0, 0.0, 3.0)
    settings = view.settings()
    assert (settings.deadline, settings.faults) == (0.01, {"Pay": Fault(latency=3.0)})
    # A tiny deadline still reads as itself, not as 0.00.
    tiny: object = ok(agency_shell, "%aegis_saga Pay --interactive --deadline 0.005").result
    assert isinstance(tiny, SagaExplorer)
    assert (tiny.deadline.value, tiny.deadline.readout_format) == (0.005, ".2g")
    # The usual ranges are kept when the values fit them.
    usual: object = ok(agency_shell, "%aegis_saga Pay --interactive --deadline 0.3 --latency Pay=0.5").result
    assert isinstance(usual, SagaExplorer)
    assert (usual.deadline.min, usual.deadline.step, usual.deadline.readout_format) == (0.05, 0.05, ".2f")
    assert usual.latency["Pay"].max == 2.0


# -- the explorer's edges --------------------------------------------------------------------------


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with loaded_shell() as ip:
        yield ip


BOOK = "%%aegis_step Book\nasync def execute(ctx):\n    return None\nasync def compensate(ctx):\n    pass\n"


# Regression guard: a huge --deadline keeps the slider's maximum finite (widget state is strict JSON).
def test_a_huge_deadline_keeps_the_explorers_slider_finite(shell: InteractiveShell) -> None:
    ok(shell, BOOK)
    ok(shell, "explorer = %aegis_saga Book --deadline 1e308 --interactive")
    explorer = shell.user_ns["explorer"]
    assert (explorer.deadline.value, explorer.deadline.max) == (1e308, sys.float_info.max)
    json.dumps(explorer.widget.get_state(), allow_nan=False)  # widget state travels as strict JSON


# Regression guard: a second click on Run while a run goes on starts no second run.
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


# Regression guard: the explorer's HTML of an error with a lone surrogate is valid UTF-8.
def test_the_explorer_html_of_an_error_with_a_lone_surrogate_is_valid_utf8(shell: InteractiveShell) -> None:
    shell.user_ns["FILE"] = UNDECODABLE
    define(shell, "Upload", 'raise OSError(f"cannot upload {FILE}")')
    result = shell.run_cell("%aegis_saga Upload --interactive")
    explorer = result.result
    assert isinstance(explorer, SagaExplorer)
    explorer.run_button.click()  # no loop is running here: each press runs the saga to the end
    explorer.run_button.click()
    # Widget values travel to the front end as UTF-8 JSON.
    html = [explorer.widget.current, explorer.widget.previous, explorer.widget.history]
    assert [SURROGATE.search(value) for value in html] == [None, None, None]
    assert f"cannot upload {REPLACED} — rolled back: nothing to undo</td>" in html[2]
