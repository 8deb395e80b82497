"""`SagaHandles`: agent sagas that span MCP calls, each reached only through a server-minted handle.

An agent's own calls become a saga: ``saga_begin`` mints a handle, each compensable call carrying it
becomes the saga's next step, ``saga_commit`` / ``saga_rollback`` end it. The protocol keeps no
session (SEP-2567), so the handle (``secrets.token_urlsafe``) is the only way in: an unknown, guessed,
stale or foreign one gets `HandleRefused`, whose text is the same for all of them and reveals nothing.

API (the server's saga tools and the gateway use only this)::

    async with SagaHandles(engine, ttl=600.0, timeout=3600.0, sinks=()) as handles:
        ticket = await handles.begin(name="agent", ttl=None, deadline_after=None,
                                     rollback_on_error=False, owner=None)    # -> SagaTicket
        done = await handles.step(ticket.handle, step, args, kwargs, owner=None)  # -> StepDone
            # the step's own exception on failure (the saga stays open unless rollback_on_error)
        state = await handles.status(ticket.handle, owner=None)             # -> SagaState
        state = await handles.commit(ticket.handle, owner=None)             # -> SagaState (final)
        state = await handles.rollback(ticket.handle, "reason", owner=None) # -> SagaState (final)
        ended = await handles.expire()       # roll back every saga idle past its TTL or past its deadline
    # leaving the block rolls back every saga still open ("the server stopped")

Each saga is a run of `engine` like any other (events to the engine's sinks and `sinks`, journal,
``aegis-nb runs``), built with the engine's dynamic API, ``async with engine.saga(...)``, which must
be entered and left in one task: so each handle is owned by an actor task in the registry's task
group, which receives step, commit and rollback requests over a memory stream and answers each.
A step a caller stopped waiting for (it was cancelled) still finishes in its actor and stays in the
saga, as the status then shows. `owner`, when given to `begin` (a transport session or an
authenticated principal), must match on every later call: a handle passed to another client is refused.
A finished saga keeps answering with its final state (the last `DEFAULT_FINISHED_KEPT` of them).

The engine calls are in `_actor` alone.
"""

from __future__ import annotations

import enum
import math
import secrets
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from aegis_nb.kernel.clock import Clock, loop_clock
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import AegisError, SagaFailed
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

DEFAULT_TTL: Final = 600.0
"""Seconds an open saga may stay idle (no call on its handle) before it is rolled back."""

DEFAULT_SAGA_TIMEOUT: Final = 3600.0
"""Seconds an agent saga may stay open at all, idle or not, before it is rolled back."""

DEFAULT_FINISHED_KEPT: Final = 1000
"""Finished sagas whose handles still answer with their final state; older ones are forgotten."""

REFUSAL: Final = "no open saga for this handle: it is unknown, expired, or not this client's"
"""The one text every refused handle gets, so that a refusal tells a guesser nothing."""

UNBOUND_UNDO: Final = "UndoNotBound"
"""Type name of the error an undo raises when its bindings did not resolve (see `UndoNotBound`)."""


class HandleRefused(AegisError):
    """A handle that opens no saga: unknown, guessed, forgotten, or another client's. Says which never."""

    def __init__(self) -> None:
        super().__init__(REFUSAL)


class NotOpen(AegisError):
    """A step, commit or rollback asked of a saga that has already ended; `state` is its final state."""

    def __init__(self, state: SagaState) -> None:
        super().__init__(f"the saga has ended: {state.phase.value}")
        self.state = state


class UndoNotBound(AegisError):
    """An undo was not called: a value it needs did not resolve from the call (the step is orphaned).

    Raised by a compensation, so that the rollback reports the step as left standing instead of undone.
    """


class Phase(enum.Enum):
    """Where an agent saga is: open, or how it ended."""

    OPEN = "open"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    STUCK = "stuck"


class StepState(enum.Enum):
    """What one step of an agent saga stands at now."""

    RUNNING = "running"
    LIVE = "live"
    """It acted, and stands (until a rollback undoes it, or a commit keeps it)."""
    FAILED = "failed"
    """Its call failed and it owes nothing (or the saga ended with nothing to undo for it)."""
    UNDONE = "undone"
    ORPHANED = "orphaned"
    """Its undo could not be called: a value the undo needs did not resolve from the call."""
    STUCK = "stuck"
    """Its undo was called and failed, every retry: its effect is left standing."""


