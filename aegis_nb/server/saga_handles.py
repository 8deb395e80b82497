"""`SagaHandles`: agent sagas that span MCP calls, each reached only through a server-minted handle.

An agent's own calls become a saga: ``saga_begin`` mints a handle, each compensable call carrying it
becomes the saga's next step, ``saga_commit`` / ``saga_rollback`` end it. The protocol keeps no
session (SEP-2567), so the handle (``secrets.token_urlsafe``) is the way in: an unknown, guessed,
stale or foreign one gets `HandleRefused`, whose text is the same for all of them and reveals nothing.

API (the server's saga tools and the gateway use only this)::

    async with SagaHandles(engine, ttl=600.0, timeout=3600.0, sinks=(),
                           max_open=1000, max_open_per_caller=32) as handles:
        ticket = await handles.begin(name="agent", ttl=None, deadline_after=None,
                                     rollback_on_error=False, owner=None)    # -> SagaTicket
        done = await handles.step(ticket.handle, step, args, kwargs, owner=None)  # -> StepDone
            # the step's own exception on failure (the saga stays open unless rollback_on_error)
        state = await handles.status(ticket.handle, owner=None)             # -> SagaState
        state = await handles.commit(ticket.handle, owner=None)             # -> SagaState (final)
        state = await handles.rollback(ticket.handle, "reason", owner=None) # -> SagaState (final)
        ended = await handles.expire()       # roll back every saga idle past its TTL or past its deadline
    # leaving the block rolls back every saga still open ("the server stopped"), cancelling their calls

Each saga is a run of `engine` like any other (events to the engine's sinks and `sinks`, journal,
``aegis-nb runs``), owned by an actor task (aegis_nb.server.saga_actor). A step a caller stopped
waiting for (it was cancelled) still finishes in its actor and stays in the saga, as the status then
shows. `owner`, given to `begin` (the caller's identity: aegis_nb.server.callers), must match on
every later call: a handle passed to another client is refused. A finished saga keeps answering
with its final state (the last `DEFAULT_FINISHED_KEPT` of them).

Limits are the server's, never the client's: a `ttl` or `deadline_after` asked of `begin` may be
shorter than the registry's, never longer (a longer one is refused, not clamped: an agent told "600 s"
when it asked for a day would plan on time it does not have, and most agents never read the answer's
numbers back), and not NaN, infinite, zero or negative. At most `max_open` sagas are open at once,
and `max_open_per_caller` for one owner (callers with no identity share only the overall limit).
Expiry never waits: a saga the clock ends while a call runs has that call cancelled (its step is in
doubt, compensated if it is an in-doubt step), and no saga's ending waits for another's.
"""

from __future__ import annotations

import math
import secrets
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup

from aegis_nb.kernel.clock import Clock, loop_clock
from aegis_nb.kernel.errors import AegisError
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.sinks import Sink
from aegis_nb.server.saga_actor import (
    UNBOUND_UNDO,
    EndRequest,
    Entry,
    Reply,
    StepRequest,
    Unserved,
    run_actor,
)
from aegis_nb.server.saga_state import (
    EndReason,
    Phase,
    SagaState,
    SagaTicket,
    StepDone,
    StepState,
    StepView,
)

__all__ = [
    "DEFAULT_FINISHED_KEPT",
    "DEFAULT_MAX_OPEN",
    "DEFAULT_MAX_OPEN_PER_CALLER",
    "DEFAULT_SAGA_TIMEOUT",
    "DEFAULT_TTL",
    "REFUSAL",
    "UNBOUND_UNDO",
    "EndReason",
    "HandleRefused",
    "NotOpen",
    "Phase",
    "SagaHandles",
    "SagaLimitReached",
    "SagaState",
    "SagaTicket",
    "StepDone",
    "StepState",
    "StepView",
    "UndoNotBound",
]

DEFAULT_TTL: Final = 600.0
"""Seconds an open saga may stay idle (no call on its handle) before it is rolled back."""

DEFAULT_SAGA_TIMEOUT: Final = 3600.0
"""Seconds an agent saga may stay open at all, idle or not, before it is rolled back."""

DEFAULT_FINISHED_KEPT: Final = 1000
"""Finished sagas whose handles still answer with their final state; older ones are forgotten."""

DEFAULT_MAX_OPEN: Final = 1000
"""Sagas open at once on one server: each holds a task and its steps' contexts (~13 KiB bare)."""

