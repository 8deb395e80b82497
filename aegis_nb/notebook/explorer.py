"""``%aegis_saga --interactive``: find by hand where a saga starts to roll back.

A slider for the deadline, one per step for its latency, a toggle per step to make it fail, and a
Run button. Each press reads the controls (front-end values reach a cell only when a run starts, on
older kernels), runs the saga once with a live diagram, then shows the new diagram beside the
previous outcome and adds a row to the history, which is sorted by deadline so the point where
"committed" turns into "rolled back" is plain to see.

The controls start at what the magic was given: slider ranges widen to hold a ``--deadline`` or
``--latency`` beyond their usual ends, and a ``--fail STEP=MESSAGE`` keeps its message whenever that
step's toggle is on. Controls are per label (``Fly#1``, ``Fly#2``), as in the diagram.

The explorer is one anywidget (`ExplorerWidget`), so it works in marimo as in Jupyter; from Python
its controls read and set like widgets (``explorer.deadline.value = 0.25``). Where no widget can be
drawn (nbconvert HTML, GitHub) the explorer's output shows its last state instead: the last run's
diagram, the history and the same as text (see `FallbackOutput`).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import anyio
from IPython.core.error import UsageError

from aegis_nb.diagram import fold, render_svg, render_text
from aegis_nb.kernel.errors import SagaDefinitionError
from aegis_nb.kernel.text import counted, replace_surrogates
from aegis_nb.notebook.fallback import FallbackOutput
from aegis_nb.notebook.injection import Fault
from aegis_nb.notebook.live import LiveView
from aegis_nb.notebook.mime import WIDGET_MIME, widget_view
from aegis_nb.notebook.mocktools import MockTools
from aegis_nb.notebook.plan import SagaPlan, plan_of
from aegis_nb.notebook.runner import DEFAULT_SAGA_NAME, RunSettings, SagaRunner
from aegis_nb.notebook.static import Bundle, data_uri
from aegis_nb.notebook.surface import NullSurface
from aegis_nb.notebook.widgets import ExplorerWidget
from aegis_nb.saga.engine import WorkflowEngine
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
        latencies = {name: settings.faults.get(name, Fault()).latency for name in names}
        self.widget = ExplorerWidget(
            labels=list(names),
            deadline=initial,
            deadline_min=fine,
            deadline_max=max(5.0, min(2 * initial, sys.float_info.max)),  # widget state is JSON: no infinity
            deadline_step=fine,
            deadline_format=".2f" if initial >= 0.01 else ".2g",  # .2f would show a 0.005 s deadline as 0.00
            latency=latencies,
            latency_max={name: max(MAX_LATENCY, seconds) for name, seconds in latencies.items()},
            failing={name: settings.faults.get(name, Fault()).fail for name in names},
        )
        """The anywidget: the controls, this run's and the previous run's diagrams, the history."""
        self.widget.on_msg(self._message)
        self.deadline = DeadlineControl(self.widget)
        self.latency = {name: LatencyControl(self.widget, name) for name in names}
        self.failing = {name: FailToggle(self.widget, name) for name in names}
        self.run_button = RunButton(self)
        self._output = FallbackOutput(self.static_bundle, self.widget.fallback_id)

    @classmethod
    def of(
        cls,
        steps: Sequence[Any],
        *,
        deadline: float = 1.0,
        name: str = DEFAULT_SAGA_NAME,
        engine: WorkflowEngine | None = None,
    ) -> SagaExplorer:
        """An explorer for a saga list (steps, ``(step, args, kwargs)`` entries, `parallel` groups),
        without the magics; a control per position, a group's members included.

        For front ends with no IPython magics (marimo): ``SagaExplorer.of([BookFlight(), Pay()])``.
        """
        try:
            plan = plan_of(steps)
        except SagaDefinitionError as exc:
            raise UsageError(str(exc)) from None
        runner = SagaRunner(engine if engine is not None else WorkflowEngine(), {}, MockTools)
        return cls(runner, plan, RunSettings(deadline=deadline, name=name))

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
        view = LiveView(surface=NullSurface(), static_at_end=False, canvas=_Pane(self.widget))
        self.widget.running = True
        try:
            outcome = await self._runner.run(self._plan, settings, sinks=(view,))
        finally:
            view.stop()  # up to date, and not ticking on after a run that was interrupted
            self.widget.running = False
        trial = Trial(
            number=len(self.trials) + 1,
            deadline=settings.deadline,
            latencies=tuple((name, float(self.latency[name].value)) for name in self._plan.labels),
            failing=tuple(name for name in self._plan.labels if self.failing[name].value),
            run=outcome.run,
        )
        with self.widget.hold_sync():
            if self.trials:
                self.widget.previous = _trial_html(self.trials[-1])
            self.trials.append(trial)
            self.widget.current = _trial_html(trial)
            self.widget.history = history_html(self.trials)
        if self._variable is not None:
            self._runner.namespace[self._variable] = outcome.run
        self._output.refresh()  # a saved or exported notebook keeps this run, not the blank controls
        return trial

    def _message(self, _: object, content: Any, buffers: object = None) -> None:
        """What a person did in the front end: moved a slider, flipped a toggle, pressed Run."""
        if not isinstance(content, dict):
            return
        if content.get("run") is True:
            self._clicked(None)
            return
        name, value = content.get("name"), content.get("value")
        what = content.get("set")
        if what == "deadline" and isinstance(value, int | float):
            self.deadline.value = value
        elif what == "latency" and name in self.latency and isinstance(value, int | float):
            self.latency[name].value = value
        elif what == "failing" and name in self.failing and isinstance(value, bool):
            self.failing[name].value = value

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
        return {WIDGET_MIME: widget_view(self.widget), "text/plain": self.static_bundle()["text/plain"]}

    def _display_(self) -> ExplorerWidget:
        """What marimo shows for this object: the widget (marimo draws anywidget, with no fallback)."""
        return self.widget


class _Pane:
    """The explorer's "this run" pane as a live view's canvas."""

    __slots__ = ("_widget",)

    def __init__(self, widget: ExplorerWidget) -> None:
        self._widget = widget

    @property
    def value(self) -> str:
        return str(self._widget.current)

    @value.setter
    def value(self, html: str) -> None:
        self._widget.current = html


class DeadlineControl:
    """The deadline slider, from Python: `value` in seconds, its range and how its readout is written."""

    __slots__ = ("_widget",)

    def __init__(self, widget: ExplorerWidget) -> None:
        self._widget = widget

    @property
    def value(self) -> float:
        return float(self._widget.deadline)

    @value.setter
    def value(self, seconds: float) -> None:
        # Clamped as a slider clamps: the range was chosen to hold what the magic was given.
        self._widget.deadline = min(max(float(seconds), self.min), self.max)

    @property
    def min(self) -> float:
        return float(self._widget.deadline_min)

    @property
    def max(self) -> float:
        return float(self._widget.deadline_max)

    @property
    def step(self) -> float:
        return float(self._widget.deadline_step)

    @property
    def readout_format(self) -> str:
        return str(self._widget.deadline_format)


class LatencyControl:
    """One step's latency slider, from Python: `value` in seconds, from 0 to `max`."""

    __slots__ = ("_name", "_widget")
    min = 0.0

    def __init__(self, widget: ExplorerWidget, name: str) -> None:
        self._widget = widget
        self._name = name

    @property
    def value(self) -> float:
        return float(self._widget.latency[self._name])

    @value.setter
    def value(self, seconds: float) -> None:
        clamped = min(max(float(seconds), self.min), self.max)
        self._widget.latency = {**self._widget.latency, self._name: clamped}  # a new dict: synced

    @property
    def max(self) -> float:
        return float(self._widget.latency_max[self._name])


