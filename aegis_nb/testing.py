"""Test kit for your own steps and sagas: capture events, record calls, crash a journal on purpose.

- `EventCapture`, a sink keeping a run's events, and `outline`, which makes them readable tuples;
- `CallLog` and `RecordingStep`, a step that logs every call with the context it was given, and fails,
  hangs or refuses to be undone on request, to check what your rollback gives each compensation;
- `CrashingJournal`, a durable journal whose "process" dies at a chosen event (raising `Crash`), to
  check what `WorkflowEngine.recover()` makes of every crash window.

It imports only the saga layer, and nothing happens at import (the SQLite journal loads when built).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Protocol

import anyio
import anyio.lowlevel

from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.events import EventBase, SagaEvent, StepEvent
from aegis_nb.saga.journal import Journal
from aegis_nb.saga.retry import RetryPolicy

if TYPE_CHECKING:
    from aegis_nb.saga.definition import StepSpec

__all__ = [
    "Call",
    "CallLog",
    "Crash",
    "CrashableJournal",
    "CrashingJournal",
    "EventCapture",
    "InjectedFailure",
    "Method",
    "RecordingStep",
    "outline",
]


class EventCapture(list[SagaEvent]):
    """A sink that keeps every event it is given, in order: a list you can call.

    Calling it is the list's own append, so capturing adds next to nothing to what a run costs.
    """

    __slots__ = ()
    __call__ = list.append

    @property
    def events(self) -> list[SagaEvent]:
        """The events so far (the capture itself)."""
        return self

    def trail(self) -> list[tuple[str, ...]]:
        """Events as ``(EventName,)`` or ``(EventName, step)`` tuples: whole sequences, easy to assert."""
        return [outline(e) for e in self.events]


def outline(event: EventBase) -> tuple[str, ...]:
    """``("StepFailed", "ChargeCard")``-style summary of one event."""
    if isinstance(event, StepEvent):
        return (type(event).__name__, event.step)
    return (type(event).__name__,)


# -- recording steps ----------------------------------------------------------------------------------


class Method(enum.StrEnum):
    """Which of a step's two methods was called."""

    EXECUTE = "execute"
    COMPENSATE = "compensate"


class Call(NamedTuple):
    """One call of a step: the method, the step's name, and the context the engine passed it."""

    method: str
    step: str
    context: AegisContext


@dataclass
class CallLog:
    """Every call of the steps that share this log, in order, with the context each was given.

    `log` holds `Call`s (or plain ``(method, step, context)`` tuples, which a step of yours may append).
    """

    log: list[tuple[str, str, AegisContext]] = field(default_factory=list)

    def record(self, method: Method, step: str, context: AegisContext) -> None:
        """Log one call (what `RecordingStep` does on entering each method)."""
        self.log.append(Call(str(method), step, context))

    def trail(self) -> list[tuple[str, str]]:
        """The calls as ``(method, step)`` pairs: ``[("execute", "flight"), ("compensate", "flight")]``."""
        return [(method, step) for method, step, _ in self.log]

    def contexts(self, method: str, step: str) -> list[AegisContext]:
        """The contexts `step`'s `method` was called with, in order (one per call)."""
        return [ctx for m, s, ctx in self.log if (m, s) == (method, step)]


class InjectedFailure(Exception):
    """The failure a `RecordingStep` raises when told to: from execute (`fail`) or compensate."""


class RecordingStep:
    """A step that records every call in a `CallLog` and stores ``{name}_id`` in the metadata.

    Its execute returns the context with ``{name}_id = "{NAME}-{step index}"``, so each compensation's
    context shows which step's output it was given. Options: `fail` makes execute raise `failure`
    with that message; `hang` makes it wait forever (for deadlines and cancellation); `on_execute` is
    called as execute starts; `compensation_failures` makes the first N compensations raise;
    `compensation_hangs` makes the first N wait forever, ignoring their deadline (only the engine's
    backstop ends them). `in_doubt`, `retry` (its `compensation_retry`) and `timeout` are the step
    options the engine reads. Every call awaits one checkpoint, where a cancellation can land.
    """

    failure: ClassVar[type[Exception]] = InjectedFailure
    """The exception `fail` and the failing compensations raise; a subclass may set its own."""

    def __init__(
        self,
        name: str,
        calls: CallLog,
        *,
        fail: str | None = None,
        hang: bool = False,
        on_execute: Callable[[], None] | None = None,
        compensation_failures: int = 0,
        compensation_hangs: int = 0,
        in_doubt: bool = False,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
    ) -> None:
        self.name = name
        self.calls = calls
        self.fail = fail
        self.hang = hang
        self.on_execute = on_execute
        self.compensation_failures = compensation_failures
        self.compensation_hangs = compensation_hangs
        self.in_doubt = in_doubt
        self.compensation_retry = retry
        self.timeout = timeout

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.record(Method.EXECUTE, self.name, ctx)
        if self.on_execute is not None:
            self.on_execute()
        await anyio.lowlevel.checkpoint()
        if self.hang:
            await anyio.sleep_forever()
        if self.fail is not None:
            raise self.failure(self.fail)
        return ctx.with_metadata({f"{self.name}_id": f"{self.name.upper()}-{ctx.step_index}"})

    async def compensate(self, ctx: AegisContext) -> None:
        self.calls.record(Method.COMPENSATE, self.name, ctx)
        await anyio.lowlevel.checkpoint()
        if self.compensation_hangs > 0:
            self.compensation_hangs -= 1
            await anyio.sleep_forever()
        if self.compensation_failures > 0:
            self.compensation_failures -= 1
            raise self.failure(f"{self.name} cannot be undone yet")


# -- a journal that crashes -------------------------------------------------------------------------


class Crash(BaseException):
    """The simulated process death; a BaseException, so nothing in the engine handles it."""


class CrashableJournal(Journal, Protocol):
    """A journal that can drop what it has not written and close, as a killed process would, or close
    properly (`aclose`) when the run ended before the crash point."""

    def abandon(self) -> None: ...

    async def aclose(self) -> None: ...


class CrashingJournal:
    """Wraps a durable journal (a `SqliteJournal`) whose process dies at event number `crash_at` (from 0).

    At that event the pending writes are dropped, the file is closed (``inner.abandon()``), and `Crash`
    is raised, as is every later append: no step or compensation code runs after it, as with a real
    SIGKILL. Open the same file again with a fresh journal and `recover()` to see what recovery does.
    With `after_write`, the event is handed to the journal first (a synced event is then on disk; a
    ride-along one is still only queued, and lost with the process). `seen` holds the events written
    before the crash; `count` the events offered so far, and `crashed` whether it has crashed.
    """

    def __init__(self, inner: CrashableJournal, crash_at: int, *, after_write: bool = False) -> None:
        self.inner = inner
        self.crash_at = crash_at
        self.after_write = after_write
        self.count = 0
        self.crashed = False
        self.seen: list[SagaEvent] = []

    async def open_run(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        await self.inner.open_run(run_id, saga, specs)

    async def add_steps(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        if self.crashed:
            raise Crash
        await self.inner.add_steps(run_id, saga, specs)

    def close_run(self, run_id: str) -> None:
        self.inner.close_run(run_id)

    async def append(self, event: SagaEvent) -> None:
        if self.crashed:
            raise Crash
        number, self.count = self.count, self.count + 1
        if number == self.crash_at:
            if self.after_write:
                await self.inner.append(event)
            self.crashed = True
            self.inner.abandon()
            raise Crash
        await self.inner.append(event)
        self.seen.append(event)
