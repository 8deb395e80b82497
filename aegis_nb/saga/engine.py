"""`WorkflowEngine`: runs a saga forward and, on any failure, compensates what was done, newest first.

Forward, one cancel scope covers the whole phase and is re-armed only when the deadline changes
(a scope per step would cost ten times the engine itself). Each step gets the context the previous
one returned, stamped with its idempotency key. On an exception, a timeout, a cancellation or an
interrupt, every completed step is compensated with the context its own execute returned, under a
fresh compensation budget and shielded from the cancellation (asyncio's native one included, and
one that arrives mid-rollback); then the cancellation or interrupt propagates unchanged, and any
other failure becomes `SagaRolledBack` or `SagaCompensationFailed`.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from itertools import chain
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from aegis_nb.kernel.clock import loop_clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import (
    SagaCompensationFailed,
    SagaDefinitionError,
    SagaFailed,
    SagaRolledBack,
    StepResultError,
    ToolError,
    ToolTimeoutError,
)
from aegis_nb.kernel.executor import DeadlineGuard
from aegis_nb.kernel.records import builder
from aegis_nb.kernel.report import (
    CompensationFailure,
    ErrorInfo,
    FailureKind,
    SagaReport,
    SagaStatus,
)
from aegis_nb.saga.definition import StepSpec, normalize_saga
from aegis_nb.saga.events import (
    SagaCommitted,
    SagaCompensated,
    SagaEvent,
    SagaStarted,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.recorder import Journal, RunRecorder, Sink, SinkSet
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.rollback import roll_back, run_shielded

_new_step_started = builder(StepStarted)
_new_step_succeeded = builder(StepSucceeded)

saga_name: ContextVar[str] = ContextVar("aegis_saga_name", default="saga")
"""The name runs get when `run_saga` is not given one; a workflow server sets it per request."""

run_observers: ContextVar[tuple[Sink, ...]] = ContextVar("aegis_run_observers", default=())
"""Sinks that every run started in this context gets too, besides the engine's and its own.

