"""Fault injection on the durable journal: concurrent trips, cancelled callers, failing undos, recovery.

The harness behind `tests/test_journal_under_faults.py`, `tests/soak.py` and the kill child. Waves of
trips (BookFlight -> ReserveHotel -> ChargeCard, acting on the mock agency's `Ledger` by idempotency
key) run at once on one `SqliteJournal`. A seeded `random.Random` gives each trip its faults:

- its caller's cancellation at one point: inside a step (before or after its effect), inside a
  compensation, around one journal write (at an await of the journal's before it writes, pending as
  the write starts, while it is in flight in the group commit, just after it returns; the k-th write
  or the run's end), or from a sink at the k-th event; by an anyio cancel scope, or on asyncio by a
  native ``asyncio.timeout``;
- a step that fails, and undos that fail (transiently, after acting, or for good);
- in one variant, a real write failure: a SQLite trigger that refuses one event of one trip.

Then the journal is closed, a fresh `SqliteJournal` on the same file recovers (as a new process
would), and `check` lists every violated invariant (see its docstring). Nothing here prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import math
import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import sniffio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from aegis_nb import AegisContext, RetryPolicy, SagaCompensationFailed, SagaRolledBack, WorkflowEngine
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.mock import BookingKind, Ledger
from aegis_nb.saga.durable import JournaledRun, JournalError, RunInfo, SqliteJournal, read_run, read_runs
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepEvent,
)

STEPS = ("flight", "hotel", "charge")
"""The trip's steps, in order; flight and charge are in doubt (their effect may land before a failure)."""

IN_DOUBT = frozenset({0, 2})
ALL_IN_DOUBT = frozenset({0, 1, 2})
"""Across a SIGKILL every step must be in doubt: a plain step's effect outlives a crash that comes
before its success is journaled (the journal's documented contract), as the travel steps' would."""
RETRY = RetryPolicy(attempts=3, initial_delay=0.0)
"""Three attempts per undo and no backoff: a transient undo fault (one or two failures) heals."""

SAGA = "trip"
FINAL = (SagaCommitted, SagaRolledBackEvent, SagaStuck)


class CancelPoint(enum.Enum):
    """Where a trip's caller goes away (its cancel scope is cancelled)."""

    NONE = "none"
    STEP_BEFORE_EFFECT = "step, before its effect"
    STEP_AFTER_EFFECT = "step, after its effect"
    COMPENSATION = "compensation"
    BEFORE_WRITE = "at a journal's await before it writes"
    PENDING_WRITE = "as a journal write starts"
    IN_FLIGHT_WRITE = "while a journal write is in flight"
    AFTER_WRITE = "just after a journal write"
    SINK = "sink, at an event"


WRITE_POINTS = (
    CancelPoint.BEFORE_WRITE,
    CancelPoint.PENDING_WRITE,
    CancelPoint.IN_FLIGHT_WRITE,
    CancelPoint.AFTER_WRITE,
)


class Canceller(enum.Enum):
    """How the caller is cancelled: an anyio cancel scope, or asyncio's own ``asyncio.timeout``."""

    ANYIO = "anyio cancel scope"
    ASYNCIO_TIMEOUT = "asyncio.timeout"


class UndoFault(enum.Enum):
    """How a step's compensation misbehaves (journaled as a saga argument, so recovery sees it too)."""

    NONE = "none"
    TRANSIENT_1 = "fails once, before acting"
    TRANSIENT_2 = "fails twice, before acting"
    AFTER_EFFECT = "acts, then fails once"
    PERMANENT = "always fails"


class Outcome(enum.Enum):
    """What the caller saw."""

    COMMITTED = "returned committed"
    ROLLED_BACK = "SagaRolledBack"
    STUCK = "SagaCompensationFailed"
    CANCELLED = "cancelled"
    JOURNAL_ERROR = "JournalError"
    UNEXPECTED = "unexpected exception"


