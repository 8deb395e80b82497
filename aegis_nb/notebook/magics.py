"""The aegis magics: ``%%aegis_step``, ``%aegis_saga``, ``%aegis_rehearse``, ``%aegis_mock`` and more.

One `AegisMagics` instance per shell holds what the magics share: the steps defined in cells, the
engine, and the mock travel tools. Nothing is module-global, so two shells (or two tests) never see
each other's steps; ``%aegis_watch`` draws any engine's sagas live. The blocking forms are reached
through `run_async` (see `blocking`); the plain magic functions are the fallback for calls that are
not a top-level line of a cell.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class

from aegis_nb.notebook.background import BackgroundRun
from aegis_nb.notebook.cellsteps import define_cell_step
from aegis_nb.notebook.cellsurface import CellSurface
from aegis_nb.notebook.live import LiveView
from aegis_nb.notebook.mocktools import MockTools
from aegis_nb.notebook.options import (
    MockKind,
    SagaOptions,
    parse_rehearse_options,
    parse_saga_options,
    parse_step_options,
)
from aegis_nb.notebook.plan import SagaPlan, parse_plan
from aegis_nb.notebook.runner import DEFAULT_SAGA_NAME, RunSettings, SagaRunner, show_outcome, start_context
from aegis_nb.notebook.runningcell import RunningCell, RunningCellSurface
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.outcome import SagaRun

if TYPE_CHECKING:  # ipywidgets is imported only when an explorer is built
    from aegis_nb.notebook.explorer import SagaExplorer


@magics_class
class AegisMagics(Magics):
    """Define steps in cells and run sagas of them with a live diagram, faults and mock MCP tools."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.namespace: dict[str, Any] = shell.user_ns
        """The user's namespace, where steps are bound and looked up."""
        self.steps: dict[str, Any] = {}
        """Steps defined by ``%%aegis_step``, by name."""
        self.engine = WorkflowEngine()
        self._tools: MockTools | None = None
        self._watching: dict[int, LiveView] = {}
        self._cell_events: Any = shell.events  # IPython's EventManager: where cells begin and end
        self.running_cell = RunningCell(shell)
        """The cell running now: where a watched saga's diagram goes (see `runningcell`)."""
        self._claims: dict[str, object] = {}  # `-o` variable -> the latest run started to bind it
        self.runner = SagaRunner(self.engine, self.namespace, self.mock_tools)

    def mock_tools(self) -> MockTools:
        """This shell's mock travel tools (started on first use; the ledger lives as long as the shell)."""
        if self._tools is None:
            self._tools = MockTools()
        return self._tools

    # -- %%aegis_step ---------------------------------------------------------------------------

    @cell_magic
    def aegis_step(self, line: str, cell: str) -> None:
        """Define a saga step in a cell: ``async def execute(ctx, ...)`` and ``async def compensate(...)``.

        ``%%aegis_step NAME [--timeout SECONDS] [--retries N] [--retry-delay SECONDS] [--in-doubt]
        [--read-only]``: the step is registered under NAME and bound to the variable NAME.
        """
        options = parse_step_options(line)
        step = define_cell_step(options, cell, self.namespace)
        self.steps[options.name] = step
        self.namespace[options.name] = step

    # -- %aegis_saga ----------------------------------------------------------------------------

    @line_cell_magic
    def aegis_saga(self, line: str, cell: str | None = None) -> Any:
        """Run a saga of the named steps with a live diagram.

        ``%aegis_saga STEP [STEP ...] [--deadline SECONDS] [--fail STEP[=MESSAGE]] [--latency STEP=SECONDS]
        [--mock travel] [--name NAME] [-o VAR] [--context VAR] [--background | --interactive]``; the cell
        form lists one step per line, optionally called with arguments: ``BookFlight("Lisbon")``. A
        step used more than once is ``Fly#1``, ``Fly#2`` in the diagram, and ``--fail Fly#2`` fails
        only the second use (``--fail Fly`` names every use).

        In a notebook the magic blocks its cell until the saga ends; where it cannot (inside a
        function or another magic), use ``--background`` and await the returned run. A saga that
        rolls back shows its diagram and one line, not a traceback; its error is bound to
        ``aegis_last_error`` (and to ``-o VAR``'s run). A step whose code is broken (a `NameError`,
        a `TypeError`...) still fails the cell after the rollback.
        """
        options, plan, settings = self._prepare(line, cell)
        # Neither form waits for a saga, so neither needs a loop of its own (`x = %aegis_saga ...`
        # in a kernel, whose loop is running, must work).
        if options.interactive:
            return self._explorer(plan, settings, options.output)
        if options.background:
            return self._background(plan, settings, options.output)
        return self._sync("aegis_saga", lambda: self._saga(options, plan, settings))

    async def saga(self, line: str, cell: str | None = None) -> Any:
        """The saga magic, awaited: None when blocking, a `BackgroundRun` or an explorer otherwise."""
        options, plan, settings = self._prepare(line, cell)
        return await self._saga(options, plan, settings)

    def _prepare(self, line: str, cell: str | None) -> tuple[SagaOptions, SagaPlan, RunSettings]:
        options = parse_saga_options(line)
        plan = parse_plan(options.steps, cell or "", self.steps, self.namespace)
        self.runner.check(plan)  # first: the plan's labels, which the options are resolved to, need it valid
        return options, plan, RunSettings.from_options(options, plan, self.namespace)

    async def _saga(self, options: SagaOptions, plan: SagaPlan, settings: RunSettings) -> Any:
        if options.interactive:
            return self._explorer(plan, settings, options.output)
        if options.background:
            return self._background(plan, settings, options.output)
        self.runner.bind_mock(settings.mock)
        bind = self._binder(options.output)
        view = LiveView(surface=CellSurface()).show()
        try:
            outcome = await self.runner.run(plan, settings, sinks=(view,))
        finally:
            # The static diagram now, in this cell, not later; an interrupted run sends no final
            # event, so without `stop` its view would keep ticking, live, forever.
            view.stop()
        if outcome.ledger is not None:
            print(outcome.ledger, flush=True)
        bind(outcome.run)
        show_outcome(outcome.run, self.namespace)
        return None

    def _explorer(self, plan: SagaPlan, settings: RunSettings, output: str | None) -> SagaExplorer:
        """The controls for `plan`; building them runs nothing (each press of Run does)."""
        from aegis_nb.notebook.explorer import SagaExplorer

        self.runner.bind_mock(settings.mock)
        return SagaExplorer(self.runner, plan, settings, output=output)

    def _background(self, plan: SagaPlan, settings: RunSettings, output: str | None) -> BackgroundRun:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                "--background needs an event loop that keeps running after the cell (a Jupyter kernel's); "
                "here, run the saga without --background"
            ) from None
        self.runner.bind_mock(settings.mock)
        bind = self._binder(output)
        # Shown now, while this cell is the one running: later outputs would land in another cell.
        view = LiveView().show()

        async def job() -> SagaRun:
            try:
                outcome = await self.runner.run(plan, settings, sinks=(view,))
            finally:
                view.stop()
            bind(outcome.run)
            return outcome.run

        return BackgroundRun(settings.name, loop.create_task(job()))

    # -- %aegis_rehearse ------------------------------------------------------------------------

    @line_cell_magic
    def aegis_rehearse(self, line: str, cell: str | None = None) -> Any:
        """Rehearse a saga against the mock tools and show which runs leave the world clean.

        ``%aegis_rehearse STEP [STEP ...] [--mock travel] [--timeout SECONDS] [--name NAME] [-o VAR]
        [--context VAR]``: runs once clean, once per step failing and once per step timing out after
        its effect, then shows the matrix of compensations and ledgers. The cell form lists the
        steps one per line with their arguments, as ``%%aegis_saga`` does.
        """
        return self._sync("aegis_rehearse", lambda: self.rehearse(line, cell))

    async def rehearse(self, line: str, cell: str | None = None) -> Any:
        """The rehearsal magic, awaited: the `Rehearsal` (which displays as the matrix)."""
        from aegis_nb.notebook.rehearsal import rehearse

        options = parse_rehearse_options(line)
        plan = parse_plan(options.steps, cell or "", self.steps, self.namespace)
        self.runner.check(plan, "aegis_rehearse")
        settings = RunSettings(
            mock=options.mock,
            name=options.name or DEFAULT_SAGA_NAME,
            context=start_context(options.context, self.namespace),
        )
        report = await rehearse(self.runner, plan, settings, hang_timeout=options.timeout)
        self._bind(options.output, report)
        return report

    # -- %aegis_watch ---------------------------------------------------------------------------

    @line_magic
    def aegis_watch(self, line: str) -> None:
        """``%aegis_watch ENGINE`` draws every saga that engine runs (an `AegisMCP` app's, too) live.

        The diagram appears in whichever cell is running when a saga starts, e.g. the cell whose MCP
        client calls a workflow, even when the server was started by an earlier cell.
        ``%aegis_watch --stop ENGINE`` stops drawing.
        """
        words = line.split()
        stop = "--stop" in words
        names = [word for word in words if word != "--stop"]
        if len(names) != 1 or any(word.startswith("-") for word in names):
            raise UsageError("%aegis_watch ENGINE (a WorkflowEngine or an AegisMCP app), or --stop ENGINE")
        if names[0] not in self.namespace:
            raise UsageError(f"%aegis_watch {names[0]}: there is no variable {names[0]}")
        engine = _engine_of(names[0], self.namespace[names[0]])
        view = self._watching.pop(id(engine), None)
        if view is not None:
            view.detach(engine)
        if not stop:
            # Shown under the cell running when a saga starts, even when a task that an earlier cell
            # started runs it (an HTTP server's).
            surface = RunningCellSurface(CellSurface(), self.running_cell.follow())
            self._watching[id(engine)] = LiveView(surface=surface).attach(engine)
            events = self._cell_events
            if self._settle_watched not in events.callbacks["post_run_cell"]:
                events.register("post_run_cell", self._settle_watched)

    def _settle_watched(self, result: object) -> None:
        """At the end of each cell, each watched view's waiting redraw: a saga that ended in the cell
        gets its static picture there, not at a later loop turn that nbclient would not store."""
        for view in self._watching.values():
            view.settle()

    def stop_watching_cells(self) -> None:
        """Stop settling watched views at the end of each cell (for ``%unload_ext``)."""
        events = self._cell_events
        if self._settle_watched in events.callbacks["post_run_cell"]:
            events.unregister("post_run_cell", self._settle_watched)

    # -- %aegis_mock ----------------------------------------------------------------------------

    @line_magic
    def aegis_mock(self, line: str) -> Any:
        """``%aegis_mock travel``: bind the mock travel tools to ``travel`` and show the ledger."""
        kind = line.strip()
        if kind != MockKind.TRAVEL.value:
            raise UsageError(f"%aegis_mock takes the mock to start: %aegis_mock {MockKind.TRAVEL.value}")
        tools = self.runner.bind_mock(MockKind.TRAVEL)
        assert tools is not None
        return tools.ledger()

    # -- running --------------------------------------------------------------------------------

    async def run_async(self, magic: str, line: str, cell: str | None) -> Any:
        """What the blocking transformer awaits: the named magic's async form."""
        if magic == "aegis_saga":
            return await self.saga(line, cell)
        if magic == "aegis_rehearse":
            return await self.rehearse(line, cell)
        raise UsageError(f"no aegis magic called {magic!r}")  # pragma: no cover - the transformer's list

    def _sync(self, magic: str, start: Callable[[], Awaitable[Any]]) -> Any:
        """Run an async magic from its sync entry point, which can only wait when no loop is running."""
        if not _loop_running():

            async def main() -> Any:
                return await start()

            return anyio.run(main)
        raise UsageError(
            f"%{magic} blocks its cell only as a line of its own at the top level of a cell (or as the "
            "cell magic); here it is nested in other code. Move it to its own line, or use "
            "--background and await the result."
        )

    def _bind(self, variable: str | None, value: object) -> None:
        if variable is not None:
            self.namespace[variable] = value

    def _binder(self, variable: str | None) -> Callable[[object], None]:
        """What binds a run's outcome to `variable` once it ends, unless a run started later claimed it.

        A cell run again while its first run goes on in the background: whichever ends last, the
        variable holds the newer run, not the stale one.
        """
        if variable is None:
            return lambda value: None
        claim = self._claims[variable] = object()

        def bind(value: object) -> None:
            if self._claims.get(variable) is claim:
                del self._claims[variable]
                self.namespace[variable] = value

        return bind


def _engine_of(name: str, value: object) -> WorkflowEngine:
    engine = getattr(value, "workflow_engine", value)
    if not isinstance(engine, WorkflowEngine):
        raise UsageError(
            f"%aegis_watch {name}: expected a WorkflowEngine or an AegisMCP app, got {type(value).__name__}"
        )
    return engine


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
