"""Rehearsal: run a saga once clean, once per step failing and once per step timing out, and judge each run.

A saga is only as good as its worst failure. `rehearse` runs every way the saga can go wrong one
step at a time and records, per step, what happened: done, failed, timed out, undone, or not undone.
With the mock travel tools each scenario starts from a fresh agency (carrying the current fault plan)
and the ledger is read as the run goes, so the rehearsal knows which bookings each step made and can
tell a compensation that really undid its step from one that merely returned: the latter, and any
booking left live after a rollback, make the scenario unsafe.

Timeouts are the dangerous case, so a timing-out step is made to hang *after* its effect (the tool
acted, the answer never came): only a step that opted in to being compensated in doubt cleans that up.

Scenarios, faults and columns are per position, named by the engine's labels: with a step used twice
(``Fly#1``, ``Fly#2``), "the second flight fails after the first was booked" is a scenario of its own.
A parallel group's members are positions too, so each member fails and times out in turn while its
siblings run; a sibling the engine cancelled because of it is marked so. Members act at the same
time, so a booking is credited to the step whose idempotency key it carries (``run_id/position``);
one made without a key goes to every step that was running when it appeared.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.report import FailureKind, SagaStatus
from aegis_nb.mock.agency import TravelAgency
from aegis_nb.mock.ledger import LedgerState
from aegis_nb.notebook.injection import Fault, Hang
from aegis_nb.notebook.mocktools import MockTools
from aegis_nb.notebook.options import DEFAULT_REHEARSAL_TIMEOUT, MockKind
from aegis_nb.notebook.plan import PlanEntry, SagaPlan, plan_of
from aegis_nb.notebook.runner import RunSettings, SagaRunner
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationSucceeded,
    SagaEvent,
    StepEvent,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)
from aegis_nb.saga.outcome import SagaRun


class ScenarioKind(enum.Enum):
    CLEAN = "clean"
    FAILS = "fails"
    TIMES_OUT = "times out"


@dataclass(frozen=True)
class Scenario:
    """One way a run can go: everything works, or one step fails, or one step times out.

    `step` is the step's label (`SagaPlan.labels`), unique even when a step is used twice.
    """

    kind: ScenarioKind
    step: str | None = None

    @property
    def label(self) -> str:
        if self.kind is ScenarioKind.CLEAN:
            return "all steps succeed"
        if self.kind is ScenarioKind.FAILS:
            return f"{self.step} fails"
        return f"{self.step} times out after acting"

    def fault(self, timeout: float) -> Fault:
        if self.kind is ScenarioKind.FAILS:
            return Fault(fail=True, message=f"{self.step} failed (rehearsal)")
        return Fault(hang=Hang.AFTER_EFFECT, timeout=timeout)


class Mark(enum.Enum):
    """What became of one step in one scenario. `bad` marks are what a person must fix."""

    NOT_RUN = "not run"
    DONE = "done"
    FAILED = "failed"
    TIMED_OUT = "timed out"
    CANCELLED = "cancelled"
    """Cancelled before it ended: in a rehearsal, by the engine, because a sibling in its group failed."""
    UNDONE = "undone"
    UNDONE_BUT_LIVE = "undone, but still live"
    LEFT_LIVE = "left live"
    UNDO_FAILED = "undo failed"

    @property
    def bad(self) -> bool:
        return self in (Mark.UNDONE_BUT_LIVE, Mark.LEFT_LIVE, Mark.UNDO_FAILED)


@dataclass(frozen=True)
class StepOutcome:
    """One cell of the matrix: the mark, the ids the step made that are still live, and the attempts."""

    mark: Mark
    live: tuple[str, ...] = ()
    attempts: int = 0

    @property
    def text(self) -> str:
        text = self.mark.value
        if self.mark in (Mark.UNDONE, Mark.UNDO_FAILED) and self.attempts > 1:
            text += f" ({self.attempts} attempts)"
        if self.live:
            text += f": {', '.join(self.live)}"
        return text


@dataclass(frozen=True)
class ScenarioResult:
    """One row: the scenario, what became of each step, the outcome and what the ledger held after."""

    scenario: Scenario
    status: SagaStatus
    steps: tuple[StepOutcome, ...]
    compensated: tuple[str, ...]
    ledger: LedgerState | None
    run: SagaRun = field(repr=False, compare=False)

    @property
    def leftovers(self) -> tuple[str, ...]:
        """Ids live after a failed run: each one is a booking or charge nobody will pay for or use."""
        if self.ledger is None or self.status is SagaStatus.COMMITTED:
            return ()
        return live_ids(self.ledger)

    @property
    def safe(self) -> bool:
        """Committed, or rolled back with nothing left live and no compensation that lied.

        The clean scenario must commit: a saga that fails with nothing injected is broken.
        """
        if self.status is SagaStatus.COMMITTED:
            return True
        if self.scenario.kind is ScenarioKind.CLEAN:
            return False
        return (
            self.status is SagaStatus.ROLLED_BACK
            and not self.leftovers
            and not any(outcome.mark.bad for outcome in self.steps)
        )

    def problems(self, names: tuple[str, ...]) -> list[str]:
        """What a person must fix, one sentence each, with the likely remedy."""
        found = []
        if self.scenario.kind is ScenarioKind.CLEAN and self.status is not SagaStatus.COMMITTED:
            found.append(
                f"{self.scenario.label}: nothing was injected, yet the saga did not commit: "
                f"{self.run.report.summary()}."
            )
        for name, outcome in zip(names, self.steps, strict=True):
            live = ", ".join(outcome.live)
            if outcome.mark is Mark.UNDONE_BUT_LIVE:
                found.append(
                    f"{self.scenario.label}: {name}.compensate() returned, but {live} is still live — the "
                    "compensation does not undo what execute did."
                )
            elif outcome.mark is Mark.LEFT_LIVE:
                found.append(
                    f"{self.scenario.label}: {name} acted ({live}) but was never compensated — mark it "
                    "--in-doubt and let its compensation undo by idempotency key."
                )
            elif outcome.mark is Mark.UNDO_FAILED:
                found.append(
                    f"{self.scenario.label}: {name}'s compensation failed after {outcome.attempts} "
                    "attempt(s): the saga is stuck and a person must undo it."
                )
        attributed = {ident for outcome in self.steps for ident in outcome.live}
        stray = [ident for ident in self.leftovers if ident not in attributed]
        if stray:
            found.append(f"{self.scenario.label}: {', '.join(stray)} left live after the rollback.")
        return found


@dataclass(frozen=True)
class Rehearsal:
    """Every scenario's result; displays as the matrix (see `rehearsal_view`)."""

    saga: str
    steps: tuple[str, ...]
    results: tuple[ScenarioResult, ...]
    with_ledger: bool
    timeout: float
    groups: tuple[tuple[str, ...], ...] = ()
    """The labels of each parallel group's members, whose steps run together."""

    @property
    def safe(self) -> bool:
        return all(result.safe for result in self.results)

    @property
    def unsafe(self) -> tuple[ScenarioResult, ...]:
        return tuple(result for result in self.results if not result.safe)

    def problems(self) -> list[str]:
        return [problem for result in self.results for problem in result.problems(self.steps)]

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        from aegis_nb.notebook.rehearsal_view import render_html, render_text

        return {"text/html": render_html(self), "text/plain": render_text(self)}

    def __repr__(self) -> str:
        from aegis_nb.notebook.rehearsal_view import render_text

        return render_text(self)


