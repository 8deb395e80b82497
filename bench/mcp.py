"""Cost of the saga layer over MCP, as ratios taken in one run.

One in-process `mcp.Client` calls an `AegisMCP` server two ways, each doing the same three tool calls
on a second server (through an in-process `ToolSession`):

- ``direct``: a plain tool that awaits the three calls one after another;
- ``saga``: a workflow whose three `ToolPairStep`s make those calls, with everything a workflow
  brings: engine, events, deadline, progress routing, structured report.

The ratio saga/direct is the overhead of the saga layer (target: under 1.2x). For scale, it also
times the client making the three calls itself (no outer call at all), and the plain tool passing
idempotency keys as the saga's steps do: what a key costs the tool server, which is part of the
saga's cost.

The tool server types the key as the mock travel agency does, ``str`` with ``""`` for none: the SDK
tries to parse every string argument of a parameter not typed exactly ``str`` (``str | None``, say)
as JSON, and a key fails that parse with an exception on every call.

Rounds of each way are interleaved and the best round of each is kept, as in bench/engine.py, so
other load on a shared machine stays out of the ratio. And, as pyperf does, the whole measurement
runs in several fresh processes one after another: a process's hash seed and memory layout move
the ratio by a few percent for its whole life (1.16-1.26x across single runs here), which more
rounds in one process cannot average out. Each process takes its own ratio; the script prints
their median and range.

With ``--tool-ms`` each tool call also takes that long (a real tool is never free), which shows how
the fixed cost per workflow call fades next to the tools it orchestrates.

    python bench/mcp.py [--processes 5] [--calls 200] [--rounds 15] [--tool-ms 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# This script is named like the SDK it measures: keep its own folder off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import anyio  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402

from aegis_nb import AegisContext  # noqa: E402
from aegis_nb.server.app import AegisMCP  # noqa: E402
from aegis_nb.server.session import ToolSession  # noqa: E402
from aegis_nb.server.tool_step import ToolPairStep  # noqa: E402


def tool_server(latency: float) -> MCPServer[Any]:
    """A trivial tool that takes `latency` seconds, and its undo tool (key typed as in aegis_nb.mock)."""
    tools = MCPServer("tools")

    @tools.tool()
    async def act(n: int, idempotency_key: str = "") -> dict[str, int]:
        if latency:
            await anyio.sleep(latency)
        return {"n": n}

    @tools.tool()
    async def undo(idempotency_key: str = "") -> dict[str, bool]:
        return {"ok": True}

    return tools


def front_server(session: ToolSession) -> AegisMCP:
    app = AegisMCP("front")
    steps = [ToolPairStep(session, "act", "undo", name=f"Step{i}", result_key=f"r{i}") for i in range(3)]

    @app.tool()
    async def direct() -> dict[str, int]:
        for i in range(3):
            await session.call_tool("act", {"n": i})
        return {"calls": 3}

    @app.tool()
    async def direct_keyed() -> dict[str, int]:
        run_id = uuid.uuid4().hex  # keys as the engine makes them: run id / position
        for i in range(3):
            await session.call_tool("act", {"n": i, "idempotency_key": f"{run_id}/{i}"})
        return {"calls": 3}

    @app.workflow()
    async def saga(ctx: AegisContext) -> AegisContext:
        return await app.workflow_engine.execute_saga([(s, (), {"n": i}) for i, s in enumerate(steps)], ctx)

    return app


async def measure(calls: int, rounds: int, latency: float = 0.0) -> dict[str, float]:
    """Best µs per call of each way, over interleaved rounds."""
    async with Client(tool_server(latency)) as inner:
        session = ToolSession(inner)
        async with Client(front_server(session)) as client:

            async def via_direct() -> None:
                await client.call_tool("direct", {})

            async def via_saga() -> None:
                result = await client.call_tool("saga", {})
                assert not result.is_error, result

            async def via_direct_keyed() -> None:
                await client.call_tool("direct_keyed", {})

            async def client_only() -> None:
                for i in range(3):
                    await session.call_tool("act", {"n": i})

            ways: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("direct", via_direct),
                ("saga", via_saga),
                ("client makes the 3 calls", client_only),
                ("direct, passing keys", via_direct_keyed),
            ]
            best = {label: float("inf") for label, _ in ways}
            for _, way in ways:  # warm-up: schemas, validators, first-call caches
                for _ in range(20):
                    await way()
            for _ in range(rounds):
                for label, way in ways:
                    started = time.perf_counter()
                    for _ in range(calls):
                        await way()
                    best[label] = min(best[label], (time.perf_counter() - started) / calls * 1e6)
    return best


_RESULT = "measured: "


def measure_in_child(calls: int, rounds: int, tool_ms: float) -> dict[str, float]:
    """One whole measurement in a fresh Python process (see the module docstring)."""
    command = [sys.executable, __file__, "--worker", "--calls", str(calls), "--rounds", str(rounds)]
    done = subprocess.run([*command, "--tool-ms", str(tool_ms)], capture_output=True, text=True, check=True)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(_RESULT)]
    measured: dict[str, float] = json.loads(line.removeprefix(_RESULT))
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="fresh processes, one after another")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tool-ms", type=float, default=0.0, help="time each tool call takes (ms)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # a child's job
    args = parser.parse_args()
    if args.worker:
        measured = anyio.run(measure, args.calls, args.rounds, args.tool_ms / 1000)
        print(_RESULT + json.dumps(measured))
        return
    print(
        f"3 tool calls of {args.tool_ms:g} ms per outer call, in-process client; best of "
        f"{args.rounds} rounds of {args.calls}, in each of {args.processes} processes"
    )
    runs = []
    for number in range(1, args.processes + 1):
        runs.append(measure_in_child(args.calls, args.rounds, args.tool_ms))
        print(
            f"  process {number}/{args.processes}: {runs[-1]['saga'] / runs[-1]['direct']:.3f}x", flush=True
        )
    print("median over the processes:")
    for label in runs[0]:
        print(f"  {label:28s} {statistics.median(run[label] for run in runs):8.1f} µs per call")
    ratios = sorted(run["saga"] / run["direct"] for run in runs)
    print(
        f"saga layer overhead: {statistics.median(ratios):.3f}x the direct tool "
        f"(processes: {ratios[0]:.3f}-{ratios[-1]:.3f}x; target < 1.2x)"
    )
    keyed = statistics.median(run["saga"] / run["direct, passing keys"] for run in runs)
    print(f"  (for scale: {keyed:.3f}x the direct tool passing the same idempotency keys)")


if __name__ == "__main__":
    main()