class EndReason(enum.Enum):
    """Why a saga was rolled back other than by the agent's own ``saga_rollback``."""

    IDLE = "idle past its TTL"
    DEADLINE = "past its deadline"
    STEP_FAILED = "a step failed and the saga rolls back on error"
    STOPPED = "the server stopped"


@dataclass(frozen=True, slots=True)
class StepView:
    """One step as status reports it: flat index, name, state, and why, when it is not live."""

    index: int
    name: str
    state: StepState
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"index": self.index, "name": self.name, "state": self.state.value}
        if self.detail is not None:
            found["detail"] = self.detail
        return found


@dataclass(frozen=True, slots=True)
class SagaState:
    """A saga as its handle's holder may see it; times are seconds from when it was taken."""

    run_id: str
    name: str
    phase: Phase
    steps: tuple[StepView, ...]
    ttl: float
    idle_left: float | None
    deadline_left: float | None
    reason: str | None = None
    summary: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.phase.value,
            "run_id": self.run_id,
            "name": self.name,
            "steps": [s.to_json() for s in self.steps],
            "ttl_seconds": self.ttl,
            "idle_seconds_left": self.idle_left,
            "deadline_seconds_left": self.deadline_left,
            "reason": self.reason,
            "summary": self.summary,
        }


@dataclass(frozen=True, slots=True)
class SagaTicket:
    """What `begin` gives the agent: the handle, the TTL and the deadline (seconds from now)."""

    handle: str
    run_id: str
    ttl: float
    deadline_left: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "saga": self.handle,
            "run_id": self.run_id,
            "ttl_seconds": self.ttl,
            "deadline_seconds_left": self.deadline_left,
        }


@dataclass(frozen=True, slots=True)
class StepDone:
    """A step that ran: its flat index (its idempotency key is ``run_id/index``) and the new context."""

    index: int
    context: AegisContext


# -- requests an actor answers ---------------------------------------------------------------------


class _Reply:
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
class _Step:
    step: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    reply: _Reply


@dataclass(frozen=True, slots=True)
class _End:
    """Commit (`reason` None) or roll back for `reason`; the caller waits for the entry's end."""

    reason: str | None


@dataclass(slots=True)
class _Entry:
    """The registry's record of one handle; replaced fields only, from the actor and the registry."""

    name: str
    owner: str | None
    ttl: float
    deadline: float
    rollback_on_error: bool
    last_used: float
    send: MemoryObjectSendStream[_Step | _End]
    run_id: str = ""
    phase: Phase = Phase.OPEN
    steps: dict[int, StepView] = field(default_factory=dict)
    reason: str | None = None
    summary: str | None = None
    ending: bool = False
    ended: anyio.Event = field(default_factory=anyio.Event)