DEFAULT_MAX_OPEN_PER_CALLER: Final = 32
"""Sagas one caller may hold open at once: an agent needs a few; more is a leak or an attack."""

REFUSAL: Final = "no open saga for this handle: it is unknown, expired, or not this client's"
"""The one text every refused handle gets, so that a refusal tells a guesser nothing."""


class HandleRefused(AegisError):
    """A handle that opens no saga: unknown, guessed, forgotten, or another client's. Says which never."""

    def __init__(self) -> None:
        super().__init__(REFUSAL)


class NotOpen(AegisError):
    """A step, commit or rollback asked of a saga that has already ended; `state` is its final state.

    `cut_off`: the step was running when the clock ended the saga, and was cancelled (it may have
    acted first: the state says whether its effect was undone); otherwise it never ran.
    """

    def __init__(self, state: SagaState, *, cut_off: bool = False) -> None:
        said = "the saga ended while the call ran" if cut_off else "the saga has ended"
        super().__init__(f"{said}: {state.phase.value}")
        self.state = state
        self.cut_off = cut_off


class SagaLimitReached(AegisError):
    """``saga_begin`` refused: the caller, or the server, has as many sagas open as it may."""


class UndoNotBound(AegisError):
    """An undo was not called: a value it needs did not resolve from the call (the step is orphaned).

    Raised by a compensation, so that the rollback reports the step as left standing instead of undone.
    """


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
        max_open: int = DEFAULT_MAX_OPEN,
        max_open_per_caller: int = DEFAULT_MAX_OPEN_PER_CALLER,
    ) -> None:
        """`clock` measures idleness and deadlines (the loop's by default; a fake one in tests)."""
        self.engine = engine
        self.ttl = _seconds(ttl, "ttl")
        self.timeout = None if timeout is None else _seconds(timeout, "timeout")
        self.max_open = _count(max_open, "max_open")
        self.max_open_per_caller = _count(max_open_per_caller, "max_open_per_caller")
        self.sinks = tuple(sinks)
        self._clock = clock
        self._finished_kept = finished_kept
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._opening: Counter[str | None] = Counter()  # begins under way, by owner
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
        # Open sagas are rolled back even when the server is cancelled to stop, and a call one
        # makes is cancelled rather than waited for: a hung upstream must not hold the stop forever.
        with anyio.CancelScope(shield=True):
            for entry in list(self._entries.values()):
                if entry.phase is Phase.OPEN:
                    entry.cut_off(EndReason.STOPPED)
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
        registry's `ttl` and `timeout`, and may not exceed them (`ValueError`). `SagaLimitReached`
        when `owner`, or the server, has as many sagas open as it may."""
        if self._tasks is None:
            raise RuntimeError("SagaHandles is not running: use `async with SagaHandles(...)`")
        ttl = self.ttl if ttl is None else _seconds(ttl, "ttl", self.ttl)
        limit = self.timeout if deadline_after is None else _seconds(deadline_after, "deadline", self.timeout)
        self._check_room(owner)
        now = self.clock()
        deadline = math.inf if limit is None else now + limit
        send, receive = anyio.create_memory_object_stream[StepRequest | EndRequest](math.inf)
        entry = Entry(name, owner, ttl, deadline, rollback_on_error, now, send)
        handle = secrets.token_urlsafe(32)
        self._opening[owner] += 1  # held while the actor starts, so that no concurrent begin overtakes
        try:
            entry.run_id = await self._tasks.start(
                run_actor, self.engine, entry, receive, self.sinks, self.clock, self._forget_finished
            )
        finally:
            self._opening[owner] -= 1
            if not self._opening[owner]:
                del self._opening[owner]
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
        fails; `NotOpen` if the saga has ended, or ended while the step ran (``cut_off``). Arguments
        are passed as containers so that a tool argument can never be taken for `owner`."""
        entry = await self._open_entry(handle, owner)
        reply = Reply()
        entry.ask(StepRequest(step, tuple(args), dict(kwargs or {}), reply))
        answer = await reply.wait()
        if isinstance(answer, Unserved):
            with anyio.CancelScope(shield=True):  # told once the ending is over
                await entry.ended.wait()
            raise NotOpen(self._state(entry), cut_off=answer is Unserved.CUT_OFF)
        done: StepDone = answer
        return done

    async def status(self, handle: str, *, owner: str | None = None) -> SagaState:
        """The saga's state now: its steps so far, each running, live, failed, undone, orphaned or stuck."""
        entry = self._entry(handle, owner)
        if entry.phase is Phase.OPEN:
            entry.last_used = self.clock()  # asking is activity: an agent that checks is not idle
            self._wake.set()
        return self._state(entry)

    async def commit(self, handle: str, *, owner: str | None = None) -> SagaState:
        """Commit the saga; a finished one answers with its final state unchanged (read its phase:
        a commit that lost to a rollback or the TTL answers ``rolled_back``)."""
        return await self._end(handle, owner, None)

    async def rollback(self, handle: str, reason: str, *, owner: str | None = None) -> SagaState:
        """Compensate every step that stands, newest first; a finished saga answers unchanged."""
        return await self._end(handle, owner, reason)

    async def expire(self) -> tuple[SagaState, ...]:
        """Roll back every open saga idle past its TTL or past its deadline; their final states.

        Every due saga is ended at once, its running call cancelled: none waits for another.
        """
        due = self._cut_due()
        for entry in due:
            await entry.ended.wait()
        return tuple(self._state(entry) for entry in due)

    # -- inside -----------------------------------------------------------------------------------

    def _entry(self, handle: object, owner: str | None) -> Entry:
        entry = self._entries.get(handle) if isinstance(handle, str) else None
        if entry is None or (entry.owner is not None and entry.owner != owner):
            raise HandleRefused()
        return entry

    async def _open_entry(self, handle: str, owner: str | None) -> Entry:
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
            entry.ask(EndRequest(reason))
            with anyio.CancelScope(shield=True):  # once asked, the ending is waited for, not abandoned
                await entry.ended.wait()
        return self._state(entry)

    def _check_room(self, owner: str | None) -> None:
        """`SagaLimitReached` unless `owner` and the server may open one more saga."""
        held = Counter(entry.owner for entry in self._entries.values() if entry.phase is Phase.OPEN)
        held.update(self._opening)
        if held.total() >= self.max_open:
            raise SagaLimitReached(
                f"the server has {self.max_open} sagas open, as many as it allows: "
                "commit or roll back one first, or try again later"
            )
        if owner is not None and held[owner] >= self.max_open_per_caller:
            raise SagaLimitReached(
                f"this client has {self.max_open_per_caller} sagas open, as many as the server allows "
                "one client: commit or roll back one first"
            )

    def _cut_due(self) -> list[Entry]:
        """End every open saga the clock says is due, for why it is due, without waiting for any."""
        now = self.clock()
        due: list[Entry] = []
        for entry in list(self._entries.values()):
            if entry.phase is not Phase.OPEN or entry.ending:
                continue
            if now >= entry.deadline:
                entry.cut_off(EndReason.DEADLINE)
            elif now - entry.last_used >= entry.ttl:
                entry.cut_off(EndReason.IDLE)
            else:
                continue
            due.append(entry)
        return due

    def _state(self, entry: Entry) -> SagaState:
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

    def _forget_finished(self) -> None:
        finished = [h for h, e in self._entries.items() if e.phase is not Phase.OPEN]
        for handle in finished[: max(len(finished) - self._finished_kept, 0)]:
            del self._entries[handle]

    async def _reap(self) -> None:
        """End sagas when they are due, never waiting for one to end: wakes at the next TTL or
        deadline, or when one changes."""
        while True:
            self._wake = anyio.Event()
            waiting = [e for e in self._entries.values() if e.phase is Phase.OPEN and not e.ending]
            due = min((min(e.last_used + e.ttl, e.deadline) for e in waiting), default=math.inf)
            with anyio.move_on_after(max(due - self.clock(), 0.0)):
                await self._wake.wait()
            self._cut_due()


def _seconds(value: float, what: str, most: float | None = None) -> float:
    """`value` as seconds: a finite number > 0, and at most `most` (None: no upper limit)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a finite number of seconds > 0, got {value!r}")
    if most is not None and value > most:
        raise ValueError(f"{what} may be at most the server's {most:g} seconds, got {value!r}")
    return float(value)


def _count(value: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {value!r}")
    return value


def _left(deadline: float, now: float) -> float | None:
    """Seconds to `deadline`, to the millisecond (what an agent reads), None for none."""
    return None if deadline == math.inf else round(max(deadline - now, 0.0), 3)