OUTCOME_STATUS = {
    Outcome.COMMITTED: SagaStatus.COMMITTED,
    Outcome.ROLLED_BACK: SagaStatus.ROLLED_BACK,
    Outcome.STUCK: SagaStatus.STUCK,
}
FINISHED = frozenset({SagaStatus.COMMITTED, SagaStatus.ROLLED_BACK, SagaStatus.STUCK})


@dataclass(frozen=True, slots=True)
class TripPlan:
    """One trip's faults: where its caller is cancelled and how, which step fails, which undos fail.

    `target` is the step index (step and compensation points), the write number (write points,
    -1: the run's end) or the event number (sink).
    """

    run_id: str
    cancel: CancelPoint
    target: int
    canceller: Canceller
    failing_step: int | None
    undo_faults: tuple[UndoFault, UndoFault, UndoFault]
    poisoned_write: int | None = None  # the seq of this run's event a trigger refuses to store


def plan_trip(rng: random.Random, run_id: str, *, native: bool, cancels: bool = True) -> TripPlan:
    """A trip's faults, drawn from `rng`; `native` allows asyncio's own cancellation, `cancels` any."""
    points = (
        [CancelPoint.NONE] * 2 + [p for p in CancelPoint if p is not CancelPoint.NONE] + list(WRITE_POINTS)
    )
    cancel = rng.choice(points) if cancels else CancelPoint.NONE
    failing: int | None = rng.choice([None, None, 0, 1, 2])
    target = 0
    if cancel is CancelPoint.STEP_BEFORE_EFFECT:
        target = rng.randrange(3)
    elif cancel is CancelPoint.STEP_AFTER_EFFECT:
        target = rng.choice(sorted(IN_DOUBT))  # the plain step acts as it returns: nothing after
    elif cancel is CancelPoint.COMPENSATION:
        failing = rng.choice([1, 2])  # something to compensate
        target = rng.randrange(failing + 1)
    elif cancel in WRITE_POINTS:
        target = rng.choice([-1, -1, *range(10)])  # half of them at the run's end
    elif cancel is CancelPoint.SINK:
        target = rng.randrange(10)
    undo = tuple(
        rng.choice([UndoFault.NONE] * 5 + [u for u in UndoFault if u is not UndoFault.NONE]) for _ in STEPS
    )
    canceller = rng.choice(list(Canceller)) if native else Canceller.ANYIO
    return TripPlan(run_id, cancel, target, canceller, failing, (undo[0], undo[1], undo[2]))


@dataclass
class Trip:
    """A trip in progress: its plan, how to cancel its caller, and what the caller saw."""

    plan: TripPlan
    outcome: Outcome | None = None
    error: str = ""
    cancel_caller: Callable[[], object] | None = None
    cancel_requested: bool = False
    writes: int = 0
    events: int = 0

    def cancel(self) -> None:
        """Cancel the caller (once); the point it lands at is the harness's business."""
        if not self.cancel_requested and self.cancel_caller is not None:
            self.cancel_requested = True
            self.cancel_caller()


# -- the ledger and the steps ------------------------------------------------------------------------


class Effects:
    """The agency's ledger of real effects, by idempotency key, and every undo that changed it."""

    def __init__(self, ledger: Ledger, on_undo: Callable[[str, bool], None] | None = None) -> None:
        self.ledger = ledger
        self.applied_undos: Counter[str] = Counter()
        self.undo_calls: Counter[str] = Counter()
        self.done: set[str] = set()
        self.on_undo = on_undo

    def do(self, index: int, key: str) -> None:
        """Book or charge under `key` (idempotent; refused once the key was voided by an undo)."""
        if index == 0:
            self.ledger.book(BookingKind.FLIGHT, "Lisbon", "AE123", 12000, idempotency_key=key)
        elif index == 1:
            self.ledger.book(BookingKind.HOTEL, "Lisbon", "Alfama", 30000, nights=2, idempotency_key=key)
        else:
            self.ledger.charge(42000, "4242", idempotency_key=key)
        self.done.add(key)

    def undo(self, index: int, key: str) -> None:
        if index == 2:
            changed = self.ledger.refund(idempotency_key=key).changed
        else:
            kind = BookingKind.FLIGHT if index == 0 else BookingKind.HOTEL
            changed = self.ledger.cancel(kind, idempotency_key=key).changed
        self.undo_calls[key] += 1
        if changed:
            self.applied_undos[key] += 1
        if self.on_undo is not None:
            self.on_undo(key, changed)

    def live(self) -> set[str]:
        """The keys of every live booking and charge."""
        state = self.ledger.state()
        bookings = {str(b.idempotency_key) for b in (*state.flights, *state.hotels)}
        return bookings | {str(c.idempotency_key) for c in state.charges}


