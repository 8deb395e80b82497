"""SIGKILL on top of cancelled callers: the fault harness's trips in a child process killed at random.

Run as ``python -m tests.kill_faults_child JOURNAL LEDGER``: a zygote that imports everything once,
then forks one worker per line it reads on stdin (``life <number> <seed> <trips> <backend>``) and
reports ``exit <pid> <status>`` once the worker is dead; an empty stdin ends it. A worker is one
life of a booking service: it opens the journal and the agency's SQLite ledger, recovers what the
last life left unfinished, then runs `trips` trips at once with the faults `tests.journal_faults`
draws from its seed (cancelled callers, failing steps and undos), and idles until it is killed.
Every line it writes (``pid``, ``recovered``, ``ev``, ``undo``, ``outcome``, ``idle``) is one
atomic pipe write, so the parent always knows how far it got.

`KillRun` is the parent's side, shared by `tests/test_kill.py` and `tests/soak.py`: it draws the
same trip plans as each worker, kills the worker after a random number of events, reads the
journal before the next life recovers, and checks `tests.journal_faults.check` at the end.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import sniffio

from aegis_nb import WorkflowEngine
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.mock import FaultPlan, Latency, Ledger, ToolFaults, TravelAgency, travel_app
from aegis_nb.saga.durable import RunInfo, read_runs
from aegis_nb.saga.events import SagaEvent
from aegis_nb.server.app import AegisMCP
from tests.journal_faults import (
    ALL_IN_DOUBT,
    RETRY,
    CancellingJournal,
    Effects,
    Outcome,
    Tally,
    Trip,
    check,
    life_plans,
    registered,
    run_wave,
    tally_trips,
    trip_steps,
)

ROOT = Path(__file__).parent.parent
LINE_TIMEOUT = 30.0


def say(line: str) -> None:
    """One line to the parent, in one write (atomic on a pipe)."""
    os.write(1, (line + "\n").encode())


# -- the child ---------------------------------------------------------------------------------------


async def live(journal_path: str, ledger_path: str, life: int, seed: int, count: int) -> None:
    effects = Effects(Ledger(ledger_path), on_undo=lambda key, changed: say(f"undo {key} {changed}"))
    trips: dict[str, Trip] = {}
    steps = trip_steps(effects, trips, in_doubt=ALL_IN_DOUBT)
    send, receive = anyio.create_memory_object_stream[Trip](float("inf"))

    def report(event: SagaEvent) -> None:
        say(f"ev {type(event).__name__} {event.run_id}")

    journal = CancellingJournal(Path(journal_path), trips, send, steps=registered(steps))
    async with journal:
        engine = WorkflowEngine(journal=journal, compensation_retry=RETRY, sinks=[report])
        try:
            recovered = await engine.recover()
        except Exception as exc:  # the parent counts it as a violation: recovery must always work
            say(f"recovery-failed {type(exc).__name__}")
            recovered = ()
        say(f"recovered {len(recovered)}")
        native = sniffio.current_async_library() == "asyncio"
        batch = [Trip(plan) for plan in life_plans(life, seed, count, native=native)]
        trips.update((trip.plan.run_id, trip) for trip in batch)
        await run_wave(
            engine,
            steps,
            batch,
            receive,
            lambda trip: say(f"outcome {trip.plan.run_id} {trip.outcome and trip.outcome.name}"),
        )
        say("idle")
        # The parent kills every worker. Should the parent itself die first, its end of our stdin
        # closes: leave then, rather than idle forever as an orphan.
        while await anyio.to_thread.run_sync(os.read, 0, 1024, abandon_on_cancel=True):
            pass


def zygote(journal_path: str, ledger_path: str) -> None:
    say("ready")
    for line in sys.stdin:
        _, life, seed, count, backend = line.split()
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                say(f"pid {os.getpid()}")
                anyio.run(live, journal_path, ledger_path, int(life), int(seed), int(count), backend=backend)
            finally:
                os._exit(1)  # never run the zygote's loop in a worker
        _, status = os.waitpid(pid, 0)
        say(f"exit {pid} {status}")


# -- the parent ------------------------------------------------------------------------------------


class KillRun:
    """Lives of the child, each killed after a random number of events, then a check of everything.

    `kills` lives are killed at a random event (the last of them may be idle by then); one more
    life only recovers. Trips per life and the backend of each life come from `seed`.
    """

    def __init__(
        self, folder: Path, seed: int, *, trips: int = 8, backends: tuple[str, ...] = ("asyncio", "trio")
    ):
        self.seed = seed
        self.rng = random.Random(seed)
        self.trips_per_life = trips
        self.backends = backends
        self.journal = folder / f"kill-journal-{seed}.db"
        self.ledger = folder / f"kill-ledger-{seed}.db"
        self.trips: dict[str, Trip] = {}
        self.before: dict[str, RunInfo] = {}
        self.interrupted: set[str] = set()
        self.applied_undos: Counter[str] = Counter()
        self.tally = Tally()
        self.recovery_problems: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.kill_faults_child", str(self.journal), str(self.ledger)],
            cwd=ROOT,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        self.fd = self.process.stdout.fileno()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.pending = b""
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

    def life(self, number: int, *, kill: bool) -> None:
        """One worker: recover, run the life's trips, and be killed at a random event (or once idle)."""
        seed = self.rng.randrange(2**31)
        backend = self.rng.choice(self.backends)
        count = self.trips_per_life if kill else 0
        plans = life_plans(number, seed, count, native=backend == "asyncio")
        lives = {plan.run_id: Trip(plan) for plan in plans}
        self.trips.update(lives)
        assert self.process.stdin is not None
        self.process.stdin.write(f"life {number} {seed} {count} {backend}\n".encode())
        self.process.stdin.flush()
        words = self.read()
        assert words[0] == "pid", words
        pid = int(words[1])
        kill_after = self.rng.randint(0, 12 * count) if kill else None
        seen = 0
        while True:
            if kill_after is not None and seen >= kill_after:
                break
            words = self.read()
            if words[0] == "ev":
                seen += 1
            elif words[0] == "idle":
                break
            else:
                self.note(words, lives)
        os.kill(pid, signal.SIGKILL)
        self.tally.kills += kill
        self.tally.waves += bool(count)
        while (words := self.read())[0] != "exit":
            self.note(words, lives)  # lines written before the kill landed
        assert words[1:] == [str(pid), str(signal.SIGKILL)], words
        # Before the next life recovers: what each ended call left in the journal.
        # (A worker killed before it opened the journal left no file.)
        infos = {info.run_id: info for info in read_runs(self.journal)} if self.journal.exists() else {}
        for run_id, trip in lives.items():
            if run_id in infos:
                self.before[run_id] = infos[run_id]
            if trip.outcome is None:
                self.interrupted.add(run_id)  # killed before its call ended: recovery's business

    def note(self, words: list[str], lives: dict[str, Trip]) -> None:
        if words[0] == "outcome":
            lives[words[1]].outcome = Outcome[words[2]]
        elif words[0] == "undo" and words[2] == "True":
            self.applied_undos[words[1]] += 1
        elif words[0] == "recovered":
            self.tally.recoveries += 1
            self.tally.recovered_runs += int(words[1])
        elif words[0] == "recovery-failed":
            self.recovery_problems.append(words[1])

    def run(self, kills: int) -> Tally:
        """`kills` killed lives and a last one that recovers; the tally, violations included."""
        try:
            for number in range(kills):
                self.life(number, kill=True)
            self.life(kills, kill=False)
        finally:
            self.close()
        ledger = Ledger(self.ledger)
        try:
            live = Effects(ledger).live()
        finally:
            ledger.close()
        tally = tally_trips(self.trips.values())
        tally.add(self.tally)
        tally.violations.extend(
            check(
                self.seed,
                self.journal,
                trips=self.trips,
                before=self.before,
                live=live,
                ever=ever_done(self.ledger),
                applied_undos=self.applied_undos,
                recovery_problem="; ".join(self.recovery_problems),
                poisoned=None,
                interrupted=frozenset(self.interrupted),
            )
        )
        for info in read_runs(self.journal):
            tally.statuses[info.status.value] += 1
        unfinished = [r.run_id for r in read_runs(self.journal) if r.status not in FINISHED_STATUSES]
        if unfinished:
            tally.violations.append(f"seed {self.seed}: unfinished after the last recovery: {unfinished}")
        return tally

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(LINE_TIMEOUT)


