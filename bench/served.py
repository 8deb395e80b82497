"""Served load: the travel agent's ``book_trip`` saga over streamable HTTP against a plain tool, in one run.

Three server processes: the mock travel agency (``TravelAgency``, served over HTTP), and two front
servers that each hold one client session on it:

- ``saga``: the travel agent (`travel_app` with the agency's URL), whose ``book_trip`` workflow runs
  BookFlight -> ReserveHotel -> ChargeCard as `ToolPairStep`s, undoing the bookings when the card is
  declined;
- ``plain``: a plain `MCPServer` whose ``book_trip`` tool makes the same three calls, with the same
  arguments and idempotency keys, one after another, and leaves the bookings standing on a decline.

Both are served by our own `serve_http` (uvicorn, the Host/Origin checks, the session bounds), with
logging at WARNING (no access log line per request). This process runs `--clients` concurrent MCP
clients (`mcp.Client` over streamable HTTP, one session each), which share each round's calls.

Rounds of each side are interleaved (the order flips every round), so other load on a shared machine
falls on both. Printed per mix (every card charged; one card in five declined, which the saga undoes
with two more calls): throughput of each side and the ratio, p50/p99 latency of each side and their
ratios, each front server's RSS after warm-up, half-way and at the end, and where the CPU went: each
process's CPU time per call and share of a core during each side's rounds, and how busy the whole
machine was (other processes' load shows as the difference). When a front server runs near a full
core it is the bottleneck and the throughput ratio follows the ratio of the front servers' CPU per
call, which the last line prints. Each mix gets fresh server processes.

The default run (400 calls a side in 4 rounds, per mix) takes under a minute on a quiet 2-core
machine; the README reports the full run: ``python bench/served.py --calls 2000 --rounds 10``.

With ``--in-process`` it measures only the saga layer's own cost instead: both tools on an
in-process agency, called one at a time in this process (no HTTP, no concurrency).

    python bench/served.py [--calls 400] [--rounds 4] [--clients 100] [--mix both|commit|declined]
    python bench/served.py --in-process
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Final

# bench/mcp.py is named like the SDK: keep this folder off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import anyio  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError as McpToolError  # noqa: E402
from mcp.types import TextContent  # noqa: E402

from aegis_nb.mock import DECLINED_TEST_CARD, TravelAgency, travel_app  # noqa: E402
from aegis_nb.server.http_security import HttpSecurity, serve_http  # noqa: E402

HOST = "127.0.0.1"
CARD = "4111111111111111"
WARM_UP = 300
"""Calls per side before anything is measured: imports, schemas, caches, the allocator's arenas."""

LOG_LEVEL: Final = "WARNING"
"""Both front servers and the agency: no log line per request (uvicorn's access log, the SDK's info)."""


class Side(Enum):
    SAGA = "saga"
    PLAIN = "plain"


class Mix(Enum):
    COMMIT = "every call commits"
    DECLINED = "one card in five declined"


class Role(Enum):
    """What a server child serves."""

    AGENCY = "agency"
    SAGA = "saga"
    PLAIN = "plain"


# -- the servers (each in a child process) ------------------------------------------------------------


def plain_server(agency: str | MCPServer[Any]) -> MCPServer[Any]:
    """A plain tool making the saga's three calls on one held session (to the agency's URL, or to the
    agency's server in-process); a decline is its error."""
    held: list[Client] = []

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[dict[str, Any]]:
        async with Client(agency) as client:
            held.append(client)
            yield {}

    server: MCPServer[Any] = MCPServer("plain", lifespan=lifespan, log_level=LOG_LEVEL)

    async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await held[0].call_tool(name, arguments)
        if result.is_error:
            raise McpToolError(" ".join(b.text for b in result.content if isinstance(b, TextContent)))
        assert result.structured_content is not None
        return dict(result.structured_content)

    @server.tool()
    async def book_trip(destination: str, nights: int, card_number: str) -> dict[str, Any]:
        """Fly, stay and pay, in that order: the same calls and keys as the saga's steps."""
        run_id = uuid.uuid4().hex
        flight = await call("book_flight", {"destination": destination, "idempotency_key": f"{run_id}/0"})
        hotel = await call(
            "reserve_hotel", {"city": destination, "nights": nights, "idempotency_key": f"{run_id}/1"}
        )
        total = flight["price_cents"] + hotel["price_cents"]
        charge = await call(
            "charge_card",
            {"amount_cents": total, "card_number": card_number, "idempotency_key": f"{run_id}/2"},
        )
        return {"flight": flight, "hotel": hotel, "charge": charge}

    return server


