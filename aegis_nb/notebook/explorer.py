"""``%aegis_saga --interactive``: find by hand where a saga starts to roll back.

A slider for the deadline, one per step for its latency, a toggle per step to make it fail, and a
Run button. Each press reads the controls (front-end values reach a cell only when a run starts, on
older kernels), runs the saga once with a live diagram, then shows the new diagram beside the
previous outcome and adds a row to the history, which is sorted by deadline so the point where
"committed" turns into "rolled back" is plain to see.

The controls start at what the magic was given: slider ranges widen to hold a ``--deadline`` or
``--latency`` beyond their usual ends, and a ``--fail STEP=MESSAGE`` keeps its message whenever that
step's toggle is on. Controls are per label (``Fly#1``, ``Fly#2``), as in the diagram.

Where no widget can be drawn (nbconvert HTML, GitHub) the explorer's output shows its last state
instead: the last run's diagram, the history and the same as text (see `FallbackOutput`).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from html import escape
from typing import Any

import anyio
import ipywidgets  # type: ignore[import-untyped]

from aegis_nb.diagram import fold, render_svg, render_text
from aegis_nb.kernel.text import counted, replace_surrogates
from aegis_nb.notebook.cellsurface import WIDGET_MIME
from aegis_nb.notebook.fallback import FallbackOutput
from aegis_nb.notebook.injection import Fault
from aegis_nb.notebook.live import LiveView
from aegis_nb.notebook.plan import SagaPlan
from aegis_nb.notebook.runner import RunSettings, SagaRunner
from aegis_nb.notebook.static import Bundle, data_uri
from aegis_nb.notebook.surface import NullSurface
from aegis_nb.saga.outcome import SagaRun

MAX_LATENCY = 2.0
"""Seconds at the right end of each latency slider (further, if ``--latency`` asked for more)."""
MIN_DEADLINE = 0.05
"""Seconds at the left end of the deadline slider, and its step (smaller, if ``--deadline`` asked)."""


@dataclass(frozen=True)
class Trial:
    """One press of Run: the settings it read and the run it got."""

    number: int
    deadline: float
    latencies: tuple[tuple[str, float], ...]
    failing: tuple[str, ...]
    run: SagaRun

    def latency_text(self) -> str:
        """``ChargeCard 0.5 s``: the steps that were slowed down, or ``none``."""
        slow = ", ".join(f"{name} {seconds:g} s" for name, seconds in self.latencies if seconds > 0)
        return slow or "none"

    def settings_text(self) -> str:
        parts = [f"deadline {self.deadline:g} s", f"latency: {self.latency_text()}"]
        if self.failing:
            parts.append(f"failing: {', '.join(self.failing)}")
        return " · ".join(parts)


class SagaExplorer:
    """The controls, the current and previous diagrams, and the history of trials."""

    def __init__(
        self, runner: SagaRunner, plan: SagaPlan, settings: RunSettings, *, output: str | None = None
    ):
        self._runner = runner
        self._plan = plan
        self._base = settings
        self._variable = output
        self.trials: list[Trial] = []
        self._pending: set[asyncio.Task[Trial]] = set()
        names = plan.labels
        initial = settings.deadline if settings.deadline is not None else 1.0
        # A slider clamps its value into [min, max]: widen the range rather than change what was asked.
        # Below the usual left end, the given deadline becomes both the left end and the step, so the
        # slider still lands on it exactly.
        fine = min(MIN_DEADLINE, initial)
        style = {"description_width": "initial"}
        wide = ipywidgets.Layout(width="min(100%, 480px)")
        # Sent on release only. A continuous slider also sends when it is drawn, if the slider's
        # grid rounds its value (0.05 + 9 * 0.05 is 0.5000000000000001): drawn while a later cell
        # of Run All awaits, that message is answered with no idle status (ipykernel >= 7.4 runs
        # it beside the cell), and ipywidgets' front end then holds back the slider's every later
        # change, waiting for that idle: the Run button would read the old value.
        settled = {"continuous_update": False}
        self.deadline = ipywidgets.FloatSlider(
            value=initial,
            min=fine,
            max=max(5.0, min(2 * initial, sys.float_info.max)),  # widget state is JSON: no infinity
            step=fine,
            description="deadline (s)",
            readout_format=".2f" if initial >= 0.01 else ".2g",  # .2f would show a 0.005 s deadline as 0.00
            style=style,
            **settled,
            layout=wide,
        )
        self.latency = {
            name: ipywidgets.FloatSlider(
                value=settings.faults.get(name, Fault()).latency,
                min=0.0,
                max=max(MAX_LATENCY, settings.faults.get(name, Fault()).latency),
                step=0.05,
                description=f"{name} latency (s)",
                readout_format=".2f",
                style=style,
                **settled,
                layout=wide,
            )
            for name in names
        }
        self.failing = {
            name: ipywidgets.ToggleButton(
                value=settings.faults.get(name, Fault()).fail,
                description=f"{name} fails",
                icon="bolt",
                layout=ipywidgets.Layout(width="auto"),
            )
            for name in names
        }
        self.run_button = ipywidgets.Button(description="Run", button_style="primary", icon="play")
        self.run_button.on_click(self._clicked)
        self._current = ipywidgets.VBox([ipywidgets.HTML("<i>press Run</i>")])
        self._previous = ipywidgets.HTML("")
        self._history = ipywidgets.HTML("")
        half = {"width": "50%", "overflow": "auto"}
        panes = ipywidgets.HBox(
            [
                ipywidgets.VBox([ipywidgets.HTML("<b>this run</b>"), self._current], layout=half),
                ipywidgets.VBox([ipywidgets.HTML("<b>previous run</b>"), self._previous], layout=half),
            ]
        )
        self._output = FallbackOutput(self.static_bundle)
        self.widget = ipywidgets.VBox(
            [
                self._output.hider,
                self.deadline,
                *self.latency.values(),
                ipywidgets.HBox([*self.failing.values(), self.run_button]),
                panes,
                self._history,
            ]
        )
        self.widget.add_class("aegis-explorer")

    # -- reading the controls -------------------------------------------------------------------

    def settings(self) -> RunSettings:
        """The run settings the controls show right now (a failing step keeps its ``--fail`` message)."""
        faults = {
            name: Fault(
                fail=self.failing[name].value,
                message=self._base.faults.get(name, Fault()).message if self.failing[name].value else None,
                latency=float(self.latency[name].value),
            )
            for name in self._plan.labels
        }
        return RunSettings(
            faults={name: fault for name, fault in faults.items() if not fault.is_noop},
            deadline=float(self.deadline.value),
            mock=self._base.mock,
            name=self._base.name,
            context=self._base.context,
        )

    # -- running --------------------------------------------------------------------------------

    async def run_once(self) -> Trial:
        """Run the saga with the controls' current values; the diagram replaces the current pane."""
        settings = self.settings()
        assert settings.deadline is not None
        view = LiveView(surface=NullSurface(), static_at_end=False)
        self.run_button.disabled = True
        self._current.children = (view.widget,)
        try:
            outcome = await self._runner.run(self._plan, settings, sinks=(view,))
        finally:
            view.stop()  # up to date, and not ticking on after a run that was interrupted
            self.run_button.disabled = False
        trial = Trial(
            number=len(self.trials) + 1,
            deadline=settings.deadline,
            latencies=tuple((name, float(self.latency[name].value)) for name in self._plan.labels),
            failing=tuple(name for name in self._plan.labels if self.failing[name].value),
            run=outcome.run,
        )
        if self.trials:
            self._previous.value = _trial_html(self.trials[-1])
        self.trials.append(trial)
        self._current.children = (ipywidgets.HTML(_trial_html(trial)),)
        self._history.value = history_html(self.trials)
        if self._variable is not None:
            self._runner.namespace[self._variable] = outcome.run
        self._output.refresh()  # a saved or exported notebook keeps this run, not the blank controls
        return trial

    def _clicked(self, _: Any) -> None:
        if self._pending:
            # A click that reached the kernel before the button showed disabled: one run at a time,
            # or the first run's result would replace the second's live diagram while it runs.
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            anyio.run(self.run_once)
            return
        task = loop.create_task(self.run_once())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    # -- showing --------------------------------------------------------------------------------

    def history(self) -> History:
        """The trials so far, sorted by deadline, as a table that displays itself."""
        return History(tuple(self.trials))

    def static_bundle(self) -> Bundle:
        """The explorer's last state without widgets: the last run's diagram and the history, or the hint."""
        intro = f"saga explorer for {self._base.name} ({', '.join(self._plan.labels)})"
        if not self.trials:
            text = f"{intro}: set the sliders and toggles, then press Run"
            return {"text/html": f"<i>{escape(replace_surrogates(text))}</i>", "text/plain": text}
        last = self.trials[-1]
        heading = f"{intro}, after {counted(len(self.trials), 'run')}"
        html = (
            f"<div><b>{escape(replace_surrogates(heading))}</b></div>"
            f"{_trial_html(last)}{history_html(self.trials)}"
        )
        text = f"{heading}:\n{self.history()!r}\nrun {last.number}:\n{render_text(fold(last.run.events))}"
        return {"text/html": html, "text/plain": replace_surrogates(text)}

    def _ipython_display_(self) -> None:
        self._output.display(self.widget)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle = self.widget._repr_mimebundle_(include=include, exclude=exclude) or {}
        return {WIDGET_MIME: bundle.get(WIDGET_MIME), "text/plain": self.static_bundle()["text/plain"]}


