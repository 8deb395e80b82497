"""Test kit for durable sagas: a world with undoable effects, steps acting on it, a journal that crashes.

`World` stands for the outside world a saga changes: every effect is keyed by the step's idempotency
key, and undoing is idempotent, so a compensation run twice across a crash changes things once.
`CrashingJournal` and `Crash` are `aegis_nb.testing`'s, re-exported: a `SqliteJournal` that "kills the
process" at the n-th event, so no step or compensation code runs after it, as with a real SIGKILL.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.testing import Crash, CrashingJournal

__all__ = ["Act", "Crash", "CrashingJournal", "World"]


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
