"""`RunRecorder`: numbers, timestamps, journals and publishes one run's events.

The journal is written first, so a sink (a widget, a progress reporter) never shows a transition
that a crash could forget. A sink that raises is detached and logged; it never breaks the saga.
"""

from __future__ import annotations

import dataclasses
import logging

import anyio

from aegis_nb.kernel.clock import Clock
from aegis_nb.kernel.shielding import run_shielded
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.journal import Journal
from aegis_nb.saga.sinks import Sink, SinkSet, direct_call, same_sink

logger = logging.getLogger("aegis_nb.saga")


class RunRecorder:
    """Builds each event with the run id, the next sequence number and the clock time."""

    __slots__ = ("_subscribed", "_writing", "clock", "events", "journal", "run_id", "sink_sets", "sinks")

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
        self._subscribed = tuple(sink for origin in sink_sets for sink in origin.sinks)
        self.sinks = tuple(map(direct_call, self._subscribed))
        # A parallel group's members record concurrently, each event numbered when it was built: one
        # journal write at a time, each renumbered next, or two would take one sequence number.
        self._writing = anyio.Lock() if journal is not None else None

    def header(self, time: float | None = None) -> tuple[str, int, float]:
        """The run id, sequence number and time (now, unless given) of the run's next event, the
        fields every event starts with: ``recorder.record(StepStarted(*recorder.header(), ...))``."""
        return self.run_id, len(self.events), self.clock() if time is None else time

    async def record(self, event: SagaEvent) -> None:
        """Journal `event`, then publish it, whatever cancellation lands meanwhile.

        The write is shielded: the engine must know whether the journal holds an event, or it
        could roll back a run whose end is on disk, or number its next event wrongly. anyio's
        cancellation waits for the next await; a native asyncio one, which goes through shields,
        is held by the journal until the event is recorded (see `Journal.append`) and raised here
        after publishing it. A failed write (`JournalError`) publishes nothing.
        """
        writing = self._writing
        if writing is None:
            self.publish(event)
        elif writing.locked():  # a group member's write is in flight: wait for it as for a write
            await run_shielded(self._record_in_turn(writing, event))
        else:
            writing.acquire_nowait()  # no await before the write: no cancellation lands in between
            try:
                await self._write(event)
            finally:
                writing.release()

    async def _record_in_turn(self, writing: anyio.Lock, event: SagaEvent) -> None:
        async with writing:
            await self._write(event)

    async def _write(self, event: SagaEvent) -> None:
        """Journal `event` (numbered after the events recorded so far), then publish it."""
        assert self.journal is not None
        if event.seq != len(self.events):  # built while a sibling's event was being written
            event = dataclasses.replace(event, seq=len(self.events))
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
        listed = any(same_sink(s, subscribed) for origin in self.sink_sets for s in origin.sinks)
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