class InjectedFailure(Exception):
    """A step or an undo failing on purpose."""


class TripStep:
    """One step of the trip, acting on `effects` by its idempotency key; faults from `trips`.

    In a process that did not start the run (recovery after a kill), `trips` has no entry for it:
    only the undo faults apply, which travel with the run as its ``undo`` argument.
    """

    def __init__(self, index: int, effects: Effects, trips: dict[str, Trip], *, in_doubt: bool) -> None:
        self.index = index
        self.name = STEPS[index]
        self.in_doubt = in_doubt
        self.effects = effects
        self.trips = trips
        self.undo_failures: Counter[str] = Counter()

    async def execute(self, ctx: AegisContext, undo: str = "none") -> AegisContext:
        key = _key(ctx)
        trip = self.trips.get(str(ctx.run_id))
        await anyio.lowlevel.checkpoint()
        if trip is not None and _at(trip, CancelPoint.STEP_BEFORE_EFFECT, self.index):
            trip.cancel()
            await anyio.lowlevel.checkpoint()
        if trip is not None and trip.plan.failing_step == self.index and not self.in_doubt:
            raise InjectedFailure(f"{self.name} refused")
        self.effects.do(self.index, key)
        if not self.in_doubt:
            return ctx.with_metadata({self.name: key})  # acted as it returns: no await after the effect
        if trip is not None and _at(trip, CancelPoint.STEP_AFTER_EFFECT, self.index):
            trip.cancel()
        await anyio.lowlevel.checkpoint()
        if trip is not None and trip.plan.failing_step == self.index:
            raise InjectedFailure(f"{self.name} failed after acting")
        return ctx.with_metadata({self.name: key})

    async def compensate(self, ctx: AegisContext, undo: str = "none") -> None:
        key = _key(ctx)
        fault = UndoFault(undo)
        trip = self.trips.get(str(ctx.run_id))
        await anyio.lowlevel.checkpoint()
        if trip is not None and _at(trip, CancelPoint.COMPENSATION, self.index):
            trip.cancel()  # shielded: lands once the rollback is done
            await anyio.lowlevel.checkpoint()
        failures = self.undo_failures[key]
        if fault is UndoFault.PERMANENT or failures < {
            UndoFault.TRANSIENT_1: 1,
            UndoFault.TRANSIENT_2: 2,
        }.get(fault, 0):
            self.undo_failures[key] += 1
            raise InjectedFailure(f"{self.name} cannot be undone now")
        self.effects.undo(self.index, key)
        if fault is UndoFault.AFTER_EFFECT and failures == 0:
            self.undo_failures[key] += 1
            await anyio.lowlevel.checkpoint()
            raise InjectedFailure(f"{self.name} undone, but the answer was lost")


def _key(ctx: AegisContext) -> str:
    key = ctx.idempotency_key
    assert key is not None
    return key


def _at(trip: Trip, point: CancelPoint, target: int) -> bool:
    return trip.plan.cancel is point and trip.plan.target == target