def scenarios(steps: tuple[str, ...]) -> tuple[Scenario, ...]:
    """Clean first, then each step failing, then each step timing out, in saga order (`steps`: labels)."""
    return (
        Scenario(ScenarioKind.CLEAN),
        *(Scenario(ScenarioKind.FAILS, step) for step in steps),
        *(Scenario(ScenarioKind.TIMES_OUT, step) for step in steps),
    )


async def rehearse(
    runner: SagaRunner, plan: SagaPlan, settings: RunSettings, *, hang_timeout: float
) -> Rehearsal:
    """Run every scenario of `plan` (on fresh mock agencies when `settings.mock` is set).

    `hang_timeout` is how long a step that hangs after acting is given before it times out.
    """
    names = plan.labels  # not plan.names: a repeated step must be rehearsed at each of its positions
    tools = runner.bind_mock(settings.mock)
    results = []
    for scenario in scenarios(names):
        agency = None if tools is None else TravelAgency(faults=tools.agency.faults)
        watch = _Watch(agency, len(names))
        faults = {} if scenario.step is None else {scenario.step: scenario.fault(hang_timeout)}
        run_settings = RunSettings(
            faults=faults, mock=settings.mock, name=settings.name, context=settings.context
        )
        outcome = await runner.run(plan, run_settings, sinks=(watch,), agency=agency)
        results.append(watch.result(scenario, outcome.run))
    groups = tuple(tuple(names[index] for index in group) for group in plan.groups)
    return Rehearsal(settings.name, names, tuple(results), tools is not None, hang_timeout, groups)