A workflow server sets its request's observer here around the call, so each request sees
exactly its own runs' events, delivered straight to it rather than routed per event.
"""

DEFAULT_COMPENSATION_BUDGET = 30.0
"""Seconds each compensation attempt may take; the forward deadline may already be spent."""


class WorkflowEngine:
    """Runs sagas; holds the defaults (retry policy, compensation budget), the journal and the sinks."""

    def __init__(
        self,
        *,
        compensation_retry: RetryPolicy | None = None,
        compensation_budget: float = DEFAULT_COMPENSATION_BUDGET,
        journal: Journal | None = None,
        sinks: Iterable[Sink] = (),
    ) -> None:
        if not (isinstance(compensation_budget, int | float) and compensation_budget > 0):
            raise ValueError(f"compensation_budget must be positive seconds, got {compensation_budget!r}")
        self.compensation_retry = compensation_retry or RetryPolicy()
        self.compensation_budget = float(compensation_budget)
        self.journal = journal
        self._sinks = SinkSet(sinks)

    # -- observing ------------------------------------------------------------------------------

    def subscribe(self, sink: Sink) -> None:
        """Call `sink(event)` for every event of every run of this engine."""
        self._sinks.add(sink)

    def unsubscribe(self, sink: Sink) -> None:
        """Stop calling `sink`; unknown sinks are ignored."""
        self._sinks.discard(sink)

    @asynccontextmanager
    async def event_stream(
        self, max_buffer: float = math.inf
    ) -> AsyncIterator[MemoryObjectReceiveStream[SagaEvent]]:
        """``async with engine.event_stream() as events: async for event in events: ...``.

        A consumer that lets `max_buffer` events pile up is detached (and logged) rather than
        slowing the saga down.
        """
        send, receive = anyio.create_memory_object_stream[SagaEvent](max_buffer)
        self.subscribe(send.send_nowait)
        try:
            async with receive:
                yield receive
        finally:
            self.unsubscribe(send.send_nowait)
            send.close()

    # -- running --------------------------------------------------------------------------------

    async def execute_saga(
        self,
        steps: Any,
        ctx: AegisContext | None = None,
        *,
        name: str | None = None,
        sinks: Iterable[Sink] = (),
    ) -> AegisContext:
        """Run the saga; return the final context, or raise `SagaRolledBack` / `SagaCompensationFailed`.

        Cancellation and interrupts propagate unchanged, after the rollback.
        """
        run = await self.run_saga(steps, ctx, name=name, sinks=sinks)
        try:
            return run.unwrap()
        finally:
            del run  # no cycle through this frame either: see SagaRun.unwrap

    async def run_saga(
        self,
        steps: Any,
        ctx: AegisContext | None = None,
        *,
        name: str | None = None,
        sinks: Iterable[Sink] = (),
        run_id: str | None = None,
    ) -> SagaRun:
        """Run the saga and return its `SagaRun` whatever the outcome (cancellation still propagates).

        `name` defaults to `saga_name` (set by `AegisMCP` to the workflow's name), else ``"saga"``;
        the run's sinks are the engine's, `sinks` and `run_observers`.
        """
        specs = normalize_saga(steps)
        if ctx is None:
            ctx = AegisContext()
        elif not isinstance(ctx, AegisContext):
            raise SagaDefinitionError(f"ctx must be an AegisContext, got {type(ctx).__name__}")
        name = name or saga_name.get()
        clock = loop_clock()
        if ctx.deadline <= clock():
            raise ToolTimeoutError(
                specs[0].name,
                ctx.deadline - clock(),
                f"; saga {name!r} did not start, no step ran and nothing needs undoing",
            )
        run_id = run_id or secrets.token_hex(16)  # 32 hex digits, like uuid4().hex at a third of the cost
        if self.journal is not None:
            await self.journal.open_run(run_id, name, specs)
        observers = run_observers.get()
        if observers:
            sinks = (*sinks, *observers)
        sink_sets = (self._sinks, SinkSet(sinks)) if sinks else (self._sinks,)
        recorder = RunRecorder(run_id, clock, self.journal, sink_sets)
        return await _Forward(self, recorder, name, specs, ctx).run()

    # -- recovering -----------------------------------------------------------------------------

    async def recover(self, *, sinks: Iterable[Sink] = ()) -> tuple[SagaRun, ...]:
        """Finish every run the durable journal shows unfinished: compensate it, newest first.

        Uses this engine's retry policy and budget and emits the same events as a live rollback
        (to the engine's sinks and `sinks`). See `aegis_nb.saga.durable.recovery`.
        """
        from aegis_nb.saga.durable.recovery import RecoverableJournal, recover_unfinished

        journal = self.journal
        if not isinstance(journal, RecoverableJournal):
            raise TypeError(f"recover() needs a durable journal, such as SqliteJournal; got {journal!r}")
        return await recover_unfinished(
            journal,
            default_retry=self.compensation_retry,
            budget=self.compensation_budget,
            sink_sets=(self._sinks, SinkSet(sinks)),
        )


class _Forward:
    """One run: the forward phase, then commit or rollback."""

    def __init__(
        self,
        engine: WorkflowEngine,
        recorder: RunRecorder,
        saga: str,
        specs: tuple[StepSpec, ...],
        ctx: AegisContext,
    ) -> None:
        self.engine = engine
        self.recorder = recorder
        self.saga = saga
        self.specs = specs
        self.initial = ctx
        self.step_names = tuple([s.name for s in specs])
        self.snapshots: list[AegisContext] = []  # what each completed step's execute returned

    async def run(self) -> SagaRun:
        recorder, clock = self.recorder, self.recorder.clock
        run_id, journal, events = recorder.run_id, recorder.journal, recorder.events
        snapshots = self.snapshots
        started = clock()
        current = self.initial
        await recorder.emit(SagaStarted, self.saga, self.step_names, current.deadline, current)
        guard = DeadlineGuard(current.deadline, clock)
        deadline = guard.deadline  # mirrored locally: read twice per step, written rarely
        sinks = recorder.sinks  # likewise, until one is detached
        # What _fail needs to know if the step in hand raises.
        running: StepSpec | None = None
        unrecorded: SagaEvent | None = None  # a StepSucceeded whose journal write has not returned
        step_input = current
        step_started = now = clock()
        try:
            with guard:
                for spec in self.specs:
                    index, name, step, args, kwargs, timeout, _, _ = spec
                    step_input = current._for_step(run_id, index)
                    # Nothing awaits between the last step's end and this one's start: one clock
                    # reading serves both.
                    guard.step = name
                    guard.started_at = step_started = now
                    if timeout is not None:
                        guard.deadline = deadline = min(current.deadline, step_started + timeout)
                    if step_started >= deadline:
                        # Refused before it started: not the failed step, and owed no compensation
                        # even if in doubt. The error names it and says so, for the report's summary.
                        raise ToolTimeoutError(name, deadline - step_started, "; it was not run")
                    # recorder.emit and .publish, inlined: two events per step are most of the
                    # engine's cost, and a call saved on each is measurable.
                    event: SagaEvent = _new_step_started(run_id, len(events), step_started, index, name)
                    if journal is not None:
                        await journal.append(event)
                    events.append(event)
                    for sink in sinks:
                        try:
                            sink(event)
                        except Exception:
                            sinks = recorder.detach(sink, event)

                    # From here on the step may have acted (not if its StepStarted write failed).
                    running = spec
                    # Unpacking empty args costs as much as the rest of the call: skip it.
                    if args or kwargs:
                        result = await step.execute(step_input, *args, **kwargs)
                    else:
                        result = await step.execute(step_input)

                    current = step_input if result is None else self._accept(spec, step_input, result)
                    if current._deadline != deadline:  # a shorter one, or the end of a step timeout
                        guard.deadline = deadline = current._deadline
                    snapshots.append(current)
                    running = None
                    now = clock()
                    event = _new_step_succeeded(
                        run_id, len(events), now, index, name, now - step_started, current
                    )
                    if journal is not None:
                        # Held here until written: if the write fails or is cut off, the rollback
                        # still records the success, so the run's events tell what happened.
                        unrecorded = event
                        await journal.append(event)
                        unrecorded = None
                        now = clock()  # the write took time
                    events.append(event)
                    for sink in sinks:
                        try:
                            sink(event)
                        except Exception:
                            sinks = recorder.detach(sink, event)
        except BaseException as exc:
            return await self._fail(exc, started, running, step_input, step_started, unrecorded)
        await recorder.emit(SagaCommitted, self.saga, clock() - started, current)
        return SagaRun(tuple(events), current, None)

    def _accept(self, spec: StepSpec, step_input: AegisContext, result: object) -> AegisContext:
        """The context a step produced, checked, stamped, and never with a later deadline."""
        if not isinstance(result, AegisContext):
            raise StepResultError(
                f"step {spec.name!r}: execute() must return an AegisContext or None, "
                f"got {type(result).__name__}"
            )
        # A context derived from the step's own input already carries its stamp: no copy needed.
        if result._step_index != spec.index or result._run_id != self.recorder.run_id:
            result = result._for_step(self.recorder.run_id, spec.index)
        if result._deadline > step_input._deadline:
            result = result._with_budget(step_input._deadline)
        return result

    async def _fail(
        self,
        exc: BaseException,
        started: float,
        failed: StepSpec | None,
        step_input: AegisContext,
        step_started: float,
        unrecorded: SagaEvent | None = None,
    ) -> SagaRun:
        """Record the failure, compensate shielded, then re-raise cancellations or build the error.

        `failed` is the step whose execute was running (None if the failure came between steps),
        `step_input` the context it was given and `step_started` when. The shield holds against
        native asyncio cancellation too (see `run_shielded`): a caller's ``asyncio.timeout`` still
        waits for every owed compensation, then gets its cancellation.
        """
        kind = _classify(exc)
        cause = ErrorInfo.from_exception(exc, step_input.secret_values())
        report = await run_shielded(
            self._roll_back(exc, kind, cause, started, failed, step_input, step_started, unrecorded)
        )
        if kind in (FailureKind.CANCELLED, FailureKind.INTERRUPTED):
            raise exc
        error_type = SagaCompensationFailed if report.compensation_failures else SagaRolledBack
        error: SagaFailed = error_type(report)
        error.__cause__ = exc
        return SagaRun(tuple(self.recorder.events), None, error, report)

    async def _roll_back(
        self,
        exc: BaseException,
        kind: FailureKind,
        cause: ErrorInfo,
        started: float,
        failed: StepSpec | None,
        step_input: AegisContext,
        step_started: float,
        unrecorded: SagaEvent | None,
    ) -> SagaReport:
        """`_fail`'s shielded part: the failure's event, the compensations, the final event.

        `unrecorded` is a step's success that its journal write did not record: the step did
        succeed and will be compensated, so the run's events (and sinks) get it first.
        """
        recorder, clock = self.recorder, self.recorder.clock
        if unrecorded is not None:
            recorder.publish(unrecorded)
        snapshots = self.snapshots
        # Newest first, each with what its own execute returned; zip hands out its pairs lazily.
        owed: Iterable[tuple[StepSpec, AegisContext]]
        owed = zip(reversed(self.specs[: len(snapshots)]), reversed(snapshots), strict=True)
        if failed is not None:
            duration = clock() - step_started
            if isinstance(exc, ToolTimeoutError):
                budget = exc.budget if exc.budget is not None else duration
                await recorder.emit(StepTimedOut, failed.index, failed.name, duration, budget, cause)
            else:
                await recorder.emit(StepFailed, failed.index, failed.name, duration, kind, cause)
            # A ToolError is the tool's own answer that it did not act: nothing is in doubt.
            if failed.in_doubt and not isinstance(exc, ToolError):
                owed = chain([(failed, step_input)], owed)
        result = await roll_back(
            recorder,
            owed,
            default_retry=self.engine.compensation_retry,
            budget=self.engine.compensation_budget,
        )
        status = SagaStatus.STUCK if result.failures else SagaStatus.ROLLED_BACK
        report = self._report(
            status,
            failed=failed,
            kind=kind,
            cause=cause,
            compensated=result.compensated,
            failures=result.failures,
        )
        final = SagaStuck if result.failures else SagaCompensated
        await recorder.emit(final, self.saga, clock() - started, report)
        return report

    def _report(
        self,
        status: SagaStatus,
        *,
        failed: StepSpec | None = None,
        kind: FailureKind | None = None,
        cause: ErrorInfo | None = None,
        compensated: tuple[str, ...] = (),
        failures: tuple[CompensationFailure, ...] = (),
    ) -> SagaReport:
        return SagaReport(
            run_id=self.recorder.run_id,
            saga=self.saga,
            status=status,
            steps=self.step_names,
            succeeded=self.step_names[: len(self.snapshots)],
            failed_step=None if failed is None else failed.name,
            failure_kind=kind,
            cause=cause,
            compensated=compensated,
            compensation_failures=failures,
        )


def _classify(exc: BaseException) -> FailureKind:
    if isinstance(exc, ToolTimeoutError):
        return FailureKind.TIMEOUT
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return FailureKind.CANCELLED
    if not isinstance(exc, Exception):
        return FailureKind.INTERRUPTED
    return FailureKind.ERROR