def trip_steps(
    effects: Effects, trips: dict[str, Trip], *, in_doubt: frozenset[int] = IN_DOUBT
) -> tuple[TripStep, TripStep, TripStep]:
    """The trip's three steps; those at `in_doubt` are compensated even if they fail or are cut off."""
    flight, hotel, charge = (TripStep(i, effects, trips, in_doubt=i in in_doubt) for i in range(3))
    return flight, hotel, charge


def registered(steps: Sequence[TripStep]) -> dict[str, object]:
    """The steps as a journal registers them, by name: recovery rebuilds nothing else."""
    return {step.name: step for step in steps}


def saga_of(steps: Sequence[TripStep], plan: TripPlan) -> list[tuple[object, tuple[()], dict[str, str]]]:
    return [(step, (), {"undo": plan.undo_faults[step.index].value}) for step in steps]


# -- the journal that cancels its callers ----------------------------------------------------------


class CancellingJournal(SqliteJournal):
    """A `SqliteJournal` that cancels a trip's caller around the trip's chosen write.

    Only the public `append` is wrapped. "In flight" hands the trip to a helper task that cancels
    it as soon as it runs, which is the first time the writing task yields inside the write (waiting
    on the group commit it submitted to); a write that never yields is cancelled just after it.
    """

    def __init__(
        self, path: Path, trips: dict[str, Trip], in_flight: MemoryObjectSendStream[Trip], **kwargs: Any
    ) -> None:
        super().__init__(path, **kwargs)
        self.trips = trips
        self.in_flight = in_flight

    async def append(self, event: SagaEvent) -> None:
        trip = self.trips.get(event.run_id)
        if trip is None or trip.plan.cancel not in WRITE_POINTS:
            await super().append(event)
            return
        number, trip.writes = trip.writes, trip.writes + 1
        target = trip.plan.target
        if not (number == target or (target == -1 and isinstance(event, FINAL))):
            await super().append(event)
            return
        point = trip.plan.cancel
        if point is CancelPoint.BEFORE_WRITE:
            # Cancelled at an await of the journal's own before it writes (opening its file, taking
            # a lock): as `Journal.append` promises, the event is still recorded, then the
            # cancellation raised. (A journal that let it cut the write off would leave the engine
            # unsure whether the event is on disk.)
            trip.cancel()
            try:
                await anyio.lowlevel.checkpoint()
            except anyio.get_cancelled_exc_class():
                await super().append(event)
                raise
        elif point is CancelPoint.PENDING_WRITE:
            trip.cancel()
        elif point is CancelPoint.IN_FLIGHT_WRITE:
            self.in_flight.send_nowait(trip)
        await super().append(event)
        if point is CancelPoint.AFTER_WRITE:
            trip.cancel()


def cancelling_sink(trip: Trip) -> Callable[[SagaEvent], None]:
    """A sink that cancels the trip's caller at its k-th event (sinks are called once it is journaled)."""

    def sink(event: SagaEvent) -> None:
        trip.events += 1
        if trip.plan.cancel is CancelPoint.SINK and trip.events - 1 == trip.plan.target:
            trip.cancel()

    return sink


def poison(path: Path, run_id: str, seq: int) -> None:
    """Make the journal file refuse to store event `seq` of `run_id`, as a failing disk would."""
    db = sqlite3.connect(path)
    try:
        db.execute(
            "CREATE TRIGGER injected_write_failure BEFORE INSERT ON events"
            f" WHEN NEW.seq = {int(seq)}"
            f" AND NEW.run_no = (SELECT run_no FROM runs WHERE run_id = {_quoted(run_id)})"
            " BEGIN SELECT RAISE(ABORT, 'injected write failure'); END"
        )
        db.commit()
    finally:
        db.close()