async def rehearse_saga(
    saga: Sequence[PlanEntry],
    *,
    tools: MockTools | None = None,
    context: AegisContext | None = None,
    name: str = "saga",
    hang_timeout: float = DEFAULT_REHEARSAL_TIMEOUT,
    engine: WorkflowEngine | None = None,
) -> Rehearsal:
    """Rehearse a saga list (as `WorkflowEngine.execute_saga` takes it) outside the magics.

    With `tools` (the `MockTools` the steps call), each scenario gets a fresh agency with the same
    fault plan and the ledger is judged; without, only the compensations are.
    """
    plan = plan_of(saga)
    runner = SagaRunner(engine or WorkflowEngine(), {}, lambda: _given(tools))
    settings = RunSettings(
        mock=None if tools is None else MockKind.TRAVEL, name=name, context=context or AegisContext()
    )
    return await rehearse(runner, plan, settings, hang_timeout=hang_timeout)


def _given(tools: MockTools | None) -> MockTools:
    assert tools is not None  # only asked for when the settings name a mock
    return tools


def live_ids(state: LedgerState) -> tuple[str, ...]:
    return tuple(_live_keys(state))


def _live_keys(state: LedgerState) -> dict[str, str | None]:
    """Every live booking and charge id, with the idempotency key it was made under (None: none)."""
    keys = {booking.id: booking.idempotency_key for booking in (*state.flights, *state.hotels)}
    keys.update((charge.id, charge.idempotency_key) for charge in state.charges)
    return keys


class _Watch:
    """A sink that notes which ledger ids each step created, and how each step ended.

    The ledger is read at each step's start and end: an id that appeared since the last reading is
    the step's whose idempotency key it carries, else the step's that was running alone meanwhile.
    One made without a key while several members ran is nobody's, and is reported as left live.
    """

    def __init__(self, agency: TravelAgency | None, count: int) -> None:
        self._agency = agency
        self._seen: set[str] = set()
        self._running: set[int] = set()
        self.made: list[frozenset[str]] = [frozenset()] * count
        self.forward: dict[int, Mark] = {}
        self.undo: dict[int, tuple[Mark, int]] = {}

    def _observe(self, run_id: str) -> None:
        """Credit the ids that appeared since the last reading (see the class docstring)."""
        if self._agency is None:
            return
        prefix = f"{run_id}/"
        for ident, key in _live_keys(self._agency.state()).items():
            if ident in self._seen:
                continue
            self._seen.add(ident)
            owner = _position(key, prefix, len(self.made))
            if owner is None and len(self._running) == 1:
                (owner,) = self._running
            if owner is not None:
                self.made[owner] = self.made[owner] | {ident}

    def __call__(self, event: SagaEvent) -> None:
        if not isinstance(event, StepEvent):
            return
        index = event.index
        match event:
            case StepStarted():
                self._observe(event.run_id)
                self._running.add(index)
            case StepSucceeded() | StepFailed() | StepTimedOut():
                self._observe(event.run_id)
                self._running.discard(index)
                if isinstance(event, StepFailed) and event.kind is FailureKind.CANCELLED:
                    self.forward[index] = Mark.CANCELLED
                else:
                    self.forward[index] = {
                        StepSucceeded: Mark.DONE,
                        StepFailed: Mark.FAILED,
                        StepTimedOut: Mark.TIMED_OUT,
                    }[type(event)]
            case CompensationSucceeded():
                self.undo[index] = (Mark.UNDONE, event.attempt)
            case CompensationFailed() if not event.will_retry:
                self.undo[index] = (Mark.UNDO_FAILED, event.attempt)

    def result(self, scenario: Scenario, run: SagaRun) -> ScenarioResult:
        ledger = None if self._agency is None else self._agency.state()
        live_after = frozenset(live_ids(ledger)) if ledger is not None else frozenset()
        committed = run.status is SagaStatus.COMMITTED
        outcomes = []
        for index, made in enumerate(self.made):
            still = tuple(sorted(made & live_after))
            if index in self.undo:
                mark, attempts = self.undo[index]
                if mark is Mark.UNDONE and still:
                    mark = Mark.UNDONE_BUT_LIVE
                outcomes.append(StepOutcome(mark, still, attempts))
            elif index not in self.forward:
                outcomes.append(StepOutcome(Mark.NOT_RUN))
            elif still and not committed:
                outcomes.append(StepOutcome(Mark.LEFT_LIVE, still))
            else:
                outcomes.append(StepOutcome(self.forward[index]))
        return ScenarioResult(
            scenario=scenario,
            status=run.status,
            steps=tuple(outcomes),
            compensated=run.report.compensated,
            ledger=ledger,
            run=run,
        )


def _position(key: str | None, prefix: str, count: int) -> int | None:
    """The saga position an idempotency key of this run (``run_id/position``) names, if it names one."""
    if key is None or not key.startswith(prefix):
        return None
    rest = key[len(prefix) :]
    if not rest.isdigit() or int(rest) >= count:
        return None
    return int(rest)