class FailToggle:
    """One step's "fails" toggle, from Python: `value` is whether the step is made to fail."""

    __slots__ = ("_name", "_widget")

    def __init__(self, widget: ExplorerWidget, name: str) -> None:
        self._widget = widget
        self._name = name

    @property
    def value(self) -> bool:
        return bool(self._widget.failing[self._name])

    @value.setter
    def value(self, on: bool) -> None:
        self._widget.failing = {**self._widget.failing, self._name: bool(on)}


class RunButton:
    """The Run button, from Python: `click()` presses it; `disabled` while a run runs."""

    __slots__ = ("_explorer",)

    def __init__(self, explorer: SagaExplorer) -> None:
        self._explorer = explorer

    def click(self) -> None:
        self._explorer._clicked(None)

    @property
    def disabled(self) -> bool:
        return bool(self._explorer.widget.running)


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
# one column ran into the next. Numbers are right-aligned so deadlines line up for comparing. Only
# the outcome wraps (at spaces): "ReserveHotel 0.1 s" on two lines read as two settings.
_CELL = "padding:3px 10px;border-bottom:1px solid #e2e8f0;vertical-align:top;text-align:"
_NOWRAP = ";white-space:nowrap"
_COLUMNS = (
    ("run", "right"),
    ("deadline", "right"),
    ("latency", "left"),
    ("failing", "left"),
    ("outcome", "left"),
)


def _td(text: str, align: str, colour: str | None = None, *, wraps: bool = False) -> str:
    ink = "" if colour is None else f";color:{colour}"
    nowrap = "" if wraps else _NOWRAP
    return f'<td style="{_CELL}{align}{ink}{nowrap}">{escape(replace_surrogates(text))}</td>'


def history_html(trials: list[Trial]) -> str:
    """Every trial so far, sorted by deadline: where the outcome flips is where the deadline bites.

    The deadline has its own column, so the settings are split into what was slowed and what failed.
    """
    head = "".join(
        f'<th style="{_CELL}{align};font-weight:600{_NOWRAP}">{name}</th>' for name, align in _COLUMNS
    )
    rows = []
    for trial in sorted(trials, key=lambda t: (t.deadline, t.number)):
        colour = "#15803d" if trial.run.ok else "#b91c1c"
        rows.append(
            "<tr>"
            + _td(str(trial.number), "right")
            + _td(f"{trial.deadline:g} s", "right")
            + _td(trial.latency_text(), "left")
            + _td(", ".join(trial.failing) or "none", "left")
            + _td(trial.run.report.summary(), "left", colour, wraps=True)
            + "</tr>"
        )
    return (
        '<div style="overflow-x:auto"><table class="aegis-history" '
        'style="font-size:12px;border-collapse:collapse;margin-top:8px">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