def _trial_html(trial: Trial) -> str:
    """The trial's diagram scaled to its pane (two sit side by side), under a caption of its settings."""
    caption = f"run {trial.number}: {escape(trial.settings_text())}"
    # Widget values travel as UTF-8 JSON: a lone surrogate in an error would not encode.
    alt = escape(replace_surrogates(f"{trial.run.saga}: {trial.run.report.summary()}"), quote=True)
    svg = render_svg(fold(trial.run.events))
    return (
        f'<div style="font-size:12px;color:#475569">{caption}</div>'
        f'<div class="aegis-static"><img src="{data_uri(svg)}" alt="{alt}" style="max-width:100%"/></div>'
    )


class History:
    """Trials sorted by deadline (``text/html`` and ``text/plain``): where the outcome flips is plain."""

    __slots__ = ("trials",)

    def __init__(self, trials: tuple[Trial, ...]) -> None:
        self.trials = trials

    def __repr__(self) -> str:
        lines = []
        for trial in sorted(self.trials, key=lambda t: (t.deadline, t.number)):
            status = trial.run.status.value.replace("_", " ")
            lines.append(f"run {trial.number}: {trial.settings_text()} → {status}")
        return "\n".join(lines) or "no runs yet: press Run"

    def _repr_html_(self) -> str:
        return history_html(list(self.trials))