class SagaHandles:
    """The open (and recently finished) agent sagas of one server, by handle. See the module docstring."""

    def __init__(
        self,
        engine: WorkflowEngine,
        *,
        ttl: float = DEFAULT_TTL,
        timeout: float | None = DEFAULT_SAGA_TIMEOUT,
        sinks: Iterable[Sink] = (),
        clock: Clock | None = None,
        finished_kept: int = DEFAULT_FINISHED_KEPT,
    ) -> None:
        """`clock` measures idleness and deadlines (the loop's by default; a fake one in tests)."""
        self.engine = engine
        self.ttl = _positive(ttl, "ttl")
        self.timeout = None if timeout is None else _positive(timeout, "timeout")
        self.sinks = tuple(sinks)
        self._clock = clock
        self._finished_kept = finished_kept
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._tasks: TaskGroup | None = None
        self._wake = anyio.Event()

    def clock(self) -> float:
        return (self._clock or loop_clock())()

    # -- lifetime ---------------------------------------------------------------------------------

    async def __aenter__(self) -> SagaHandles:
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._reap)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        tasks, self._tasks = self._tasks, None
        assert tasks is not None
        # Open sagas are rolled back even when the server is cancelled to stop.
        with anyio.CancelScope(shield=True):
            for entry in list(self._entries.values()):
                if entry.phase is Phase.OPEN:
                    self._ask(entry, _End(EndReason.STOPPED.value))
            for entry in list(self._entries.values()):
                await entry.ended.wait()
        tasks.cancel_scope.cancel()  # the reaper
        return bool(await tasks.__aexit__(exc_type, exc, tb))

    # -- the API ----------------------------------------------------------------------------------

    async def begin(
        self,
        *,
        name: str = "agent_saga",
        ttl: float | None = None,
        deadline_after: float | None = None,
        rollback_on_error: bool = False,
        owner: str | None = None,
    ) -> SagaTicket:
        """Open a saga run and mint its handle; `ttl` and `deadline_after` (seconds) default to the
        registry's `ttl` and `timeout`."""
        if self._tasks is None:
            raise RuntimeError("SagaHandles is not running: use `async with SagaHandles(...)`")
        now = self.clock()
        ttl = self.ttl if ttl is None else _positive(ttl, "ttl")
        limit = self.timeout if deadline_after is None else _positive(deadline_after, "deadline_after")
        deadline = math.inf if limit is None else now + limit
        send, receive = anyio.create_memory_object_stream[_Step | _End](math.inf)
        entry = _Entry(name, owner, ttl, deadline, rollback_on_error, now, send)
        handle = secrets.token_urlsafe(32)
        entry.run_id = await self._tasks.start(self._actor, entry, receive)
        self._entries[handle] = entry
        self._wake.set()
        return SagaTicket(handle, entry.run_id, ttl, _left(deadline, now))

    async def step(
        self,
        handle: str,
        step: Any,
        /,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        owner: str | None = None,
    ) -> StepDone:
        """Run `step` with `args` and `kwargs` as the saga's next step; the step's own exception if it
        fails (`NotOpen` if the saga has ended). Arguments are passed as containers so that a tool
        argument can never be taken for `owner`."""
        entry = await self._open_entry(handle, owner)
        reply = _Reply()
        self._ask(entry, _Step(step, tuple(args), dict(kwargs or {}), reply))
        done: StepDone = await reply.wait()
        return done

    async def status(self, handle: str, *, owner: str | None = None) -> SagaState:
        """The saga's state now: its steps so far, each running, live, failed, undone, orphaned or stuck."""
        entry = self._entry(handle, owner)
        if entry.phase is Phase.OPEN:
            entry.last_used = self.clock()  # asking is activity: an agent that checks is not idle
            self._wake.set()
        return self._state(entry)

    async def commit(self, handle: str, *, owner: str | None = None) -> SagaState:
        """Commit the saga; a finished one answers with its final state unchanged."""
        return await self._end(handle, owner, None)

    async def rollback(self, handle: str, reason: str, *, owner: str | None = None) -> SagaState:
        """Compensate every step that stands, newest first; a finished saga answers unchanged."""
        return await self._end(handle, owner, reason)

    async def expire(self) -> tuple[SagaState, ...]:
        """Roll back every open saga idle past its TTL or past its deadline; their final states."""
        now = self.clock()
        due = [
            (entry, EndReason.DEADLINE if now >= entry.deadline else EndReason.IDLE)
            for entry in self._entries.values()
            if entry.phase is Phase.OPEN and (now >= entry.deadline or now - entry.last_used >= entry.ttl)
        ]
        for entry, why in due:
            self._ask(entry, _End(why.value))
        for entry, _ in due:
            await entry.ended.wait()
        return tuple(self._state(entry) for entry, _ in due)

    # -- inside -----------------------------------------------------------------------------------

    def _entry(self, handle: object, owner: str | None) -> _Entry:
        entry = self._entries.get(handle) if isinstance(handle, str) else None
        if entry is None or (entry.owner is not None and entry.owner != owner):
            raise HandleRefused()
        return entry

    async def _open_entry(self, handle: str, owner: str | None) -> _Entry:
        entry = self._entry(handle, owner)
        if entry.phase is not Phase.OPEN or entry.ending:
            with anyio.CancelScope(shield=True):  # an ending under way is told once it is over
                await entry.ended.wait()
            raise NotOpen(self._state(entry))
        entry.last_used = self.clock()
        self._wake.set()
        return entry

    async def _end(self, handle: str, owner: str | None, reason: str | None) -> SagaState:
        entry = self._entry(handle, owner)
        if entry.phase is Phase.OPEN:
            self._ask(entry, _End(reason))
            with anyio.CancelScope(shield=True):  # once asked, the ending is waited for, not abandoned
                await entry.ended.wait()
        return self._state(entry)

    @staticmethod
    def _ask(entry: _Entry, request: _Step | _End) -> None:
        """Queue `request` for the entry's actor; after an ending is queued, nothing else is."""
        if entry.ending:
            return
        if isinstance(request, _End):
            entry.ending = True
        entry.send.send_nowait(request)

    def _state(self, entry: _Entry) -> SagaState:
        now = self.clock()
        is_open = entry.phase is Phase.OPEN
        return SagaState(
            run_id=entry.run_id,
            name=entry.name,
            phase=entry.phase,
            steps=tuple(entry.steps[i] for i in sorted(entry.steps)),
            ttl=entry.ttl,
            idle_left=_left(entry.last_used + entry.ttl, now) if is_open else None,
            deadline_left=_left(entry.deadline, now) if is_open else None,
            reason=entry.reason,
            summary=entry.summary,
        )

    def _watcher(self, entry: _Entry) -> Callable[[SagaEvent], None]:
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
            elif (
                isinstance(event, CompensationFailed) and not event.will_retry and event.index in entry.steps
            ):
                orphaned = event.error.type == UndoNotBound.__name__
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

    async def _actor(
        self,
        entry: _Entry,
        requests: MemoryObjectReceiveStream[_Step | _End],
        *,
        task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Own one saga from begin to end: the only place that calls the engine."""
        try:
            async with requests:
                try:
                    await self._serve(entry, requests, task_status)
                except SagaFailed:
                    pass  # its ending reached the watcher as an event: the state says how it ended
                finally:
                    if entry.phase is Phase.OPEN:  # ended without an event (the engine itself failed)
                        entry.phase = Phase.STUCK
                    entry.ending = True
                    entry.send.close()
                    # Steps asked for after the ending was decided never run: they are told so.
                    late = NotOpen(self._state(entry))
                    while True:
                        try:
                            request = requests.receive_nowait()
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                        if isinstance(request, _Step):
                            request.reply.give(error=late)
        finally:
            entry.ended.set()
            self._forget_finished()

    async def _serve(
        self,
        entry: _Entry,
        requests: MemoryObjectReceiveStream[_Step | _End],
        task_status: TaskStatus[str],
    ) -> None:
        ctx = AegisContext(deadline=_loop_deadline(entry.deadline, self.clock()))
        sinks = (*self.sinks, self._watcher(entry))
        reason: str | None = EndReason.STOPPED.value  # if the stream ends: the registry is closing
        # With rollback_on_error, the failed step's caller is answered once the rollback is over,
        # so that what it asks next sees the saga ended.
        failed: tuple[_Reply, Exception] | None = None
        async with self.engine.saga(ctx, name=entry.name, sinks=sinks) as saga:
            task_status.started(saga.run_id)
            async for request in requests:
                if isinstance(request, _End):
                    reason = request.reason
                    break
                try:
                    new = await saga.step(request.step, *request.args, **request.kwargs)
                except Exception as exc:
                    if not entry.rollback_on_error:
                        request.reply.give(error=exc)
                        continue
                    entry.ending = True
                    reason, failed = EndReason.STEP_FAILED.value, (request.reply, exc)
                    break
                index = new.step_index if new.step_index is not None else -1
                request.reply.give(StepDone(index, new))
            entry.ending = True
            try:
                with anyio.CancelScope(shield=True):
                    if reason is None:
                        await saga.commit()
                    else:
                        entry.reason = reason
                        await saga.rollback(reason)
            finally:
                if failed is not None:
                    failed[0].give(error=failed[1])

    def _forget_finished(self) -> None:
        finished = [h for h, e in self._entries.items() if e.phase is not Phase.OPEN]
        for handle in finished[: max(len(finished) - self._finished_kept, 0)]:
            del self._entries[handle]

    async def _reap(self) -> None:
        """Roll sagas back when they are due: wakes at the next TTL or deadline, or when one changes."""
        while True:
            self._wake = anyio.Event()
            open_entries = [e for e in self._entries.values() if e.phase is Phase.OPEN]
            due = min(
                (min(e.last_used + e.ttl, e.deadline) for e in open_entries),
                default=math.inf,
            )
            with anyio.move_on_after(max(due - self.clock(), 0.0)):
                await self._wake.wait()
            await self.expire()


_PHASES: Final = {
    SagaStatus.COMMITTED: Phase.COMMITTED,
    SagaStatus.ROLLED_BACK: Phase.ROLLED_BACK,
    SagaStatus.STUCK: Phase.STUCK,
}


def _positive(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{what} must be a number of seconds > 0, got {value!r}")
    return float(value)


def _left(deadline: float, now: float) -> float | None:
    """Seconds to `deadline`, to the millisecond (what an agent reads), None for none."""
    return None if deadline == math.inf else round(max(deadline - now, 0.0), 3)


def _loop_deadline(deadline: float, now: float) -> float:
    """The saga's deadline on the event loop's clock, which the engine enforces (`now` is our clock's)."""
    return math.inf if deadline == math.inf else anyio.current_time() + (deadline - now)
