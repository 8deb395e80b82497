"""`WorkflowEngine`: runs a saga forward and, on any failure, compensates what was done, newest first.

The engine holds the defaults (retry policy, compensation budget), the journal and the sinks, and
checks a saga before it runs; each run itself is a `Saga` (aegis_nb.saga.dynamic), the list form
and the dynamic form alike, driving one `Execution` (aegis_nb.saga.execution).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError, SagaFailed
from aegis_nb.saga.definition import StepSpec, normalize_saga
from aegis_nb.saga.dynamic import Saga, SagaState
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.journal import Journal
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.sinks import Sink, SinkSet

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
        if isinstance(compensation_budget, bool) or not (
            isinstance(compensation_budget, int | float) and compensation_budget > 0
        ):
            raise ValueError(f"compensation_budget must be positive seconds, got {compensation_budget!r}")
        self.compensation_retry = compensation_retry or RetryPolicy()
        try:
            self.compensation_budget = float(compensation_budget)
        except OverflowError:  # an int past float range: as endless as inf, which is accepted
            self.compensation_budget = math.inf
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

        The whole list is checked before anything runs, then run through the same machine as a
        dynamic saga (`saga`). `name` defaults to `saga_name` (set by `AegisMCP` to the workflow's
        name), else ``"saga"``; the run's sinks are the engine's, `sinks` and `run_observers`.
        """
        specs = normalize_saga(steps)
        saga = self.saga(ctx, name=name, sinks=sinks, run_id=run_id, _plan=specs)
        try:
            async with saga:
                await saga.run_planned()
        except SagaFailed as exc:
            if saga.state is not SagaState.ENDED or exc is not saga.run.error:
                raise
            # Returned, not raised: without its traceback (this frame) the error holds no cycle,
            # and a failed run's events are freed as soon as it is.
            exc.__traceback__ = None
        return saga.release()

    def saga(
        self,
        ctx: AegisContext | None = None,
        *,
        name: str | None = None,
        sinks: Iterable[Sink] = (),
        run_id: str | None = None,
        _plan: tuple[StepSpec, ...] = (),
    ) -> Saga:
        """A saga whose steps are added as it runs: ``async with engine.saga(ctx) as saga:``.

        See `aegis_nb.saga.dynamic`. `name`, `sinks` and `run_id` as for `run_saga`.
        """
        if ctx is None:
            ctx = AegisContext()
        elif not isinstance(ctx, AegisContext):
            raise SagaDefinitionError(f"ctx must be an AegisContext, got {type(ctx).__name__}")
        observers = run_observers.get()
        if observers:
            sinks = (*sinks, *observers)
        sink_sets = (self._sinks, SinkSet(sinks)) if sinks else (self._sinks,)
        return Saga(
            # 32 hex digits, like uuid4().hex at a third of the cost
            run_id=run_id or secrets.token_hex(16),
            name=name or saga_name.get(),
            ctx=ctx,
            journal=self.journal,
            sink_sets=sink_sets,
            retry=self.compensation_retry,
            budget=self.compensation_budget,
            plan=_plan,
        )

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
