"""`Saga`: a saga whose steps are added as it runs, the caller deciding each next step from the last.

::

    async with engine.saga(ctx, name="trip") as saga:
        ctx = await saga.step(book_flight, "LIS")        # runs now; returns the new context
        if ctx.metadata["flight"]["price_cents"] > 50_000:
            await saga.rollback("too expensive")         # undo what was done, end the saga
        else:
            ctx = await saga.parallel(ReserveHotel(), RentCar())
    run = saga.run                                        # the SagaRun, as run_saga returns it

Leaving the block normally commits; leaving it by an exception compensates every completed step
newest first (`aegis_nb.saga.execution`), then raises `SagaRolledBack` / `SagaCompensationFailed`
chained to the cause, or lets a cancellation or interrupt propagate unchanged. A step that fails
raises its own exception from `step`: code that catches it may go on (a step in doubt is then owed a
compensation). The list form (`WorkflowEngine.run_saga`) runs through this same handle.

A `Saga` is entered and left in one task, like any async context manager of anyio's; a saga that
spans several requests is owned by one task that runs the steps the requests send it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

from aegis_nb.kernel.clock import loop_clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError, ToolTimeoutError
from aegis_nb.saga.definition import StepSpec, normalize_entry
from aegis_nb.saga.execution import Execution
from aegis_nb.saga.journal import Journal
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.parallel import CompensationOrder, ParallelGroup, parallel
from aegis_nb.saga.recorder import RunRecorder
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.sinks import SinkSet


class SagaState(enum.Enum):
    """Where a `Saga` handle stands."""

    NOT_STARTED = "not started"
    OPEN = "open"
    ENDED = "ended"


class Saga:
    """A run whose steps and groups are added while it runs; see the module docstring."""

    def __init__(
        self,
        *,
        run_id: str,
        name: str,
        ctx: AegisContext,
        journal: Journal | None,
        sink_sets: tuple[SinkSet, ...],
        retry: RetryPolicy,
        budget: float,
        plan: Sequence[StepSpec] = (),
    ) -> None:
        self.run_id = run_id
        self.name = name
        self._journal = journal
        self._plan = tuple(plan)  # a list saga's steps, checked and journaled before it starts
        self._execution = Execution(
            RunRecorder(run_id, loop_clock(), journal, sink_sets), name, ctx, retry, budget
        )
        self._state = SagaState.NOT_STARTED
        self._classes: dict[type, Any] = {}  # class checks, kept across steps
        self._names: set[str] = set()
        self._repeats: dict[str, int] = {}  # per name, the last #n given to a repeat of it
        self._next_index = 0
        self._run: SagaRun | None = None

    # -- reading ------------------------------------------------------------------------------------

    @property
    def context(self) -> AegisContext:
        """The latest context: what the next step receives."""
        return self._execution.context

    @property
    def state(self) -> SagaState:
        return self._state

    @property
    def ended(self) -> bool:
        return self._state is SagaState.ENDED

    @property
    def run(self) -> SagaRun:
        """The finished run, as `WorkflowEngine.run_saga` returns it; a `RuntimeError` before it ends."""
        if self._run is None:
            raise RuntimeError(f"saga {self.name!r} has not ended: its run is known once the block is left")
        return self._run

    def release(self) -> SagaRun:
        """The finished run, which this handle then forgets: the run's error chains to a cause whose
        traceback holds this handle's frames, and would otherwise hold the run in a cycle."""
        run = self.run
        self._run = None
        return run

    # -- the block ----------------------------------------------------------------------------------

    async def __aenter__(self) -> Saga:
        if self._state is not SagaState.NOT_STARTED:
            raise RuntimeError(f"saga {self.name!r} was already entered; a Saga runs once")
        clock = self._execution.recorder.clock
        deadline = self._execution.initial.deadline
        if deadline <= clock():
            first = self._plan[0].name if self._plan else f"saga {self.name!r}"
            raise ToolTimeoutError(
                first,
                deadline - clock(),
                f"; saga {self.name!r} did not start, no step ran and nothing needs undoing",
            )
        if self._journal is not None:
            await self._journal.open_run(self.run_id, self.name, self._plan)
        self._state = SagaState.OPEN
        try:
            await self._execution.start([spec.name for spec in self._plan])
        except BaseException as exc:
            # Nothing ran; a cancellation the journal held during the write rolls back (nothing to
            # undo) rather than leaving the run open, and propagates from `_end`. Otherwise the run
            # rolled back, and its error (chained to the scrubbed cause) is what the caller gets.
            await self._end(exc)
            error = self.run.error
            assert error is not None  # `_end` returned: the run ended rolled back
            raise error from error.__cause__
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self._state is SagaState.ENDED:
            return False  # ended by commit() or rollback(): an exception since is the code's own
        await self._end(exc)
        error = self.run.error
        if error is not None and error is not exc:
            raise error
        return False

    async def _end(self, exc: BaseException | None) -> None:
        """Commit (no exception) or roll back; a cancellation or interrupt is re-raised after it."""
        self._state = SagaState.ENDED
        try:
            if exc is None:
                await self._execution.commit()
            else:
                await self._execution.fail(exc)
        finally:
            self._run = self._execution.take_outcome()  # None if the journal failed under the rollback
            if self._journal is not None:
                # Ended, or given up (an interrupt, a journal that failed): either way, what the
                # journal holds of the run is now for recovery, in this process too.
                self._journal.close_run(self.run_id)

    # -- steps ---------------------------------------------------------------------------------------

    async def step(self, step: Any, /, *args: Any, **kwargs: Any) -> AegisContext:
        """Check `step` as a saga entry, journal it, run it on the latest context; return its output.

        A `parallel(...)` group is an entry too, run as `parallel` runs it.
        """
        self._check_open("step")
        if isinstance(step, ParallelGroup):
            if args or kwargs:
                raise SagaDefinitionError(
                    "saga.step(parallel(...)) takes no arguments: give each member its own, "
                    "as (step, args, kwargs)"
                )
            return await self._execution.run_group(await self._added(step))
        (spec,) = await self._added((step, args, kwargs) if args or kwargs else step)
        return await self._execution.run_step(spec)

    async def parallel(
        self, *members: Any, compensation: CompensationOrder | str = CompensationOrder.CONCURRENT
    ) -> AegisContext:
        """Run `members` together (see `aegis_nb.saga.parallel`); return their merged output."""
        self._check_open("parallel")
        specs = await self._added(parallel(*members, compensation=compensation))
        return await self._execution.run_group(specs)

    async def rollback(self, reason: str) -> None:
        """Compensate every completed step now and end the saga rolled back, with `reason`.

        The block then leaves without an error; `run.error` is the `SagaRolledBack` for the caller
        who wants one (``run.unwrap()``).
        """
        self._check_open("rollback")
        if not isinstance(reason, str):
            raise TypeError(f"rollback(reason) takes a str, got {type(reason).__name__}")
        self._state = SagaState.ENDED
        try:
            await self._execution.roll_back_requested(reason)
        finally:
            self._run = self._execution.take_outcome()
            if self._journal is not None:
                self._journal.close_run(self.run_id)

    async def commit(self) -> None:
        """End the saga committed now; nothing later undoes its steps."""
        self._check_open("commit")
        await self._end(None)
        if self.run.error is not None:  # the commit's journal write failed: the saga rolled back
            raise self.run.error

    async def run_planned(self) -> None:
        """Run the steps the saga was built with (the list form), in order, groups together."""
        await self._execution.run_list(self._plan)

    # -- checking ------------------------------------------------------------------------------------

    def _check_open(self, action: str) -> None:
        if self._state is SagaState.OPEN:
            return
        if self._state is SagaState.NOT_STARTED:
            raise RuntimeError(
                f"saga.{action}() outside its block: use `async with engine.saga(ctx) as saga:` first"
            )
        assert self._run is not None
        raise RuntimeError(
            f"saga {self.name!r} has ended ({self._run.status.value}): saga.{action}() cannot change it"
        )

    async def _added(self, entry: object) -> tuple[StepSpec, ...]:
        """`entry` checked at the saga's next index, named uniquely in the run, and journaled.

        A bad entry is a `SagaDefinitionError` and runs nothing; the saga stays open.
        """
        if self._plan:
            raise RuntimeError(f"saga {self.name!r} runs a fixed list of steps; it takes none added")
        specs = normalize_entry(entry, self._next_index, self._classes)
        specs = tuple(map(self._unique, specs))
        if self._journal is not None:
            await self._journal.add_steps(self.run_id, self.name, specs)
        self._next_index += len(specs)
        return specs

    def _unique(self, spec: StepSpec) -> StepSpec:
        """`spec` with a name no earlier step of the run has: a repeat gets ``#2``, ``#3``, ..."""
        name = spec.name
        if name in self._names:
            number = self._repeats.get(name, 1) + 1
            while f"{name}#{number}" in self._names:  # a step may already be called "hotel#2"
                number += 1
            self._repeats[spec.name] = number
            name = f"{name}#{number}"
            spec = replace(spec, name=name)
        self._names.add(name)
        return spec
