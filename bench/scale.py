"""Scale in one process: many concurrent sagas of tools that take a millisecond, against plain tasks.

10,000 sagas of 5 steps, each step's tool awaiting 1 ms, all started at once on one event loop,
through our `WorkflowEngine`, against the same 10,000 x 5 awaits in plain tasks (what the tools cost
with no saga around them), in the same run. Printed: steps per second for both and their ratio, and
the memory each live saga holds (traced allocations with every saga parked in its last step, minus the
same for the plain tasks, divided by the number of sagas).

Then the steps growth table (issue 30): one saga whose every step adds a metadata key (a secret
every 100th), all committing and with the last failing, at each size of ``--growth``; printed, the
cost per step and its ratio to the smallest size's (1.0 is linear; target: within 1.3 at 10,000
steps against 500). Sizes are alternated, best of ``--rounds``, the garbage collector on. The runs
growth table (recovery, listing, opening, pruning) is bench/journal_scale.py's.

    python bench/scale.py [--sagas 10000] [--steps 5] [--tool-ms 1] [--growth 500,2000,10000]
                          [--rounds 3] [--growth-only]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import time
import tracemalloc
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from aegis_nb import AegisContext, SagaFailed, Secret, WorkflowEngine


class Tool:
    """A step whose tool takes `seconds`, then records what it did; undone by a no-op."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def execute(self, ctx: AegisContext) -> None:
        await anyio.sleep(self.seconds)

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Parked(Tool):
    """The last step: waits until every saga is live, so their memory can be measured together."""

    def __init__(self, seconds: float, arrived: Callable[[], None], release: anyio.Event) -> None:
        super().__init__(seconds)
        self.arrived, self.release = arrived, release

    async def execute(self, ctx: AegisContext) -> None:
        self.arrived()
        await self.release.wait()
        await anyio.sleep(self.seconds)


async def wave(sagas: int, run_one: Callable[[], Coroutine[Any, Any, None]]) -> float:
    """Seconds for `sagas` concurrent calls of `run_one` to all finish."""
    started = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(sagas):
            tasks.start_soon(run_one)
    return time.perf_counter() - started


async def parked_bytes(
    sagas: int, start_one: Callable[[Callable[[], None], anyio.Event], Coroutine[Any, Any, None]]
) -> int:
    """Traced bytes held while `sagas` runs are all parked in their last step."""
    release, all_arrived = anyio.Event(), anyio.Event()
    count = 0

    def arrived() -> None:
        nonlocal count
        count += 1
        if count == sagas:
            all_arrived.set()

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with anyio.create_task_group() as tasks:
        for _ in range(sagas):
            tasks.start_soon(start_one, arrived, release)
        await all_arrived.wait()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        release.set()
    tracemalloc.stop()
    return held


async def main(sagas: int, steps: int, tool_seconds: float) -> None:
    engine = WorkflowEngine()
    tools = [Tool(tool_seconds) for _ in range(steps)]

    async def plain() -> None:
        ctx = AegisContext()
        for tool in tools:
            await tool.execute(ctx)

    async def saga() -> None:
        await engine.execute_saga(tools)

    async def plain_parked(arrived: Callable[[], None], release: anyio.Event) -> None:
        ctx = AegisContext()
        for tool in [*tools[:-1], Parked(tool_seconds, arrived, release)]:
            await tool.execute(ctx)

    async def saga_parked(arrived: Callable[[], None], release: anyio.Event) -> None:
        await engine.execute_saga([*tools[:-1], Parked(tool_seconds, arrived, release)])

    rounds = []
    for _ in range(3):  # interleaved, best of three: the machine is shared
        rounds.append((await wave(sagas, plain), await wave(sagas, saga)))
    plain_s = min(r[0] for r in rounds)
    saga_s = min(r[1] for r in rounds)
    total = sagas * steps
    print(
        f"{sagas:,} concurrent sagas of {steps} steps, tools of {tool_seconds * 1000:g} ms, best of 3 rounds"
    )
    print(f"{'':32}{'seconds':>10}{'steps/s':>12}")
    print(f"{'plain tasks, same awaits':32}{plain_s:>10.2f}{total / plain_s:>12,.0f}")
    print(f"{'aegis_nb sagas':32}{saga_s:>10.2f}{total / saga_s:>12,.0f}")
    print(f"throughput: {plain_s / saga_s:.2f}x the plain tasks'")
    plain_bytes = await parked_bytes(sagas, plain_parked)
    saga_bytes = await parked_bytes(sagas, saga_parked)
    print(
        f"memory per live saga: {(saga_bytes - plain_bytes) / sagas / 1024:.1f} KiB above a plain task "
        f"({saga_bytes / sagas / 1024:.1f} KiB in all, traced allocations)"
    )


class Grows:
    """A step that adds its own metadata key (a secret every 100th), so every context is larger."""

    def __init__(self, index: int, fail: bool) -> None:
        self.key, self.fail = f"k{index}", fail
        self.value: object = Secret(f"s{index}") if index % 100 == 0 else index

    async def execute(self, ctx: AegisContext) -> AegisContext:
        if self.fail:
            raise RuntimeError("last step fails")
        return ctx.with_metadata({self.key: self.value})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


async def per_step(steps: int, fail: bool) -> float:
    """Microseconds a step for one saga of `steps` growing steps (the garbage collector on)."""
    engine = WorkflowEngine()
    saga = [Grows(i, fail and i == steps - 1) for i in range(steps)]
    started = time.perf_counter()
    if fail:
        with contextlib.suppress(SagaFailed):
            await engine.execute_saga(saga)
    else:
        await engine.execute_saga(saga)
    return (time.perf_counter() - started) / steps * 1e6


async def growth(sizes: list[int], rounds: int) -> None:
    """The steps table: cost per step at each size, and its ratio to the smallest (linear is 1.0)."""
    print(f"\nsagas whose every step adds a metadata key, best of {rounds} rounds, sizes alternated")
    print(f"{'steps':>8}{'commit us/step':>16}{'x':>7}{'fail us/step':>15}{'x':>7}")
    best: dict[tuple[int, bool], float] = {}
    for _ in range(rounds):
        for size in sizes:
            for fail in (False, True):
                figure = await per_step(size, fail)
                best[size, fail] = min(best.get((size, fail), math.inf), figure)
    for size in sizes:
        commit, failed = best[size, False], best[size, True]
        print(
            f"{size:>8,}{commit:>16.1f}{commit / best[sizes[0], False]:>7.2f}"
            f"{failed:>15.1f}{failed / best[sizes[0], True]:>7.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sagas", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tool-ms", type=float, default=1.0)
    parser.add_argument("--growth", default="500,2000,10000", help="saga sizes for the steps table")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--growth-only", action="store_true", help="print only the steps table")
    options = parser.parse_args()
    if not options.growth_only:
        anyio.run(main, options.sagas, options.steps, options.tool_ms / 1000)
    anyio.run(growth, [int(size) for size in options.growth.split(",")], options.rounds)
