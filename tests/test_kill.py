"""The kill test: SIGKILL a travel-booking service at random moments, a hundred times, and lose nothing.

A zygote process (`tests/kill_child.py`) forks one worker per life. Each worker recovers what the
last one left unfinished, then books a few trips at once against the mock travel agency, whose
ledger is a SQLite file of its own; a seeded fault plan makes some trips fail at a random step and
some time out after the agency acted; trips are lists, lists with a parallel group, and dynamic
sagas with and without one. The parent follows the worker's progress line by line on a pipe, picks
a random event to kill it after (plus a random delay of up to 2 ms), and sends SIGKILL.

At the end, after a last life that only recovers: every run in the journal is committed, rolled back
or stuck; the ledger holds exactly the bookings and charges of committed runs; and no cancellation or
refund was applied twice, although some were called more than once.

The same holds with callers going away on top of the kills: the fault harness's trips
(`tests/kill_faults_child.py`), cancelled at every await point while their process is killed at
random, keep every invariant of `tests.journal_faults.check`; and a travel server journaling over
streamable HTTP, whose clients disconnect or time out at random moments and which is SIGKILLed
mid-load and restarted (start-up recovery), is left with exactly the committed trips booked and
paid, none half-booked, and a journal that opens.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import PIPE
from typing import Any, Protocol

import anyio
import httpx2
import pytest
from anyio.abc import Process
from mcp import Client
from mcp.types import CallToolResult

from aegis_nb.kernel.report import FailureKind, SagaStatus
from aegis_nb.mock import Ledger
from aegis_nb.saga.durable import read_run, read_runs
from aegis_nb.saga.events import CompensationFailed, CompensationStarted, CompensationSucceeded
from tests.journal_faults import describe
from tests.kill_child import SHAPES
from tests.kill_faults_child import KillRun
from tests.servers.launch import Lines, free_port

ROOT = Path(__file__).parent.parent
KILLS = 100
SAGAS_PER_LIFE = 3
LINE_TIMEOUT = 30.0
STARTUP_TIMEOUT = 120.0
"""A travel server's start (imports, start-up recovery) on two cores kept busy: 30 s was exceeded."""
PHASES = {
    "SagaStarted": "forward",
    "StepStarted": "forward",
    "StepSucceeded": "forward",
    "SagaCommitted": "committing",
    "StepFailed": "rollback",
    "StepTimedOut": "rollback",
    "CompensationStarted": "rollback",
    "CompensationSucceeded": "rollback",
    "CompensationFailed": "rollback",
    "SagaRolledBackEvent": "rolled back",
    "SagaStuck": "rolled back",
}


