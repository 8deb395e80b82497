"""Test kit for durable sagas: a world with undoable effects, steps acting on it, a journal that crashes.

`World` stands for the outside world a saga changes: every effect is keyed by the step's idempotency
key, and undoing is idempotent, so a compensation run twice across a crash changes things once.
`CrashingJournal` wraps a `SqliteJournal` and "kills the process" at the n-th event: the pending
rows are dropped, the file is closed, and every later append raises `Crash`, so no step or
compensation code runs after it, as with a real SIGKILL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.durable import SqliteJournal
from aegis_nb.saga.events import SagaEvent


class Crash(BaseException):
    """The simulated process death; a BaseException, so nothing in the engine handles it."""


@dataclass
class World:
    """Effects in the world by idempotency key; `undo_calls` counts calls, `undos` real changes."""

    live: dict[str, str] = field(default_factory=dict)
    done: Counter[str] = field(default_factory=Counter)
    undo_calls: Counter[str] = field(default_factory=Counter)
    undos: Counter[str] = field(default_factory=Counter)
    voided: set[str] = field(default_factory=set)

    def do(self, key: str, what: str) -> None:
        if key in self.voided or self.done[key]:
            return  # idempotent, and refused once undone (the in-doubt late arrival)
        self.done[key] += 1
        self.live[key] = what

    def undo(self, key: str) -> None:
        self.undo_calls[key] += 1
        if key in self.live:
            del self.live[key]
            self.undos[key] += 1
        self.voided.add(key)


class Act:
    """A step that changes the world; options make it fail, time out or refuse to be undone."""

    def __init__(
        self,
        world: World,
        name: str,
        *,
        fail: bool = False,
        hang: bool = False,
        in_doubt: bool = False,
        undo_fails: int = 0,
    ) -> None:
        self.world = world
        self.name = name
        self.fail = fail
        self.hang = hang
        self.in_doubt = in_doubt
        self.timeout = 0.05 if hang else None
        self.undo_fails = undo_fails
        self._undo_failures = Counter[str]()

    async def execute(self, ctx: AegisContext, item: str = "-") -> AegisContext:
        key = ctx.idempotency_key
        assert key is not None
        if self.in_doubt or not (self.fail or self.hang):
            self.world.do(key, f"{self.name}:{item}")  # an in-doubt effect lands even when it then fails
        if self.hang:
            await anyio.Event().wait()
        if self.fail:
            raise RuntimeError(f"{self.name} failed")
        return ctx.with_metadata({self.name: item})

    async def compensate(self, ctx: AegisContext, item: str = "-") -> None:
        key = ctx.idempotency_key
        assert key is not None
        if self._undo_failures[key] < self.undo_fails:
            self._undo_failures[key] += 1
            raise RuntimeError(f"{self.name} cannot be undone right now")
        self.world.undo(key)


class CrashingJournal:
    """A `SqliteJournal` whose process dies at event number `crash_at` (counted from 0).

    With `after_write`, the event is handed to the journal first (a synced event is then on disk; a
    ride-along one is still only queued, and lost with the process).
    """

    def __init__(self, inner: SqliteJournal, crash_at: int, *, after_write: bool = False) -> None:
        self.inner = inner
        self.crash_at = crash_at
        self.after_write = after_write
        self.count = 0
        self.crashed = False
        self.seen: list[SagaEvent] = []

    async def open_run(self, run_id: str, saga: str, specs: Sequence[StepSpec]) -> None:
        await self.inner.open_run(run_id, saga, specs)

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