def serve(role: Role, port: int, agency_url: str) -> None:
    """Serve `role` on `port` until terminated."""
    server: MCPServer[Any]
    if role is Role.AGENCY:
        server = TravelAgency().server
    elif role is Role.SAGA:
        server = travel_app(agency_url)
    else:
        server = plain_server(agency_url)
    server.settings.log_level = LOG_LEVEL
    anyio.run(serve_http, server, HOST, port, HttpSecurity(), backend="asyncio")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Child:
    role: Role
    process: subprocess.Popen[bytes]
    url: str

    @property
    def pid(self) -> int:
        return self.process.pid


def start(role: Role, agency_url: str = "") -> Child:
    port = free_port()
    command = [sys.executable, __file__, "--serve", role.value, "--port", str(port), "--agency", agency_url]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    return Child(role, process, f"http://{HOST}:{port}/mcp")


def wait_listening(child: Child) -> None:
    """Until `child` accepts connections (its log says nothing at WARNING, so ask its port)."""
    port = int(child.url.rsplit(":", 1)[1].split("/")[0])
    deadline = time.monotonic() + 60
    while True:
        if child.process.poll() is not None:
            raise RuntimeError(f"the {child.role.value} server exited with {child.process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {child.role.value} server did not listen within 60 s")
        time.sleep(0.05)  # start-up only: nothing is being timed yet


@contextlib.contextmanager
def servers() -> Iterator[dict[Role, Child]]:
    """Fresh agency, saga and plain servers; stopped on the way out."""
    children: list[Child] = []
    try:
        agency = start(Role.AGENCY)
        children.append(agency)
        wait_listening(agency)
        for role in (Role.SAGA, Role.PLAIN):
            children.append(start(role, agency.url))
        for child in children[1:]:
            wait_listening(child)
        yield {child.role: child for child in children}
    finally:
        for child in children:
            child.process.terminate()
        for child in children:
            try:
                child.process.wait(10)
            except subprocess.TimeoutExpired:
                child.process.kill()


# -- measuring -------------------------------------------------------------------------------------


_TICKS = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def cpu_seconds(pid: int) -> float:
    """User + system CPU time `pid` has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@dataclass
class Tally:
    """One side's measured calls: wall time of its rounds, each call's latency, CPU seconds per process."""

    seconds: float = 0.0
    calls: int = 0
    declined: int = 0
    latencies: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    machine_busy: float = 0.0
    """CPU seconds the whole machine was busy during this side's rounds (all processes, ours or not)."""
    rss: list[float] = field(default_factory=list)
    """The front server's RSS (MiB) after warm-up, then after each of this side's rounds."""


