"""Cost of the gateway, as ratios taken in one run, and the time to roll back a 20-call agent saga.

One in-process `mcp.Client` makes the same call, ``book_flight`` on the mock agency, three ways:

- ``gateway``: through a `Gateway` over the agency (policy lookup, input-schema check, forwarding);
- ``straight``: through a front server whose one tool makes the same call straight to the upstream
  (``await upstream.call_tool(...)``): the same two hops, none of the gateway's work. As in
  bench/mcp.py, the ratio gateway/straight is the cost of the layer (targets: at most 1.2x with an
  in-process upstream, 1.1x over stdio, where each upstream call costs a process round trip);
- ``no front``: the client calling the upstream itself, one hop fewer, for scale.

Each is measured with the agency in process and over stdio (``aegis-nb mock`` as a child). Rounds
of each way are interleaved and the best round of each kept, so other load on a shared machine
stays out of the ratio. Then an agent saga: ``saga_begin``, 20 ``book_flight`` calls carrying its
handle, and ``saga_rollback``, whose time (20 compensations, each an upstream ``cancel_flight``) is
printed, best of a few runs.

    python bench/gateway.py [--calls 200] [--rounds 9] [--sagas 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

# bench/mcp.py is named like the SDK: keep this folder off the import path, or it shadows `mcp`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import anyio  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402

from aegis_nb.gateway import Gateway, load_policy  # noqa: E402
from aegis_nb.mock import TravelAgency  # noqa: E402
from aegis_nb.mock.agency import BookingResult  # noqa: E402
from aegis_nb.server.session import connect  # noqa: E402

POLICY = Path(__file__).parent.parent / "aegis_nb" / "mock" / "travel_policy.toml"
CALL = ("book_flight", {"destination": "Lisbon", "idempotency_key": "bench"})  # the same booking each time


def straight_front(upstream: Client) -> MCPServer[Any]:
    """A front of one tool that makes the call straight to the upstream (what the gateway is measured by)."""
    front: MCPServer[Any] = MCPServer("front")

    # The tool as the agency publishes it (the gateway passes its output schema on, which the
    # client then checks every result against): the same schemas both ways.
    @front.tool()
    async def book_flight(destination: str, flight_no: str = "", idempotency_key: str = "") -> BookingResult:
        result = await upstream.call_tool(
            "book_flight",
            {"destination": destination, "flight_no": flight_no, "idempotency_key": idempotency_key},
        )
        return cast(BookingResult, result.structured_content)

    return front


@asynccontextmanager
async def upstream_target(stdio: bool) -> AsyncIterator[Any]:
    """The agency, in process or as an `aegis-nb mock` child over stdio."""
    if stdio:
        yield StdioServerParameters(command=sys.executable, args=["-m", "aegis_nb.cli", "mock"])
    else:
        yield TravelAgency().server


async def measure(stdio: bool, calls: int, rounds: int) -> dict[str, float]:
    """Best µs per call of each way, over interleaved rounds."""
    async with upstream_target(stdio) as target, connect(target) as session:
        upstream = session.client
        gateway = Gateway(load_policy(POLICY), upstreams={"agency": target})
        async with Client(gateway) as via_gateway, Client(straight_front(upstream)) as via_front:

            async def through_gateway() -> None:
                result = await via_gateway.call_tool(*CALL)
                assert not result.is_error, result

            async def straight() -> None:
                result = await via_front.call_tool(*CALL)
                assert not result.is_error, result

            async def no_front() -> None:
                await upstream.call_tool(*CALL)

            ways: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("gateway", through_gateway),
                ("straight", straight),
                ("no front", no_front),
            ]
            best = {label: float("inf") for label, _ in ways}
            for _, way in ways:  # warm-up: validators, first-call caches
                for _ in range(20):
                    await way()
            for _ in range(rounds):
                for label, way in ways:
                    started = time.perf_counter()
                    for _ in range(calls):
                        await way()
                    best[label] = min(best[label], (time.perf_counter() - started) / calls * 1e6)
    return best


async def rollback_time(steps: int, sagas: int) -> tuple[float, str]:
    """Best seconds for ``saga_rollback`` of a saga of `steps` upstream calls, and its final status."""
    agency = TravelAgency()
    best, status = float("inf"), ""
    async with Client(Gateway(load_policy(POLICY), upstreams={"agency": agency.server})) as client:
        for _ in range(sagas):
            begun = await client.call_tool("saga_begin", {})
            handle = (begun.structured_content or {})["saga"]
            for i in range(steps):
                booked = await client.call_tool("book_flight", {"destination": f"City{i}", "saga": handle})
                assert not booked.is_error, booked
            started = time.perf_counter()
            rolled = await client.call_tool("saga_rollback", {"saga": handle, "reason": "bench"})
            best = min(best, time.perf_counter() - started)
            status = (rolled.structured_content or {})["status"]
    assert agency.state().flights == (), "the rollbacks left bookings standing"
    return best, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--sagas", type=int, default=5)
    args = parser.parse_args()
    targets = {False: ("in process", 1.2), True: ("over stdio", 1.1)}
    print(f"book_flight through the gateway vs straight; best of {args.rounds} rounds of {args.calls}")
    for stdio, (where, target) in targets.items():
        calls = args.calls if not stdio else max(args.calls // 4, 10)  # a stdio round trip is ~1 ms
        best = anyio.run(measure, stdio, calls, args.rounds)
        for label, micros in best.items():
            print(f"  upstream {where:10s} {label:9s} {micros:8.1f} µs per call")
        ratio = best["gateway"] / best["straight"]
        verdict = "within" if ratio <= target else "OVER"
        print(
            f"  upstream {where}: gateway {ratio:.3f}x the straight call ({verdict} the {target}x target); "
            f"{best['gateway'] / best['no front']:.3f}x the client calling the upstream itself"
        )
    seconds, status = anyio.run(rollback_time, 20, args.sagas)
    print(
        f"a 20-call agent saga's saga_rollback (in-process upstream): {seconds * 1000:.2f} ms "
        f"({seconds / 20 * 1e6:.0f} µs per compensation), ended {status}"
    )


if __name__ == "__main__":
    main()
