"""``%aegis_saga --interactive``: the controls are read when a run starts; each run lands beside the last."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("ipywidgets")

from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from aegis_nb.notebook.cellsurface import WIDGET_MIME
from aegis_nb.notebook.explorer import SagaExplorer, history_html

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
    failed = "ChargeCard failed (injected by --fail) — rolled back: BookFlight"
    assert history_html(view.trials) == (
        '<table class="aegis-history" style="font-size:12px;border-collapse:collapse;margin-top:8px">'
        "<thead><tr>"
        f'<th style="{cell}right;font-weight:600">run</th>'
        f'<th style="{cell}right;font-weight:600">deadline</th>'
        f'<th style="{cell}left;font-weight:600">latency</th>'
        f'<th style="{cell}left;font-weight:600">failing</th>'
        f'<th style="{cell}left;font-weight:600">outcome</th>'
        "</tr></thead><tbody>"
        f'<tr><td style="{cell}right">2</td><td style="{cell}right">0.2 s</td>'
        f'<td style="{cell}left">BookFlight 0.05 s</td><td style="{cell}left">ChargeCard</td>'
        f'<td style="{cell}left;color:#b91c1c">{failed}</td>'
        "</tr>"
        f'<tr><td style="{cell}right">1</td><td style="{cell}right">0.3 s</td>'
        f'<td style="{cell}left">none</td><td style="{cell}left">none</td>'
        f'<td style="{cell}left;color:#15803d">committed: BookFlight, ChargeCard</td>'
        "</tr></tbody></table>"
    )