def machine_busy_seconds() -> float:
    """CPU seconds all cores have been busy since boot (Linux /proc/stat: everything but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / _TICKS


def arguments(number: int, mix: Mix) -> dict[str, Any]:
    declined = mix is Mix.DECLINED and number % 5 == 4
    destination = ("Lisbon", "Oslo", "Rome", "Tokyo", "Lima")[number % 5]
    return {
        "destination": destination,
        "nights": 1 + number % 3,
        "card_number": DECLINED_TEST_CARD if declined else CARD,
    }


async def round_of(clients: list[Client], calls: int, mix: Mix, tally: Tally | None, first: int) -> None:
    """`calls` calls of ``book_trip`` shared by `clients`, each taking the next number when free."""
    numbers = iter(range(first, first + calls))

    async def worker(client: Client) -> None:
        for number in numbers:
            started = time.perf_counter()
            result = await client.call_tool("book_trip", arguments(number, mix))
            elapsed = time.perf_counter() - started
            want_error = arguments(number, mix)["card_number"] == DECLINED_TEST_CARD
            if result.is_error != want_error:
                raise RuntimeError(f"call {number}: is_error={result.is_error}: {result.content}")
            if tally is not None:
                tally.latencies.append(elapsed)
                tally.declined += want_error

    async with anyio.create_task_group() as tasks:
        for client in clients:
            tasks.start_soon(worker, client)


async def measure(
    urls: Mapping[Side, str], pids: Mapping[str, int], mix: Mix, calls: int, rounds: int, clients: int
) -> dict[Side, Tally]:
    """Interleaved rounds of both sides, after a warm-up of each: each side's tally."""
    tallies = {side: Tally() for side in Side}
    async with contextlib.AsyncExitStack() as stack:
        sessions = {
            side: [await stack.enter_async_context(Client(url)) for _ in range(clients)]
            for side, url in urls.items()
        }
        for side in Side:
            await round_of(sessions[side], WARM_UP, mix, None, 0)
        for side in Side:
            tallies[side].rss.append(rss_mib(pids[side.value]))
        per_round = [calls // rounds + (i < calls % rounds) for i in range(rounds)]
        for number, size in enumerate(per_round):
            order = list(Side) if number % 2 == 0 else list(Side)[::-1]
            for side in order:
                tally = tallies[side]
                cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                busy_before = machine_busy_seconds()
                started = time.perf_counter()
                await round_of(sessions[side], size, mix, tally, tally.calls)
                tally.seconds += time.perf_counter() - started
                tally.machine_busy += machine_busy_seconds() - busy_before
                tally.rss.append(rss_mib(pids[side.value]))
                tally.calls += size
                for name, before in cpu_before.items():
                    tally.cpu[name] = tally.cpu.get(name, 0.0) + cpu_seconds(pids[name]) - before
    return tallies


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def report(mix: Mix, tallies: dict[Side, Tally]) -> None:
    saga, plain = tallies[Side.SAGA], tallies[Side.PLAIN]
    rate = {side: t.calls / t.seconds for side, t in tallies.items()}
    print(f"{mix.value} ({saga.calls} calls a side, {saga.declined} declined):")
    print(
        f"  throughput   saga {rate[Side.SAGA]:7.1f} calls/s   plain {rate[Side.PLAIN]:7.1f} calls/s   "
        f"ratio {rate[Side.SAGA] / rate[Side.PLAIN]:.3f}x"
    )
    for label, share in (("p50", 0.50), ("p99", 0.99)):
        s, p = percentile(saga.latencies, share) * 1e3, percentile(plain.latencies, share) * 1e3
        print(f"  latency {label}  saga {s:7.1f} ms        plain {p:7.1f} ms        ratio {s / p:.3f}x")
    for side in Side:
        rss = tallies[side].rss
        samples = (rss[0], rss[len(rss) // 2], rss[-1])  # after warm-up, half-way, at the end
        print(
            f"  RSS {side.value:5s}    {' -> '.join(f'{mib:.1f}' for mib in samples)} MiB "
            f"(after warm-up, half-way, at the end: {rss[-1] - rss[0]:+.1f})"
        )
    print("  CPU per call (and share of one core) during each side's rounds:")
    for side in Side:
        tally = tallies[side]
        parts = "  ".join(
            f"{name} {cpu / tally.calls * 1e3:5.2f} ms ({cpu / tally.seconds:4.0%})"
            for name, cpu in tally.cpu.items()
            if name in ("clients", Role.AGENCY.value, side.value)
        )
        ours = sum(tally.cpu.values()) / tally.seconds
        busy = tally.machine_busy / tally.seconds
        print(
            f"    {side.value:5s} rounds: {parts};  "
            f"machine busy {busy / CORES:4.0%} of {CORES} cores, ours {ours / CORES:4.0%}"
        )
    front = {side: tallies[side].cpu[side.value] / tallies[side].calls for side in Side}
    print(
        f"  front server CPU per call: saga {front[Side.SAGA] * 1e3:.2f} ms / "
        f"plain {front[Side.PLAIN] * 1e3:.2f} ms "
        f"= {front[Side.SAGA] / front[Side.PLAIN]:.3f}x (a saturated front server would give "
        f"{front[Side.PLAIN] / front[Side.SAGA]:.3f}x the plain throughput)"
    )


async def in_one_process(rounds: int, calls: int = 200) -> None:
    """The same two tools on an in-process agency, called one at a time in-process: the saga layer's
    own cost a call, with no HTTP and no concurrency (best round of each side)."""
    agency = TravelAgency()
    async with Client(travel_app(agency)) as saga, Client(plain_server(agency.server)) as plain:
        sides = {Side.SAGA: saga, Side.PLAIN: plain}
        best = dict.fromkeys(Side, float("inf"))
        for client in sides.values():
            for number in range(WARM_UP // 10):
                await client.call_tool("book_trip", arguments(number, Mix.COMMIT))
        for _ in range(rounds):
            for side, client in sides.items():
                started = time.perf_counter()
                for number in range(calls):
                    result = await client.call_tool("book_trip", arguments(number, Mix.COMMIT))
                    assert not result.is_error, result
                best[side] = min(best[side], (time.perf_counter() - started) / calls)
    saga_us, plain_us = best[Side.SAGA] * 1e6, best[Side.PLAIN] * 1e6
    print(
        f"in one process, no HTTP, one call at a time (best of {rounds} rounds of {calls}): "
        f"saga {saga_us:.0f} µs, plain {plain_us:.0f} µs a call: the saga layer {saga_us - plain_us:.0f} µs"
    )


async def run_mix(mix: Mix, calls: int, rounds: int, clients: int) -> None:
    with servers() as children:
        urls = {Side.SAGA: children[Role.SAGA].url, Side.PLAIN: children[Role.PLAIN].url}
        pids = {
            "clients": os.getpid(),
            Role.AGENCY.value: children[Role.AGENCY].pid,
            Side.SAGA.value: children[Role.SAGA].pid,
            Side.PLAIN.value: children[Role.PLAIN].pid,
        }
        tallies = await measure(urls, pids, mix, calls, rounds, clients)
    report(mix, tallies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="measured calls a side, per mix")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds the calls are split into")
    parser.add_argument("--clients", type=int, default=100, help="concurrent MCP client sessions a side")
    parser.add_argument("--mix", choices=["both", "commit", "declined"], default="both")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="only the saga layer's own cost: no HTTP, one call at a time",
    )
    parser.add_argument("--serve", choices=[r.value for r in Role], help=argparse.SUPPRESS)  # a child's job
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--agency", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(Role(args.serve), args.port, args.agency)
        return
    if args.in_process:
        anyio.run(in_one_process, max(args.rounds, 5))
        return
    mixes = {"both": list(Mix), "commit": [Mix.COMMIT], "declined": [Mix.DECLINED]}[args.mix]
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    print(
        f"book_trip over streamable HTTP: {args.clients} concurrent clients a side in this process, "
        f"{args.calls} calls a side in {args.rounds} interleaved rounds, after {WARM_UP} warm-up calls; "
        f"machine: {CORES} cores, {memory:.0f} GiB, load average {os.getloadavg()[0]:.1f} at the start"
    )
    for mix in mixes:
        try:
            anyio.run(run_mix, mix, args.calls, args.rounds, args.clients)
        except BaseExceptionGroup as group:
            # 200 sessions' task groups nest one in another: say what went wrong in one line.
            leaf: BaseException = group
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            sys.exit(f"bench/served.py: {mix.value}: a call failed: {type(leaf).__name__}: {leaf}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