class Zygote:
    """The child process and its pipe: send a life, read its lines one at a time, with a deadline."""

    def __init__(self, journal: Path, ledger: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.kill_child", str(journal), str(ledger)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.fd = self.process.stdout.fileno()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.pending = b""
        self.worker: int | None = None
        assert self.read() == ["ready"]

    def read(self) -> list[str]:
        """The next line's words. Reads the pipe unbuffered, so `select` never misses a line."""
        while b"\n" not in self.pending:
            if not self.selector.select(LINE_TIMEOUT):
                raise AssertionError(f"the child said nothing for {LINE_TIMEOUT} s")
            chunk = os.read(self.fd, 65536)
            assert chunk, "the zygote died"
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode().split()

    def start(self, life: int, seed: int) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write(f"life {life} {seed} {SAGAS_PER_LIFE}\n")
        self.process.stdin.flush()
        words = self.read()
        assert words[0] == "pid", words
        self.worker = int(words[1])
        return self.worker

    def kill_worker(self) -> None:
        """SIGKILL the current worker (a child of our child, alive until the zygote reaps it)."""
        if self.worker is not None:
            os.kill(self.worker, signal.SIGKILL)
            self.worker = None

    def close(self) -> None:
        """Kill any worker, then end the zygote by closing its input."""
        self.kill_worker()
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(LINE_TIMEOUT)


@dataclass
class Tally:
    kills: int = 0
    lives: int = 0
    kill_points: Counter[str] = field(default_factory=Counter)
    applied_undos: Counter[str] = field(default_factory=Counter)
    undo_calls: Counter[str] = field(default_factory=Counter)


def one_life(zygote: Zygote, tally: Tally, life: int, rng: random.Random, *, final: bool = False) -> None:
    """Run one worker until the chosen kill point (or until it idles), then SIGKILL it."""
    pid = zygote.start(life, rng.randrange(2**31))
    tally.lives += 1
    kill_after = None if final else rng.randint(0, 12 * SAGAS_PER_LIFE)
    point, seen = "starting", 0
    while kill_after is None or seen < kill_after:
        words = zygote.read()
        if words[0] == "ev":
            seen += 1
            point = "recovering" if words[1] == "recover" else PHASES[words[2]]
        elif words[0] == "undo":
            tally.undo_calls[words[2]] += 1
            if words[3] == "True":
                tally.applied_undos[words[2]] += 1
        elif words[0] == "idle":
            point = "idle"
            break
    if not final:
        time.sleep(rng.uniform(0, 0.002))  # the random moment: the worker keeps going meanwhile
    zygote.kill_worker()
    if not final:
        tally.kills += 1
        tally.kill_points[point] += 1
    while True:
        words = zygote.read()
        if words[0] == "exit":
            assert words[1:] == [str(pid), str(signal.SIGKILL)]
            return
        if words[0] == "undo":  # lines written before the kill landed
            tally.undo_calls[words[2]] += 1
            if words[3] == "True":
                tally.applied_undos[words[2]] += 1


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigkill_at_random_moments_loses_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("AEGIS_KILL_SEED", "20261129"))
    print(f"\nkill test seed {seed} (set AEGIS_KILL_SEED to replay another)")
    rng = random.Random(seed)
    journal, ledger_path = tmp_path / "journal.db", tmp_path / "ledger.db"
    zygote = Zygote(journal, ledger_path)
    tally = Tally()
    try:
        life = 0
        while tally.kills < KILLS:
            one_life(zygote, tally, life, rng)
            life += 1
        one_life(zygote, tally, life, rng, final=True)  # recovers the last kill's runs, starts trips, idles
        one_life(zygote, tally, life + 1, rng, final=True)  # finds nothing left to recover
    finally:
        zygote.close()

    runs = read_runs(journal)
    statuses = Counter(run.status for run in runs)
    kinds = Counter(
        read_run(journal, run.run_id).events[-1].report.failure_kind  # type: ignore[union-attr]
        for run in runs
        if run.status is not SagaStatus.COMMITTED
    )
    print(
        f"kills {tally.kills}, lives {tally.lives}, runs {len(runs)}: "
        + ", ".join(
            f"{status.value} {count}" for status, count in sorted(statuses.items(), key=lambda i: i[0].value)
        )
    )
    print(
        "failures by kind: "
        + ", ".join(f"{k.value if k else None} {n}" for k, n in sorted(kinds.items(), key=str))
    )
    print("kill points: " + ", ".join(f"{p} {n}" for p, n in sorted(tally.kill_points.items())))
    repeated = sum(1 for n in tally.undo_calls.values() if n > 1)
    recovered = sum(1 for run in runs if run.recoveries)
    print(f"recovered runs: {recovered}; undo calls {sum(tally.undo_calls.values())}, repeated {repeated}")
    shapes = Counter((run.saga, run.status, bool(run.recoveries)) for run in runs)
    print(
        "by shape: "
        + ", ".join(
            f"{saga} {status.value}{' recovered' * r} {n}"
            for (saga, status, r), n in sorted(shapes.items(), key=str)
        )
    )

    # Every run finished, one way or the other.
    assert set(statuses) <= {SagaStatus.COMMITTED, SagaStatus.ROLLED_BACK, SagaStatus.STUCK}
    assert tally.kills >= KILLS
    assert statuses[SagaStatus.COMMITTED] > 0
    assert statuses[SagaStatus.ROLLED_BACK] > 0
    assert kinds[FailureKind.TIMEOUT] > 0
    assert kinds[FailureKind.ERROR] > 0
    assert recovered > 0
    # Every shape ran, and runs of each kind of shape were recovered: lists with a parallel group
    # and dynamic sagas (whose steps recovery rebuilds from what they journaled as they were added).
    assert {run.saga for run in runs} == {f"book_trip_{shape}" for shape in SHAPES}
    recovered_shapes = {run.saga for run in runs if run.recoveries}
    assert recovered_shapes & {"book_trip_group", "book_trip_dynamic_group"}
    assert recovered_shapes & {"book_trip_dynamic", "book_trip_dynamic_group"}

    # The ledger holds exactly what committed runs booked and paid.
    from aegis_nb.mock import Ledger

    ledger = Ledger(ledger_path)
    try:
        state = ledger.state()
    finally:
        ledger.close()
    committed = {run.run_id for run in runs if run.status is SagaStatus.COMMITTED}
    stuck = {run.run_id for run in runs if run.status is SagaStatus.STUCK}
    assert stuck == set()
    assert sorted(str(b.idempotency_key) for b in state.flights) == sorted(f"{r}/0" for r in committed)
    assert sorted(str(b.idempotency_key) for b in state.hotels) == sorted(f"{r}/1" for r in committed)
    assert sorted(str(c.idempotency_key) for c in state.charges) == sorted(f"{r}/2" for r in committed)

    # No refund or cancellation applied twice, though some were called more than once.
    assert [target for target, n in tally.applied_undos.items() if n > 1] == []


