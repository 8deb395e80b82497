"""One run of a planned saga for the magics: faults, deadline, mock tools, live view, and the outcome line.

`SagaRunner` is shared by ``%aegis_saga`` (blocking or in the background), the interactive explorer
and the rehearsal; what differs between them is only which faults and deadline a run gets and where
its diagram goes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

from IPython.core.error import UsageError

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError
from aegis_nb.mock.agency import TravelAgency
from aegis_nb.mock.ledgertext import ledger_change
from aegis_nb.notebook.injection import Fault
from aegis_nb.notebook.mocktools import MOCK_VARIABLE, MockTools
from aegis_nb.notebook.options import MockKind, SagaOptions
from aegis_nb.notebook.plan import SagaPlan
from aegis_nb.saga.binding import arguments_mismatch
from aegis_nb.saga.definition import normalize_saga
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.sinks import Sink

DEFAULT_SAGA_NAME = "saga"

_V = TypeVar("_V")


@dataclass(frozen=True)
class RunSettings:
    """What one run gets: faults, a deadline in seconds (None: none), mock tools.

    Faults are keyed by step label (`SagaPlan.labels`), so ``Fly#2`` can fail while ``Fly#1`` does not.
    """

    faults: Mapping[str, Fault] = field(default_factory=dict)
    deadline: float | None = None
    mock: MockKind | None = None
    name: str = DEFAULT_SAGA_NAME
    context: AegisContext = field(default_factory=AegisContext)

    @classmethod
    def from_options(cls, options: SagaOptions, plan: SagaPlan, namespace: Mapping[str, Any]) -> RunSettings:
        """The settings ``--fail``/``--latency``/... ask for, with each step reference resolved in `plan`.

        A name picks every use of a step and a label (``Fly#2``) one use; where both are given, the
        label is applied last, so it wins for its step.
        """
        fail = _by_position(plan, options.fail, "--fail")
        latency = _by_position(plan, options.latency, "--latency")
        faults = {
            plan.labels[index]: Fault(
                fail=index in fail, message=fail.get(index), latency=latency.get(index, 0.0)
            )
            for index in sorted({*fail, *latency})
        }
        return cls(
            faults=faults,
            deadline=options.deadline,
            mock=options.mock,
            name=options.name or DEFAULT_SAGA_NAME,
            context=start_context(options.context, namespace),
        )


def _by_position(plan: SagaPlan, given: Mapping[str, _V], option: str) -> dict[int, _V]:
    """`given` (keyed by step references) keyed by the positions they pick; labels after names."""
    by_position: dict[int, _V] = {}
    for step in sorted(given, key=lambda step: step in plan.labels):  # sorted is stable
        by_position.update(dict.fromkeys(plan.select(step, option), given[step]))
    return by_position


def start_context(variable: str | None, namespace: Mapping[str, Any]) -> AegisContext:
    """The context a run starts from: ``--context VAR`` (an `AegisContext` or a dict) or an empty one."""
    if variable is None:
        return AegisContext()
    if variable not in namespace:
        raise UsageError(f"--context {variable}: there is no variable {variable}")
    value = namespace[variable]
    if isinstance(value, AegisContext):
        return value
    if isinstance(value, Mapping):
        try:
            return AegisContext(value)
        except TypeError as exc:
            raise UsageError(f"--context {variable}: {exc}") from None
    raise UsageError(
        f"--context {variable}: expected an AegisContext or a dict of metadata, got {type(value).__name__}"
    )


class SagaRunner:
    """Runs planned sagas on one engine, binding the mock tools into the user's namespace when asked."""

    def __init__(
        self,
        engine: WorkflowEngine,
        namespace: MutableMapping[str, Any],
        mock_tools: Callable[[], MockTools],
    ) -> None:
        self.engine = engine
        self.namespace = namespace
        self._mock_tools = mock_tools

    def check(self, plan: SagaPlan, magic: str = "aegis_saga") -> None:
        """Reject a malformed saga before anything runs, in one line (`magic` is the one to hint at)."""
        try:
            normalize_saga(plan.entries())
        except SagaDefinitionError as exc:
            message = str(exc)
            misfit = [p.name for p in plan.steps if arguments_mismatch(p.step, p.args, p.kwargs)]
            if misfit:
                message += (
                    f"; a magic gives steps their arguments in the cell form: %%{magic} on the first "
                    f"line, then one step per line, e.g. {misfit[0]}(...)"
                )
            raise UsageError(message) from None

    def bind_mock(self, mock: MockKind | None) -> MockTools | None:
        """Make the mock tools available as a variable (``travel``); returns them."""
        if mock is None:
            return None
        tools = self._mock_tools()
        self.namespace[MOCK_VARIABLE] = tools
        return tools

    async def run(
        self,
        plan: SagaPlan,
        settings: RunSettings,
        sinks: tuple[Sink, ...] = (),
        *,
        agency: TravelAgency | None = None,
    ) -> Outcome:
        """Run once under `settings` (on `agency` instead of the shell's, if given).

        Returns whatever the saga's outcome; a cancellation propagates after the rollback.
        """
        tools = self.bind_mock(settings.mock)
        ledger = None
        async with AsyncExitStack() as stack:
            if tools is not None:
                await stack.enter_async_context(tools.connected(agency))
                before = tools.agency.state()
            ctx = settings.context
            if settings.deadline is not None:
                ctx = ctx.with_timeout(settings.deadline)
            run = await self.engine.run_saga(
                plan.entries(settings.faults), ctx, name=settings.name, sinks=sinks
            )
            if tools is not None:
                ledger = ledger_change(before, tools.agency.state())
        return Outcome(run, ledger)


@dataclass(frozen=True)
class Outcome:
    """A finished run and, with mock tools, one line saying how it changed their ledger."""

    run: SagaRun
    ledger: str | None = None


LAST_ERROR = "aegis_last_error"
"""The variable a blocking ``%aegis_saga`` binds to its run's error (None when it committed)."""

BUGS: tuple[type[BaseException], ...] = (NameError, AttributeError, TypeError, ImportError, SyntaxError)
"""Failures that say a step's code is wrong, not that the world said no: raised, traceback and all."""


def outcome_line(run: SagaRun) -> str | None:
    """One plain line for a run that did not commit: what it did, and where its error went; None on success.

    ``Card Declined! — rolled back: BookFlight · SagaRolledBack in aegis_last_error``
    """
    if run.error is None:
        return None
    return f"{run.report.summary()} · {type(run.error).__name__} in {LAST_ERROR}"


def is_bug(run: SagaRun) -> bool:
    """Did the run fail because a step's code (or an undo's) is broken, e.g. a `NameError`?

    The rollback still ran; the cell should still fail, so the mistake shows where it is. An undo's
    error is known here by its type's name only (the report keeps no exception objects).
    """
    if run.error is None:
        return False
    if isinstance(run.error.__cause__, BUGS):
        return True
    names = {bug.__name__ for bug in BUGS} | {"UnboundLocalError", "ModuleNotFoundError"}
    return any(failure.error.type in names for failure in run.report.compensation_failures)


def show_outcome(run: SagaRun, namespace: MutableMapping[str, Any]) -> None:
    """Under a blocking saga's diagram: bind its error to `LAST_ERROR` and say in one line how it
    ended (stdout: a rollback the notebook asked for is not a crash); raise it if it was a bug."""
    namespace[LAST_ERROR] = run.error
    if run.error is not None and is_bug(run):
        raise run.error
    line = outcome_line(run)
    if line is not None:
        print(line, flush=True)
