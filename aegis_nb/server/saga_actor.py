"""The task that owns one agent saga: the only code that calls the engine for it.

``async with engine.saga(...)`` must be entered and left in one task, so each handle's saga is held
by an actor task (`run_actor`) in the registry's task group, which receives step, commit and
rollback requests over a memory stream and answers each (aegis_nb.server.saga_handles).

An ending the clock decided (idle past the TTL, past the deadline), or the server's stop, is not
held up by a call: the registry cancels the call running then (`Entry.cut`), whose step is then in
doubt (compensated if it is an in-doubt step), and steps still queued never run. Their callers are
answered once the saga has ended, with `Unserved`, so that what they ask next sees the saga ended.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from aegis_nb.kernel.clock import Clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaFailed
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationSucceeded,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)
from aegis_nb.saga.sinks import Sink
from aegis_nb.server.saga_state import EndReason, Phase, StepDone, StepState, StepView

UNBOUND_UNDO: Final = "UndoNotBound"
"""Type name of the error an undo raises when its bindings did not resolve (see `UndoNotBound`)."""


class Unserved(enum.Enum):
    """What a step's caller is answered when its step did not run to its end in an open saga."""

    NOT_RUN = "not run"
    """Asked after the saga's ending was decided: it never ran."""
    CUT_OFF = "cut off"
    """Running when the clock ended the saga: cancelled (or, if it finished, undone with the rest)."""