FAULT_KILLS = 30


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigkill_on_top_of_cancelled_callers_keeps_every_invariant(tmp_path: Path) -> None:
    seed = int(os.environ.get("AEGIS_KILL_SEED", "20261201"))
    tally = KillRun(tmp_path, seed).run(FAULT_KILLS)
    shown = "\n".join(tally.violations[:5])
    assert tally.violations == [], "\n".join(tally.lines()) + "\n" + shown
    assert tally.kills == FAULT_KILLS
    assert tally.recovered_runs > 0
    assert tally.statuses[SagaStatus.COMMITTED.value] > 0
    assert tally.cancelled_callers > 0


COMPENSATIONS = (CompensationStarted, CompensationSucceeded, CompensationFailed)
HTTP_TRIP = {"destination": "Lisbon", "nights": 2, "card_number": "4242424242424242"}
HTTP_CLIENTS = 12
HTTP_TRIPS = 5
HTTP_ROUNDS = 2
HTTP_KILLED_LIVES = 2


@dataclass
class TravelServer:
    """A travel server child: its URL, its process, and its last lines of output (for failures)."""

    url: str
    process: Process
    output: list[str] = field(default_factory=list)

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


@asynccontextmanager
async def travel_server(env: dict[str, str]) -> AsyncIterator[TravelServer]:
    """``aegis-nb serve tests.kill_faults_child:http_travel_app`` over HTTP, once it serves (recovered).

    Its output is drained all along (a full pipe would stall the server); the server is stopped
    gracefully at the end unless it was killed.
    """
    port = free_port()
    command = [sys.executable, "-m", "aegis_nb.cli", "serve", "tests.kill_faults_child:http_travel_app"]
    command += ["--transport", "http", "--port", str(port)]
    process = await anyio.open_process(
        command, cwd=ROOT, env={**os.environ, **env, "PYTHONUNBUFFERED": "1"}, stdout=PIPE, stderr=PIPE
    )
    server = TravelServer(f"http://127.0.0.1:{port}/mcp", process)
    serving, settled = False, anyio.Event()  # settled: serving, or its output ended (it died)

    async def drain(lines: Lines) -> None:
        nonlocal serving
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            while True:
                line = await lines.next_line()
                server.output = [*server.output[-60:], line]
                if "Uvicorn running on" in line:
                    serving = True
                    settled.set()
        settled.set()

    async with anyio.create_task_group() as group:
        assert process.stderr is not None
        assert process.stdout is not None
        group.start_soon(drain, Lines(process.stderr))
        group.start_soon(drain, Lines(process.stdout))
        try:
            with anyio.fail_after(STARTUP_TIMEOUT):
                await settled.wait()
            assert serving, "the travel server did not start:\n" + "\n".join(server.output)
            yield server
        finally:
            if process.returncode is None:
                process.terminate()
            with anyio.move_on_after(10, shield=True):
                await process.wait()
            server.kill()
            await process.aclose()