FINISHED_STATUSES = (SagaStatus.COMMITTED, SagaStatus.ROLLED_BACK, SagaStatus.STUCK)


def ever_done(ledger: Path) -> set[str]:
    """Every key the ledger file ever booked or charged under, undone since or not (read as the file is)."""
    db = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT idempotency_key FROM bookings UNION SELECT idempotency_key FROM charges"
        ).fetchall()
    finally:
        db.close()
    return {str(key) for (key,) in rows if key is not None}


# -- the travel server the HTTP kill test serves ----------------------------------------------------


def http_travel_app() -> AegisMCP:
    """The travel agent over a ledger file, journaling to a file, with slow tools and declined cards.

    Served by ``aegis-nb serve tests.kill_faults_child:http_travel_app --transport http``; the files
    and the fault seed come from ``AEGIS_FAULTS_LEDGER``, ``AEGIS_FAULTS_JOURNAL`` and
    ``AEGIS_FAULTS_SEED``, since the command line names the app only.
    """
    seed = int(os.environ["AEGIS_FAULTS_SEED"])
    slow = {
        tool: ToolFaults(latency=Latency.uniform(0.0, 0.01, seed=seed + i))
        for i, tool in enumerate(("book_flight", "reserve_hotel", "cancel_flight", "cancel_hotel"))
    }
    declined = ToolFaults(latency=Latency.uniform(0.0, 0.01, seed=seed + 10), fail_rate=0.25, seed=seed + 11)
    agency = TravelAgency(
        Ledger(os.environ["AEGIS_FAULTS_LEDGER"]), FaultPlan({**slow, "charge_card": declined})
    )
    return travel_app(agency, journal=os.environ["AEGIS_FAULTS_JOURNAL"], workflow_timeout=None)


if __name__ == "__main__":
    zygote(sys.argv[1], sys.argv[2])