def heal(path: Path) -> None:
    """Drop the injected write failure (the disk works again)."""
    db = sqlite3.connect(path)
    try:
        db.execute("DROP TRIGGER IF EXISTS injected_write_failure")
        db.commit()
    finally:
        db.close()


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# -- running ---------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What a harness run did and found, for the soak's report."""

    sagas: int = 0
    waves: int = 0
    cancellations: Counter[str] = field(default_factory=Counter)
    cancelled_callers: int = 0
    step_failures: int = 0
    compensation_failures: int = 0
    write_failures: int = 0
    kills: int = 0
    recoveries: int = 0
    recovered_runs: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        for name in ("sagas", "waves", "cancelled_callers", "step_failures", "compensation_failures"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("write_failures", "kills", "recoveries", "recovered_runs"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.cancellations.update(other.cancellations)
        self.outcomes.update(other.outcomes)
        self.statuses.update(other.statuses)
        self.violations.extend(other.violations)

    def lines(self) -> list[str]:
        return [
            f"sagas {self.sagas} in {self.waves} waves; callers cancelled {self.cancelled_callers}",
            "cancellations by point: "
            + ", ".join(f"{point.value} {self.cancellations[point.name]}" for point in CancelPoint),
            f"step failures {self.step_failures}, compensation failures {self.compensation_failures}, "
            f"write failures {self.write_failures}",
            f"kills {self.kills}, recoveries {self.recoveries} ({self.recovered_runs} runs recovered)",
            "caller outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())),
            "journal statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items())),
            f"invariant violations {len(self.violations)}",
        ]


async def call_trip(engine: WorkflowEngine, steps: Sequence[TripStep], trip: Trip) -> None:
    """Run one trip as a client would, inside a cancel scope its faults may cancel; keep what it saw."""
    try:
        await _call_trip(engine, steps, trip)
    finally:
        trip.cancel_caller = None  # a recovery's compensation must not reach a call that is over


async def _call_trip(engine: WorkflowEngine, steps: Sequence[TripStep], trip: Trip) -> None:
    plan = trip.plan
    sinks = [cancelling_sink(trip)]
    try:
        if plan.canceller is Canceller.ASYNCIO_TIMEOUT:
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(None) as timeout:
                    trip.cancel_caller = lambda: timeout.reschedule(loop.time())
                    run = await engine.run_saga(
                        saga_of(steps, plan), name=SAGA, sinks=sinks, run_id=plan.run_id
                    )
            except TimeoutError:
                trip.outcome = Outcome.CANCELLED
                return
        else:
            with anyio.CancelScope() as scope:
                trip.cancel_caller = scope.cancel
                run = await engine.run_saga(saga_of(steps, plan), name=SAGA, sinks=sinks, run_id=plan.run_id)
            if scope.cancelled_caught:
                trip.outcome = Outcome.CANCELLED
                return
    except JournalError as exc:
        trip.outcome, trip.error = Outcome.JOURNAL_ERROR, repr(exc)
        return
    except Exception as exc:
        trip.outcome, trip.error = Outcome.UNEXPECTED, repr(exc)
        return
    if run.error is None:
        trip.outcome = Outcome.COMMITTED
    elif isinstance(run.error, SagaCompensationFailed):
        trip.outcome = Outcome.STUCK
    elif isinstance(run.error, SagaRolledBack):
        trip.outcome = Outcome.ROLLED_BACK
    else:
        trip.outcome, trip.error = Outcome.UNEXPECTED, repr(run.error)


async def run_wave(
    engine: WorkflowEngine,
    steps: Sequence[TripStep],
    trips: Iterable[Trip],
    receive: MemoryObjectReceiveStream[Trip],
    ended: Callable[[Trip], object] = lambda trip: None,
) -> None:
    """Every trip at once, each `ended` as its call ends; the in-flight canceller runs beside them,
    outside their cancel scopes."""

    async def cancel_in_flight() -> None:
        async for trip in receive:
            trip.cancel()

    async def call(trip: Trip) -> None:
        await call_trip(engine, steps, trip)
        ended(trip)

    async with anyio.create_task_group() as outer:
        outer.start_soon(cancel_in_flight)
        async with anyio.create_task_group() as group:
            for trip in trips:
                group.start_soon(call, trip)
        outer.cancel_scope.cancel()


def life_plans(life: int, seed: int, count: int, *, native: bool) -> list[TripPlan]:
    """The trips one life of the kill child starts: the child and the parent draw the same ones."""
    rng = random.Random(seed)
    return [plan_trip(rng, f"l{life}-t{number}", native=native) for number in range(count)]


@dataclass(frozen=True, slots=True)
class Scenario:
    """One harness run: `waves` waves of `per_wave` trips on one journal, from `seed`.

    With `write_failure`, one trip's event is refused by the file and no caller is cancelled: the
    write failure is then the one fault that can reach another run.
    """

    seed: int
    waves: int = 4
    per_wave: int = 12
    write_failure: bool = False


async def run_scenario(scenario: Scenario, folder: Path) -> Tally:
    """Run the waves, close the journal, recover on a fresh one, and check every invariant."""
    rng = random.Random(scenario.seed)
    native = sniffio.current_async_library() == "asyncio"
    path = folder / f"journal-{scenario.seed}.db"
    effects = Effects(Ledger())
    trips: dict[str, Trip] = {}
    steps = trip_steps(effects, trips)
    tally = Tally()
    poisoned: str | None = None
    if scenario.write_failure:
        async with SqliteJournal(path) as fresh:  # the schema, so the trigger has a table to sit on
            await fresh.open()
        wave, number = rng.randrange(scenario.waves), rng.randrange(scenario.per_wave)
        poisoned = f"s{scenario.seed}-w{wave}-t{number}"
        poisoned_seq = rng.randrange(1, 7)
        poison(path, poisoned, poisoned_seq)
    send, receive = anyio.create_memory_object_stream[Trip](math.inf)
    journal = CancellingJournal(path, trips, send, steps=registered(steps))
    engine = WorkflowEngine(journal=journal, compensation_retry=RETRY)
    try:
        for wave in range(scenario.waves):
            batch = []
            for number in range(scenario.per_wave):
                run_id = f"s{scenario.seed}-w{wave}-t{number}"
                plan = plan_trip(rng, run_id, native=native, cancels=not scenario.write_failure)
                if run_id == poisoned:  # a clean trip, so its write failure is all that happens to it
                    plan = TripPlan(
                        run_id,
                        CancelPoint.NONE,
                        0,
                        Canceller.ANYIO,
                        None,
                        (UndoFault.NONE,) * 3,
                        poisoned_seq,
                    )
                batch.append(Trip(plan))
            trips.update((t.plan.run_id, t) for t in batch)
            await run_wave(engine, steps, batch, receive)
            tally.waves += 1
    finally:
        await journal.aclose()
    if poisoned is not None:
        heal(path)
    tally.add(tally_trips(trips.values()))
    before = {info.run_id: info for info in read_runs(path)}
    recovered: list[str] = []
    problem = ""
    try:
        async with SqliteJournal(path, steps=registered(steps)) as again:
            runs = await WorkflowEngine(journal=again, compensation_retry=RETRY).recover()
            recovered = [run.events[0].run_id for run in runs]
    except Exception as exc:  # recovery must always open the journal and finish
        problem = repr(exc)
    tally.recoveries += 1
    tally.recovered_runs += len(recovered)
    tally.violations.extend(
        check(
            scenario.seed,
            path,
            trips=trips,
            before=before,
            live=effects.live(),
            ever=effects.done,
            applied_undos=effects.applied_undos,
            recovery_problem=problem,
            poisoned=poisoned,
            may_stand=frozenset(
                f"{poisoned}/{i}" for i in range(len(STEPS)) if poisoned is not None and i not in IN_DOUBT
            ),
        )
    )
    for run_id in trips:
        tally.statuses[_status_of(path, run_id)] += 1
    return tally


def _status_of(path: Path, run_id: str) -> str:
    try:
        return read_run(path, run_id).status.value
    except (KeyError, JournalError):
        return "unreadable"


def tally_trips(trips: Iterable[Trip]) -> Tally:
    tally = Tally()
    for trip in trips:
        plan = trip.plan
        tally.sagas += 1
        tally.cancellations[plan.cancel.name] += 1
        tally.cancelled_callers += trip.outcome is Outcome.CANCELLED
        tally.step_failures += plan.failing_step is not None
        tally.compensation_failures += sum(u is not UndoFault.NONE for u in plan.undo_faults)
        tally.write_failures += plan.poisoned_write is not None
        tally.outcomes[trip.outcome.name if trip.outcome else "none"] += 1
    return tally


# -- the invariants ----------------------------------------------------------------------------------


def check(
    seed: int,
    path: Path,
    *,
    trips: dict[str, Trip],
    before: dict[str, RunInfo],
    live: set[str],
    ever: set[str],
    applied_undos: Counter[str],
    recovery_problem: str,
    poisoned: str | None,
    interrupted: frozenset[str] = frozenset(),
    may_stand: frozenset[str] = frozenset(),
) -> list[str]:
    """Every invariant the journal must keep under these faults, as a list of violations (empty: all kept).

    - Recovery opens the journal and finishes (never `JournalCorrupt`).
    - Every run's events are contiguous (seq 0..n-1), start with `SagaStarted` and end with exactly
      one final event; a committed run has no compensation event at all.
    - Every run ends committed, rolled back or stuck once recovered.
    - A run whose call returned or raised was finished in the journal before recovery, unless a write
      of its own really failed (`poisoned`) or its process was killed (`interrupted`).
    - What the caller saw agrees with the journal: a return, `SagaRolledBack` or
      `SagaCompensationFailed` is the run's status; a cancellation may meet any end (after a durable
      commit the run stays committed); `JournalError` only for the run whose write failed.
    - The ledger holds exactly the committed runs' effects, plus what stuck runs report left standing
      (and `may_stand`: a plain step's effect whose journal write failed, which no one can know of);
      no undo changed the ledger twice.
    """
    problems: list[str] = []
    if recovery_problem:
        problems.append(f"seed {seed}: recovery failed: {recovery_problem}")
    must: set[str] = set()  # keys the ledger must hold live
    may: set[str] = set(may_stand)  # and those it may
    for run_id, trip in trips.items():
        problems.extend(_check_run(seed, path, run_id, trip, before.get(run_id), poisoned, interrupted))
        with contextlib.suppress(KeyError, JournalError):
            owned = _owned(read_run(path, run_id))
            must.update(owned & ever)  # a step refused or cut off before acting left nothing
            may.update(owned)
    for info in read_runs(path):
        if info.run_id not in trips:
            problems.append(f"seed {seed}: unknown run {info.run_id} in the journal")
    if not must <= live <= may:
        extra, missing = sorted(live - may), sorted(must - live)
        for key in extra:
            problems.append(
                f"seed {seed}: ledger holds {key} but its run does not own it{_events_of(path, key)}"
            )
        for key in missing:
            problems.append(f"seed {seed}: ledger lost {key} of its run{_events_of(path, key)}")
    for key, count in sorted(applied_undos.items()):
        if count > 1:
            problems.append(f"seed {seed}: undo of {key} applied {count} times")
    return problems


def _check_run(
    seed: int,
    path: Path,
    run_id: str,
    trip: Trip | None,
    info: RunInfo | None,
    poisoned: str | None,
    interrupted: frozenset[str],
) -> list[str]:
    where = f"seed {seed} run {run_id}"
    if trip is not None:
        where += f" ({trip.plan.cancel.value} #{trip.plan.target}, {trip.plan.canceller.value}; caller saw "
        where += (
            f"{trip.outcome.value if trip.outcome else 'nothing'}{' ' + trip.error if trip.error else ''})"
        )
    before = None if info is None else info.status
    where += "; before recovery: " + (
        "no run" if info is None else f"{info.status.value}, {info.events} events"
    )
    try:
        run = read_run(path, run_id)
    except KeyError:
        if trip is not None and trip.outcome in (Outcome.COMMITTED, Outcome.ROLLED_BACK, Outcome.STUCK):
            return [f"{where}: the caller saw an outcome but the journal has no such run"]
        return []  # refused or cancelled before its first write: nothing ran
    except JournalError as exc:
        return [f"{where}: the journal cannot read it back: {exc}"]
    problems = []
    events = run.events
    text = describe(events)
    if [e.seq for e in events] != list(range(len(events))):
        problems.append(f"{where}: events out of sequence:\n{text}")
    if not events or not isinstance(events[0], SagaStarted):
        problems.append(f"{where}: does not start with SagaStarted:\n{text}")
    finals = [i for i, e in enumerate(events) if isinstance(e, FINAL)]
    if run.status not in FINISHED:
        problems.append(f"{where}: still {run.status.value} after recovery:\n{text}")
    elif finals != [len(events) - 1]:
        problems.append(f"{where}: final events at {finals} of {len(events)}:\n{text}")
    compensating = any(
        isinstance(e, CompensationStarted | CompensationSucceeded | CompensationFailed) for e in events
    )
    if run.status is SagaStatus.COMMITTED or any(isinstance(e, SagaCommitted) for e in events):
        if compensating:
            problems.append(f"{where}: a committed run was compensated:\n{text}")
        if run.status is not SagaStatus.COMMITTED:
            problems.append(f"{where}: committed, then ended {run.status.value}:\n{text}")
    if trip is not None:
        out = trip.outcome
        exempt = run_id == poisoned or run_id in interrupted
        if out is not None and not exempt and before not in FINISHED:
            status = "absent" if before is None else before.value
            problems.append(f"{where}: the call ended but the run was {status} until recovery:\n{text}")
        if out in OUTCOME_STATUS and OUTCOME_STATUS[out] is not run.status:
            problems.append(
                f"{where}: the caller saw {out.value}, the journal says {run.status.value}:\n{text}"
            )
        if run_id == poisoned and out is not Outcome.JOURNAL_ERROR:
            problems.append(f"{where}: its write failed, and its caller was not told:\n{text}")
        if out is Outcome.JOURNAL_ERROR and run_id != poisoned:
            problems.append(f"{where}: JournalError without a failed write of its own:\n{text}")
        if out is Outcome.UNEXPECTED:
            problems.append(f"{where}: unexpected outcome:\n{text}")
        if out is None and run_id not in interrupted:
            problems.append(f"{where}: the call never ended:\n{text}")
    return problems


def _owned(run: JournaledRun) -> set[str]:
    """The ledger keys the run's final status lets stand: all three if committed, none if rolled
    back, those of the steps a stuck run reports left standing."""
    if run.status is SagaStatus.COMMITTED:
        return {f"{run.run_id}/{i}" for i in range(len(STEPS))}
    last = run.events[-1] if run.events else None
    if isinstance(last, SagaStuck):
        standing = set(last.report.left_standing)
        return {f"{run.run_id}/{i}" for i, name in enumerate(STEPS) if name in standing}
    return set()


def _events_of(path: Path, key: str) -> str:
    try:
        return ":\n" + describe(read_run(path, key.rsplit("/", 1)[0]).events)
    except (KeyError, JournalError) as exc:
        return f" ({exc!r})"


def describe(events: Sequence[SagaEvent]) -> str:
    """One line per event: seq, type, step, attempt (what a reader needs to follow a run)."""
    lines = []
    for event in events:
        line = f"  {event.seq:2} {type(event).__name__}"
        if isinstance(event, StepEvent):
            line += f" {event.step}"
        attempt = getattr(event, "attempt", None)
        if attempt is not None:
            line += f" #{attempt}"
        lines.append(line)
    return "\n".join(lines)