class Booker(Protocol):
    """What `booking_client` needs of an mcp `Client`."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolResult: ...


async def booking_client(
    url: str,
    limits: list[float | None],
    seen: Counter[str],
    gave_up: Callable[[], object],
    connect: Callable[[str], AbstractAsyncContextManager[Booker]] = Client,
) -> None:
    """A client booking one trip after another on one session, giving up on each after its limit
    (None: waits): its call is cancelled, as a client timing out does."""
    try:
        async with connect(url) as client:
            for limit in limits:
                with anyio.move_on_after(math.inf if limit is None else limit) as scope:
                    result = await client.call_tool("book_trip", HTTP_TRIP)
                if scope.cancelled_caught:
                    seen["gave up"] += 1
                    gave_up()
                else:
                    seen["declined" if result.is_error else "booked"] += 1
    except* Exception:
        # The server was killed under it. The client's task group raises what its tasks raised: a
        # broken connection, grouped with the cancellation of a caller that gave up at that moment,
        # which `except*` leaves to propagate to the scope that cancelled it (`except Exception`
        # missed the whole group, and the scope then let the connection error escape).
        seen["lost"] += 1


@asynccontextmanager
async def dying_client(url: str, calling: anyio.Event) -> AsyncIterator[Booker]:
    """A client whose server dies just as its caller gives up: the connection task fails while the
    caller's call is being cancelled, so the client's task group raises both at once."""

    class Session:
        async def call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
            calling.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    async def connection() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(connection)
        yield Session()


@pytest.mark.anyio
async def test_a_client_whose_server_dies_as_it_gives_up_is_counted_lost_not_raised() -> None:
    seen: Counter[str] = Counter()
    calling = anyio.Event()
    async with anyio.create_task_group() as group:
        with anyio.CancelScope() as giving_up:

            async def cut_off() -> None:
                await calling.wait()
                giving_up.cancel()

            group.start_soon(cut_off)
            await booking_client(
                "http://127.0.0.1:9/mcp", [None], seen, lambda: None, lambda url: dying_client(url, calling)
            )
    assert seen == Counter(lost=1)


async def load_round(server: TravelServer, rng: random.Random, seen: Counter[str], *, kill: bool) -> None:
    """`HTTP_CLIENTS` clients at once, each booking `HTTP_TRIPS` trips and giving up on some; a few
    drop their whole session at a random moment (disconnecting mid-call). With `kill`, the server is
    SIGKILLed as one client gives up on a trip (or, if none of its trips timed out, after the round)."""
    killer = rng.randrange(HTTP_CLIENTS) if kill else None

    def gave_up(client: int) -> None:
        if client == killer:
            server.kill()

    async def one(client: int) -> None:
        limits = [rng.choice([None, rng.uniform(0.0, 0.3)]) for _ in range(HTTP_TRIPS)]
        dropped = rng.random() < 0.25 and client != killer
        with anyio.move_on_after(rng.uniform(0.0, 1.0) if dropped else math.inf) as scope:
            await booking_client(server.url, limits, seen, lambda: gave_up(client))
        seen["disconnected"] += scope.cancelled_caught

    async with anyio.create_task_group() as group:
        for client in range(HTTP_CLIENTS):
            group.start_soon(one, client)
    if killer is not None:
        server.kill()


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.timeout(900)  # four server lives on busy cores: a guard against hangs only
async def test_http_clients_disconnecting_and_a_killed_server_leave_only_committed_trips(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("AEGIS_KILL_SEED", "20261201"))
    rng = random.Random(seed)
    journal, ledger_path = tmp_path / "journal.db", tmp_path / "ledger.db"
    env = {"AEGIS_FAULTS_JOURNAL": str(journal), "AEGIS_FAULTS_LEDGER": str(ledger_path)}
    seen: Counter[str] = Counter()
    kills = 0
    for life in range(HTTP_KILLED_LIVES + 2):  # killed lives, a life stopped gently, a life that recovers
        env["AEGIS_FAULTS_SEED"] = str(rng.randrange(2**31))
        async with travel_server(env) as server:
            rounds = HTTP_ROUNDS if life <= HTTP_KILLED_LIVES else 0
            for number in range(rounds):
                # In a killed life's last round, the server dies as one client gives up: mid-load.
                kill = life < HTTP_KILLED_LIVES and number == rounds - 1
                with anyio.fail_after(60):
                    await load_round(server, rng, seen, kill=kill)
                kills += kill

    runs = read_runs(journal)  # the journal opens after it all
    events = {run.run_id: read_run(journal, run.run_id).events for run in runs}  # every run reads back
    statuses = Counter(run.status for run in runs)
    ledger = Ledger(ledger_path)
    try:
        state = ledger.state()
    finally:
        ledger.close()
    booked = {
        "flight": {str(b.idempotency_key) for b in state.flights},
        "hotel": {str(b.idempotency_key) for b in state.hotels},
        "charge": {str(c.idempotency_key) for c in state.charges},
    }

    def held(run_id: str) -> list[str]:
        return [what for i, (what, keys) in enumerate(booked.items()) if f"{run_id}/{i}" in keys]

    # Exactly the committed trips booked and paid: none half-booked, none refunded under a commit,
    # and no committed run compensated.
    wrong = [
        f"run {run.run_id} {run.status.value}, ledger holds {held(run.run_id) or 'nothing'}:\n"
        + describe(events[run.run_id])
        for run in runs
        if held(run.run_id) != (list(booked) if run.status is SagaStatus.COMMITTED else [])
        or (
            run.status is SagaStatus.COMMITTED
            and any(isinstance(e, COMPENSATIONS) for e in events[run.run_id])
        )
    ]
    stray = sorted(key for keys in booked.values() for key in keys if key.rsplit("/", 1)[0] not in events)
    summary = f"seed {seed}: kills {kills}, clients {dict(seen)}, runs {dict(statuses)}"
    assert wrong == [], summary + "\n" + "\n".join(wrong[:5])
    assert stray == [], summary
    assert set(statuses) <= {SagaStatus.COMMITTED, SagaStatus.ROLLED_BACK}, summary
    assert kills == HTTP_KILLED_LIVES, summary
    assert seen["gave up"] > 0, summary
    assert statuses[SagaStatus.COMMITTED] > 0, summary
    assert statuses[SagaStatus.ROLLED_BACK] > 0, summary
