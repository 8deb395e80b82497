"""`RunRecorder`: numbers, timestamps, journals and publishes one run's events.

The journal is written first, so a sink (a widget, a progress reporter) never shows a transition
that a crash could forget. A sink that raises is detached and logged; it never breaks the saga.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from types import BuiltinFunctionType, BuiltinMethodType, FunctionType, MethodType
from typing import Any, Protocol

import anyio

from aegis_nb.kernel.clock import Clock
from aegis_nb.kernel.records import builder
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.events import SagaEvent

logger = logging.getLogger("aegis_nb.saga")

Sink = Callable[[SagaEvent], object]
"""A synchronous event consumer; it must not block (hand work to a task if it has to)."""


class Journal(Protocol):
    """Durable (or in-memory) record of every run's events, written before the engine acts."""

    async def open_run(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        """Called before a run's first event. A durable journal checks here that recovery could
        rebuild these steps (identity, JSON arguments) and raises, so that nothing runs otherwise."""
        ...

    async def append(self, event: SagaEvent) -> None:
        """Record `event`; return only once it is as durable as this journal promises.

        A cancellation never cuts a write off: one that arrives meanwhile is raised only once the
        event is recorded, so the engine knows the journal has it. A write that fails raises
        `JournalError` (a run whose write failed writes no more).
        """
        ...

    def close_run(self, run_id: str) -> None:
        """The run's call is over, finished or not: what the journal holds of it is now for recovery."""
        ...


class SinkSet:
    """A copy-on-write set of sinks, so detaching one mid-publish is safe."""

    __slots__ = ("_sinks",)

    def __init__(self, sinks: Iterable[Sink] = ()) -> None:
        self._sinks: tuple[Sink, ...] = tuple(sinks)

    def add(self, sink: Sink) -> None:
        if not callable(sink):
            raise TypeError(f"a sink must be callable, got {type(sink).__name__}")
        self._sinks = (*self._sinks, sink)

    def discard(self, sink: Sink) -> None:
        self._sinks = tuple(s for s in self._sinks if not same_sink(s, sink))


class RunRecorder:
    """Builds each event with the run id, the next sequence number and the clock time."""

    __slots__ = ("_subscribed", "clock", "events", "journal", "run_id", "sink_sets", "sinks")

    def __init__(
        self, run_id: str, clock: Clock, journal: Journal | None, sink_sets: tuple[SinkSet, ...]
    ) -> None:
        self.run_id = run_id
        self.clock = clock
        self.journal = journal
        self.events: list[SagaEvent] = []
        self.sink_sets = sink_sets
        # Flattened and bound once per run: publishing is on the hot path, two events per step.
        # `sinks[i]` calls `_subscribed[i]`, the sink as it was subscribed.
        self._subscribed = tuple(sink for origin in sink_sets for sink in origin._sinks)
        self.sinks = tuple(map(direct_call, self._subscribed))

    async def emit(self, event_type: type[SagaEvent], *fields: Any) -> SagaEvent:
        """Create ``event_type(run_id, seq, time, *fields)``, journal it, then publish it.

        Afterwards the run's events and the journal agree (see `write`).
        """
        event = builder(event_type)(self.run_id, len(self.events), self.clock(), *fields)
        await self.record(event)
        return event

    async def record(self, event: SagaEvent) -> None:
        """Journal `event`, then publish it, whatever cancellation lands meanwhile.

        The write is shielded: the engine must know whether the journal holds an event, or it
        could roll back a run whose end is on disk, or number its next event wrongly. anyio's
        cancellation waits for the next await; a native asyncio one, which goes through shields,
        is held by the journal until the event is recorded (see `Journal.append`) and raised here
        after publishing it. A failed write (`JournalError`) publishes nothing.
        """
        if self.journal is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await self.journal.append(event)
                except anyio.get_cancelled_exc_class():
                    self.publish(event)
                    raise
        self.publish(event)

    def publish(self, event: SagaEvent) -> None:
        """Record `event` in the run and hand it to every sink (the journal must already have it)."""
        self.events.append(event)
        for sink in self.sinks:
            try:
                sink(event)
            except Exception:
                self.detach(sink, event)

    def detach(self, sink: Sink, event: SagaEvent) -> tuple[Sink, ...]:
        """Drop a sink that raised on `event`, from this run and from the sets it came from, and log it.

        Returns the sinks left, for publishers that hold them in a local.
        """
        pairs = list(zip(self.sinks, self._subscribed, strict=True))
        subscribed = next((original for call, original in pairs if call is sink), None)
        if subscribed is None:  # a second copy of a sink detached a moment ago, on this same event
            return self.sinks
        kept = [(call, original) for call, original in pairs if original is not subscribed]
        self.sinks = tuple(call for call, _ in kept)
        self._subscribed = tuple(original for _, original in kept)
        # A run calls the sinks it started with. One unsubscribed since (an `event_stream` whose
        # consumer left, closing it) or detached by another run has no error left to report here.
        listed = any(same_sink(s, subscribed) for origin in self.sink_sets for s in origin._sinks)
        for origin in self.sink_sets:
            origin.discard(subscribed)
        log = logger.exception if listed else logger.debug
        log(
            "event sink %r raised on %s and was detached; the saga goes on",
            subscribed,
            type(event).__name__,
            exc_info=True,
        )
        return self.sinks


def same_sink(a: Sink, b: Sink) -> bool:
    """Whether `a` and `b` are the same sink: the same object, or the same method of the same object.

    `obj.method` is a new bound method on every access, so identity alone would never match one;
    equality would match too much (two `EventCapture` lists holding equal events are equal).
    """
    if a is b:
        return True
    if isinstance(a, MethodType) and isinstance(b, MethodType):
        return a.__self__ is b.__self__ and a.__func__ is b.__func__
    if isinstance(a, BuiltinMethodType) and isinstance(b, BuiltinMethodType):  # `events.append`
        return a.__self__ is b.__self__ and a.__name__ == b.__name__
    return False


def direct_call(sink: Sink) -> Sink:
    """`sink`, or its class's ``__call__`` bound to it: the same call without a lookup each time.

    Calling an instance finds ``type(sink).__call__`` on every call, which costs more than a cheap
    sink's whole work (`EventCapture`'s call is ``list.append``); functions and bound methods are
    already direct.
    """
    if isinstance(sink, _DIRECT):
        return sink
    cls = type(sink)
    call = next((vars(klass)["__call__"] for klass in cls.__mro__ if "__call__" in vars(klass)), None)
    bind = getattr(call, "__get__", None)
    bound: Sink = sink if bind is None else bind(sink, cls)
    return bound


_DIRECT = (FunctionType, BuiltinFunctionType, MethodType, partial)