# Padding and alignment inline: JupyterLab's stylesheet leaves an output's table cells unpadded, so
# one column ran into the next. Numbers are right-aligned so deadlines line up for comparing.
_CELL = "padding:3px 10px;border-bottom:1px solid #e2e8f0;vertical-align:top;text-align:"
_COLUMNS = (
    ("run", "right"),
    ("deadline", "right"),
    ("latency", "left"),
    ("failing", "left"),
    ("outcome", "left"),
)


def _td(text: str, align: str, colour: str | None = None) -> str:
    ink = "" if colour is None else f";color:{colour}"
    return f'<td style="{_CELL}{align}{ink}">{escape(replace_surrogates(text))}</td>'


def history_html(trials: list[Trial]) -> str:
    """Every trial so far, sorted by deadline: where the outcome flips is where the deadline bites.

    The deadline has its own column, so the settings are split into what was slowed and what failed.
    """
    head = "".join(f'<th style="{_CELL}{align};font-weight:600">{name}</th>' for name, align in _COLUMNS)
    rows = []
    for trial in sorted(trials, key=lambda t: (t.deadline, t.number)):
        colour = "#15803d" if trial.run.ok else "#b91c1c"
        rows.append(
            "<tr>"
            + _td(str(trial.number), "right")
            + _td(f"{trial.deadline:g} s", "right")
            + _td(trial.latency_text(), "left")
            + _td(", ".join(trial.failing) or "none", "left")
            + _td(trial.run.report.summary(), "left", colour)
            + "</tr>"
        )
    return (
        '<table class="aegis-history" style="font-size:12px;border-collapse:collapse;margin-top:8px">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
