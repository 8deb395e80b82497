"""An upstream's answer is held for the caller that waits for it, and no longer: a caller cancelled
after the upstream acted (it disconnected, or gave up) leaves nothing behind, while its step stays
in the saga and is undone or kept with it."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer

from aegis_nb.gateway import Gateway, parse_policy
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent, StepSucceeded

pytestmark = pytest.mark.anyio

POLICY = """\
[upstreams.store]
command = "unused-in-process"

[tools.book]
kind = "compensable"
undo = "unbook"
undo_args = { id = "/result/id" }
"""

ANSWER_BYTES = 100_000
"""Each answer carries this much text (twice: structured, and as the text block that repeats it)."""


class Store:
    """An upstream whose `book` acts, says so, then answers only when the test lets it."""

    def __init__(self) -> None:
        self.booked: list[str] = []
        self.acted = anyio.Event()
        self.release = anyio.Event()
        self.server: MCPServer[Any] = MCPServer("store")

        @self.server.tool()
        async def book(item: str) -> dict[str, str]:
            """Book `item`."""
            self.booked.append(item)
            self.acted.set()
            await self.release.wait()
            return {"id": f"B-{len(self.booked)}", "receipt": "x" * ANSWER_BYTES}

        @self.server.tool()
        async def unbook(id: str) -> dict[str, bool]:
            """Undo a booking (never called here: the saga commits)."""
            return {"changed": True}


class Succeeded:
    """A sink that lets the test wait for the n-th step to have succeeded."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = anyio.Event()

    def __call__(self, event: SagaEvent) -> None:
        if isinstance(event, StepSucceeded):
            self.count += 1
            self.changed.set()

    async def wait_for(self, count: int) -> None:
        while self.count < count:
            self.changed = anyio.Event()
            await self.changed.wait()


def held_bytes() -> int:
    gc.collect()
    return sum(stat.size for stat in tracemalloc.take_snapshot().statistics("filename"))


async def abandon(gateway: Gateway, store: Store, saga: str, item: str) -> None:
    """Call `book` in the saga and leave once the upstream has acted, before it answers."""
    store.acted, store.release = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(gateway.call_tool, "book", {"item": item, "saga": saga})
        await store.acted.wait()
        tasks.cancel_scope.cancel()
    store.release.set()  # the upstream answers a caller who is gone


CALLS = 40


async def test_the_answers_of_calls_whose_callers_left_are_not_kept() -> None:
    store = Store()
    succeeded = Succeeded()
    engine = WorkflowEngine(sinks=[succeeded])
    gateway = Gateway(parse_policy(POLICY, "store.toml"), upstreams={"store": store.server}, engine=engine)
    async with gateway:
        ticket = await gateway.handles.begin()
        await abandon(gateway, store, ticket.handle, "warm-up")  # first-call allocations, not answers
        await succeeded.wait_for(1)
        tracemalloc.start()
        try:
            before = held_bytes()
            for number in range(1, CALLS + 1):
                await abandon(gateway, store, ticket.handle, f"item-{number}")
                await succeeded.wait_for(number + 1)
            while_open = held_bytes() - before
            state = await gateway.handles.commit(ticket.handle)
            after_commit = held_bytes() - before
        finally:
            tracemalloc.stop()
    assert [step.state.value for step in state.steps] == ["live"] * (CALLS + 1)
    assert len(store.booked) == CALLS + 1
    # Every kept answer would hold 2 x 100 kB: 40 of them 8 MB. The saga itself keeps each
    # structured result until it ends (its undo binds from it); the answers are gone with their callers.
    assert while_open < (CALLS + 1) * ANSWER_BYTES * 1.5, while_open
    assert after_commit < CALLS * ANSWER_BYTES // 2, after_commit