class Reply:
    """One answer from an actor to one waiting caller: a value or an exception, set once."""

    __slots__ = ("_done", "error", "value")

    def __init__(self) -> None:
        self._done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def give(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self._done.set()

    async def wait(self) -> Any:
        await self._done.wait()
        if self.error is not None:
            raise self.error
        return self.value


@dataclass(frozen=True, slots=True)
class StepRequest:
    step: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    reply: Reply


@dataclass(frozen=True, slots=True)
class EndRequest:
    """Commit (`reason` None) or roll back for `reason`; the caller waits for the entry's end."""

    reason: str | None


Request = StepRequest | EndRequest


@dataclass(slots=True)
class Entry:
    """The registry's record of one handle; fields replaced by the actor and the registry only."""

    name: str
    owner: str | None
    ttl: float
    deadline: float
    rollback_on_error: bool
    last_used: float
    send: MemoryObjectSendStream[Request]
    run_id: str = ""
    phase: Phase = Phase.OPEN
    steps: dict[int, StepView] = field(default_factory=dict)
    reason: str | None = None
    summary: str | None = None
    ending: bool = False
    """An ending is asked for (or under way): nothing else is queued."""
    cut: bool = False
    """The clock (or the server's stop) ended it: the running call is cancelled, queued steps never run."""
    call: anyio.CancelScope | None = None
    """The scope of the step running now, if any."""
    ended: anyio.Event = field(default_factory=anyio.Event)

    def ask(self, request: Request) -> None:
        """Queue `request` for the actor; after an ending is queued, nothing else is."""
        if self.ending:
            return
        if isinstance(request, EndRequest):
            self.ending = True
        self.send.send_nowait(request)

    def was_cut(self) -> bool:
        """Whether the clock has ended it (read anew each time: it changes while a call runs)."""
        return self.cut

    def cut_off(self, why: EndReason) -> None:
        """End it for `why` now: roll back, cancelling the call it runs instead of waiting for it."""
        self.ask(EndRequest(why.value))
        self.cut = True
        if self.call is not None:
            self.call.cancel()


async def run_actor(
    engine: WorkflowEngine,
    entry: Entry,
    requests: MemoryObjectReceiveStream[Request],
    sinks: Iterable[Sink],
    clock: Clock,
    on_end: Callable[[], None],
    *,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Own one saga from begin to end; `clock` is the registry's, `on_end` is told once it has ended."""
    try:
        async with requests:
            try:
                await _serve(engine, entry, requests, (*sinks, _watcher(entry)), clock, task_status)
            except SagaFailed:
                pass  # its ending reached the watcher as an event: the state says how it ended
            finally:
                if entry.phase is Phase.OPEN:  # ended without an event (the engine itself failed)
                    entry.phase = Phase.STUCK
                entry.ending = True
                entry.send.close()
                # Steps asked for after the ending was decided never run: they are told so.
                while True:
                    try:
                        request = requests.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    if isinstance(request, StepRequest):
                        request.reply.give(Unserved.NOT_RUN)
    finally:
        entry.ended.set()
        on_end()


async def _serve(
    engine: WorkflowEngine,
    entry: Entry,
    requests: MemoryObjectReceiveStream[Request],
    sinks: tuple[Sink, ...],
    clock: Clock,
    task_status: TaskStatus[str],
) -> None:
    ctx = AegisContext(deadline=_loop_deadline(entry.deadline, clock()))
    reason: str | None = EndReason.STOPPED.value  # if the stream ends: the registry is closing
    # Answered once the saga has ended, so that what their callers ask next sees it ended.
    held: list[tuple[Reply, Unserved | Exception]] = []
    async with engine.saga(ctx, name=entry.name, sinks=sinks) as saga:
        task_status.started(saga.run_id)
        try:
            async for request in requests:
                if isinstance(request, EndRequest):
                    reason = request.reason
                    break
                if entry.was_cut():
                    held.append((request.reply, Unserved.NOT_RUN))
                    continue
                outcome: StepDone | Exception | None = None
                with anyio.CancelScope() as entry.call:
                    try:
                        new = await saga.step(request.step, *request.args, **request.kwargs)
                        index = new.step_index if new.step_index is not None else -1
                        outcome = StepDone(index, new)
                    except Exception as exc:
                        outcome = exc
                entry.call = None
                entry.last_used = clock()  # the end of a call is activity too
                if entry.was_cut():  # cancelled, or finished only to be undone with the rest
                    held.append((request.reply, Unserved.CUT_OFF))
                elif isinstance(outcome, StepDone):
                    request.reply.give(outcome)
                elif isinstance(outcome, Exception) and entry.rollback_on_error:
                    entry.ending = True
                    reason = EndReason.STEP_FAILED.value
                    held.append((request.reply, outcome))
                    break
                else:
                    request.reply.give(error=outcome)
            entry.ending = True
            with anyio.CancelScope(shield=True):
                if reason is None:
                    await saga.commit()
                else:
                    entry.reason = reason
                    await saga.rollback(reason)
        finally:
            for reply, answer in held:
                if isinstance(answer, Unserved):
                    reply.give(answer)
                else:
                    reply.give(error=answer)


def _watcher(entry: Entry) -> Callable[[SagaEvent], None]:
    """A sink keeping `entry`'s step views and phase in step with the run's events."""

    def watch(event: SagaEvent) -> None:
        if isinstance(event, StepStarted):
            entry.steps[event.index] = StepView(event.index, event.step, StepState.RUNNING)
        elif isinstance(event, StepSucceeded):
            entry.steps[event.index] = StepView(event.index, event.step, StepState.LIVE)
        elif isinstance(event, StepFailed | StepTimedOut):
            detail = f"{event.error.type}: {event.error.message}"
            entry.steps[event.index] = StepView(event.index, event.step, StepState.FAILED, detail)
        elif isinstance(event, CompensationSucceeded) and event.index in entry.steps:
            entry.steps[event.index] = replace(
                entry.steps[event.index],
                state=StepState.UNDONE,
                detail="nothing to undo" if event.nothing_to_undo else None,
            )
        elif isinstance(event, CompensationFailed) and not event.will_retry and event.index in entry.steps:
            orphaned = event.error.type == UNBOUND_UNDO
            entry.steps[event.index] = replace(
                entry.steps.get(event.index) or StepView(event.index, event.step, StepState.LIVE),
                state=StepState.ORPHANED if orphaned else StepState.STUCK,
                detail=event.error.message if orphaned else f"{event.error.type}: {event.error.message}",
            )
        elif isinstance(event, SagaCommitted | SagaRolledBackEvent | SagaStuck):
            entry.phase = _PHASES[event.status]
            if not isinstance(event, SagaCommitted):
                entry.summary = event.report.summary()

    return watch


_PHASES: Final = {
    SagaStatus.COMMITTED: Phase.COMMITTED,
    SagaStatus.ROLLED_BACK: Phase.ROLLED_BACK,
    SagaStatus.STUCK: Phase.STUCK,
}


def _loop_deadline(deadline: float, now: float) -> float:
    """The saga's deadline on the event loop's clock, which the engine enforces (`now` is our clock's)."""
    return math.inf if deadline == math.inf else anyio.current_time() + (deadline - now)
