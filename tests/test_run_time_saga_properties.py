"""Property tests of run-time sagas: random steps and parallel groups, as a list and step by step.

Hypothesis draws sagas of single steps and parallel groups (either compensation order); a step may
succeed, fail, time out on its own timeout or at the saga's deadline, cancel its caller, or (in a
group that another member breaks) hang until it is cancelled; any may be in doubt, and any
compensation may fail once, fail until it is given up on, or cancel the caller while it runs. Each
saga runs twice, as a list (`run_saga`) and as the same steps through ``engine.saga()`` (`Saga.step`,
`Saga.parallel`), on asyncio and trio, on a virtual clock (trio's `MockClock`, and an asyncio loop
whose clock jumps to its next timer when it has nothing else to do): timeouts take no real time.

Checked on a ledger of the effects the steps write: the forward part ran what it had to, each step
on its predecessor's context and members on their group's; what is compensated is exactly what
succeeded plus the in-doubt failures, each with its own snapshot, newest first (a concurrent group's
members in any order, all of them together; a reverse_start group's strictly newest start first);
nothing ran after the saga's final event and no step's coroutine is left running; the events are
well formed; and the list and the dynamic saga emit the same events, but for `SagaStarted.steps`,
run ids and times.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import selectors
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import anyio
import pytest
import trio.testing
from hypothesis import event as note_case
from hypothesis import given, settings
from hypothesis import strategies as st

from aegis_nb import (
    AegisContext,
    CompensationFailed,
    CompensationOrder,
    CompensationStarted,
    CompensationSucceeded,
    ErrorInfo,
    FailureKind,
    RetryPolicy,
    SagaCommitted,
    SagaCompensationFailed,
    SagaFailed,
    SagaRolledBack,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
    WorkflowEngine,
    parallel,
)
from aegis_nb.saga.events import SagaEvent, StepEvent, is_final
from aegis_nb.testing import EventCapture, InjectedFailure
from tests.steps import CheckpointingJournal

ATTEMPTS = 2
"""Compensation attempts per step; a compensation failing this many times is given up on."""

STEP_TIMEOUT = 10.0
SAGA_DEADLINE = 1000.0
"""Virtual seconds: a step with its own timeout hits it first, a step without one the saga's."""


# -- the plan ---------------------------------------------------------------------------------------


class Fate(enum.Enum):
    """What a step's execute does."""

    SUCCEED = "succeed"
    FAIL = "fail"
    TIME_OUT = "time out (own timeout)"
    PAST_DEADLINE = "run into the saga's deadline"
    CANCEL = "cancel its caller"
    HANG = "wait until cancelled"

    @property
    def breaks(self) -> bool:
        """Whether this fate ends the saga's forward part (a hang only ever ends by another's)."""
        return self not in (Fate.SUCCEED, Fate.HANG)


class Undo(enum.Enum):
    """What a step's compensation does."""

    SUCCEED = "succeed"
    FAIL_ONCE = "fail once, then succeed"
    GIVE_UP = "fail every attempt"
    CANCEL_CALLER = "cancel the caller, then succeed"

    @property
    def failures(self) -> int:
        return {Undo.FAIL_ONCE: 1, Undo.GIVE_UP: ATTEMPTS}.get(self, 0)


@dataclass(frozen=True)
class StepPlan:
    fate: Fate
    in_doubt: bool
    undo: Undo


@dataclass(frozen=True)
class GroupPlan:
    members: tuple[StepPlan, ...]
    order: CompensationOrder


EntryPlan: TypeAlias = StepPlan | GroupPlan


@dataclass(frozen=True)
class Plan:
    entries: tuple[EntryPlan, ...]
    journaled: bool = False  # on a journal whose every write awaits (a cancellation could land there)

    def placed(self) -> Iterator[tuple[int, EntryPlan]]:
        """Each entry with its first flat index (members have consecutive ones)."""
        index = 0
        for entry in self.entries:
            yield index, entry
            index += len(entry.members) if isinstance(entry, GroupPlan) else 1


step_plans = st.builds(
    StepPlan,
    fate=st.sampled_from([Fate.SUCCEED] * 6 + [Fate.FAIL, Fate.TIME_OUT, Fate.CANCEL, Fate.HANG]),
    in_doubt=st.booleans(),
    undo=st.sampled_from([Undo.SUCCEED] * 4 + list(Undo)),
)


def single(step: StepPlan) -> StepPlan:
    """A step outside a group: it cannot hang (nothing would cut it short); it may hit the deadline."""
    return dataclasses.replace(step, fate=Fate.PAST_DEADLINE) if step.fate is Fate.HANG else step


@st.composite
def groups(draw: st.DrawFn) -> GroupPlan:
    """At most one member breaks the group (two would race); members hang only if one does."""
    members = draw(st.lists(step_plans, min_size=1, max_size=4))
    breakers = [n for n, member in enumerate(members) if member.fate.breaks]
    fixed = []
    for n, member in enumerate(members):
        fate = member.fate
        if fate.breaks and n != breakers[0]:
            fate = Fate.HANG
        if fate is Fate.HANG and not breakers:
            fate = Fate.SUCCEED
        fixed.append(dataclasses.replace(member, fate=fate))
    return GroupPlan(tuple(fixed), draw(st.sampled_from(CompensationOrder)))


plans = st.builds(Plan, st.lists(step_plans.map(single) | groups(), min_size=1, max_size=7).map(tuple))


# -- the world the steps act on ---------------------------------------------------------------------


class Effect(enum.Enum):
    EXECUTE = "execute"
    RETURN = "execute returned"
    COMPENSATE = "compensate"
    END = "the saga's final event"


@dataclass(frozen=True)
class Entry:
    """One line of the ledger: an effect of step `index` (-1 for END), with the context it saw."""

    effect: Effect
    index: int
    key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class Boom(InjectedFailure):
    """A step's failure."""


class UndoFailed(InjectedFailure):
    """A compensation's failure."""


class World:
    """The ledger every step writes, the count of step coroutines running, and the caller's scope."""

    def __init__(self, journaled: bool) -> None:
        self.ledger: list[Entry] = []
        self.live = 0
        self.caller = anyio.CancelScope()
        self.capture = EventCapture()
        self.journal = CheckpointingJournal() if journaled else None

    def sink(self, event: SagaEvent) -> None:
        self.capture(event)
        if is_final(event):
            self.ledger.append(Entry(Effect.END, -1))


class Barrier:
    """Lets a group's breaking member wait until every succeeding member has returned.

    Without it, which members succeed before the breaker cancels them would depend on scheduling
    (trio runs ready tasks in a random order), and so would the events.
    """

    def __init__(self, succeeding: int) -> None:
        self.left = succeeding
        self.done = anyio.Event()
        if not succeeding:
            self.done.set()

    def arrive(self) -> None:
        self.left -= 1
        if not self.left:
            self.done.set()


class Probe:
    """A step that does what its `StepPlan` says and writes every call to the world's ledger."""

    def __init__(self, index: int, plan: StepPlan, world: World, barrier: Barrier | None) -> None:
        self.name = f"s{index}"
        self.index = index
        self.plan = plan
        self.world = world
        self.barrier = barrier
        self.in_doubt = plan.in_doubt
        if plan.fate is Fate.TIME_OUT:
            self.timeout = STEP_TIMEOUT
        self.undo_attempts = 0

    def _write(self, effect: Effect, ctx: AegisContext) -> None:
        self.world.ledger.append(Entry(effect, self.index, ctx.idempotency_key, ctx.to_json()))

    async def execute(self, ctx: AegisContext) -> AegisContext:
        world = self.world
        world.live += 1
        try:
            self._write(Effect.EXECUTE, ctx)
            fate = self.plan.fate
            if fate is Fate.SUCCEED:
                await anyio.lowlevel.checkpoint()
                self._write(Effect.RETURN, ctx)
                if self.barrier is not None:
                    self.barrier.arrive()
                return ctx.with_metadata({self.name: self.name})
            if self.barrier is not None and fate is not Fate.HANG:
                await self.barrier.done.wait()
            if fate is Fate.FAIL:
                raise Boom(f"{self.name} failed")
            if fate is Fate.CANCEL:
                world.caller.cancel()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            world.live -= 1

    async def compensate(self, ctx: AegisContext) -> None:
        world = self.world
        world.live += 1
        try:
            self._write(Effect.COMPENSATE, ctx)
            self.undo_attempts += 1
            if self.plan.undo is Undo.CANCEL_CALLER:
                world.caller.cancel()  # the rollback is shielded: this changes nothing in it
            await anyio.lowlevel.checkpoint()
            if self.undo_attempts <= self.plan.undo.failures:
                raise UndoFailed(f"{self.name} could not be undone")
        finally:
            world.live -= 1


def probes(plan: Plan, world: World) -> list[Probe | tuple[Probe, ...]]:
    """The plan's entries as steps: a probe per single step, a tuple of probes per group."""
    built: list[Probe | tuple[Probe, ...]] = []
    for start, entry in plan.placed():
        if isinstance(entry, StepPlan):
            built.append(Probe(start, entry, world, None))
        else:
            barrier = Barrier(sum(member.fate is Fate.SUCCEED for member in entry.members))
            built.append(tuple(Probe(start + n, m, world, barrier) for n, m in enumerate(entry.members)))
    return built


# -- running both shapes -----------------------------------------------------------------------------


class Shape(enum.Enum):
    LIST = "list"
    DYNAMIC = "dynamic"


@dataclass
class Outcome:
    world: World
    error: SagaFailed | None = None
    cancelled: bool = False
    run_id: str = ""


def engine(world: World) -> WorkflowEngine:
    return WorkflowEngine(
        compensation_retry=RetryPolicy(attempts=ATTEMPTS, initial_delay=0), journal=world.journal
    )


async def run(plan: Plan, shape: Shape) -> Outcome:
    world = World(plan.journaled)
    outcome = Outcome(world)
    orders = [entry.order if isinstance(entry, GroupPlan) else None for entry in plan.entries]
    steps = probes(plan, world)
    ctx = AegisContext(deadline=anyio.current_time() + SAGA_DEADLINE)
    with world.caller:
        if shape is Shape.LIST:
            entries: list[Any] = [
                parallel(*step, compensation=order) if isinstance(step, tuple) and order else step
                for step, order in zip(steps, orders, strict=True)
            ]
            saga_run = await engine(world).run_saga(entries, ctx, name="trip", sinks=[world.sink])
            outcome.error = saga_run.error
        else:
            saga = engine(world).saga(ctx, name="trip", sinks=[world.sink])
            try:
                async with saga:
                    for step, order in zip(steps, orders, strict=True):
                        if isinstance(step, tuple):
                            assert order is not None
                            await saga.parallel(*step, compensation=order)
                        else:
                            await saga.step(step)
            except SagaFailed as exc:
                outcome.error = exc
            # Ended: a step more is refused, and runs nothing (checked on the ledger).
            with pytest.raises(
                RuntimeError, match=r"^saga 'trip' has ended \((committed|rolled_back|stuck)\)"
            ):
                await saga.step(Probe(-2, StepPlan(Fate.SUCCEED, False, Undo.SUCCEED), world, None))
    outcome.cancelled = world.caller.cancelled_caught
    outcome.run_id = world.capture[0].run_id
    return outcome


class _JumpingSelector(selectors.BaseSelector):
    """A selector that, when nothing is ready and the loop would wait, moves its loop's clock on."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._inner = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("deadlock: every task waits and no timer is set")
        self._loop.now += timeout
        return []

    def get_map(self) -> Any:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time: like trio's ``MockClock(autojump_threshold=0)``."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run_on(backend: str, plan: Plan, shape: Shape) -> Outcome:
    options: dict[str, Any] = (
        {"clock": trio.testing.MockClock(autojump_threshold=0)}
        if backend == "trio"
        else {"loop_factory": VirtualTimeLoop}
    )
    return anyio.run(run, plan, shape, backend=backend, backend_options=options)


# -- what must hold -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """What the plan makes happen: which entries run, which steps are owed, how the run ends."""

    ran: tuple[tuple[int, EntryPlan], ...]
    broken: EntryPlan | None
    owed: tuple[tuple[int, StepPlan, bool], ...]  # (index, plan, succeeded), oldest first

    @classmethod
    def of(cls, plan: Plan) -> Expected:
        ran: list[tuple[int, EntryPlan]] = []
        owed: list[tuple[int, StepPlan, bool]] = []
        broken: EntryPlan | None = None
        for start, entry in plan.placed():
            ran.append((start, entry))
            members = entry.members if isinstance(entry, GroupPlan) else (entry,)
            for n, member in enumerate(members):
                succeeded = member.fate is Fate.SUCCEED
                if succeeded or member.in_doubt:
                    owed.append((start + n, member, succeeded))
            if any(member.fate.breaks for member in members):
                broken = entry
                break
        return cls(tuple(ran), broken, tuple(owed))

    def ran_steps(self) -> Iterator[tuple[int, StepPlan]]:
        """Every step that ran, with its flat index, in order."""
        for start, entry in self.ran:
            members = entry.members if isinstance(entry, GroupPlan) else (entry,)
            yield from ((start + n, member) for n, member in enumerate(members))

    def cancelled_together(self) -> bool:
        """Whether the saga broke by its caller's cancellation of a group with members waiting: all
        of them are cancelled at once, and the report names whichever settled first."""
        broken = self.broken
        return (
            isinstance(broken, GroupPlan)
            and self.fate() is Fate.CANCEL
            and any(m.fate is Fate.HANG for m in broken.members)
        )

    def fate(self) -> Fate | None:
        if self.broken is None:
            return None
        members = self.broken.members if isinstance(self.broken, GroupPlan) else (self.broken,)
        return next(member.fate for member in members if member.fate.breaks)


def metadata_before(ran: Sequence[tuple[int, EntryPlan]], upto: int) -> dict[str, str]:
    """The metadata the entry at flat index `upto` receives: every earlier step's key."""
    written: dict[str, str] = {}
    for start, entry in ran:
        if start >= upto:
            break
        size = len(entry.members) if isinstance(entry, GroupPlan) else 1
        written.update({f"s{i}": f"s{i}" for i in range(start, start + size)})
    return written


def check_ledger(plan: Plan, expected: Expected, outcome: Outcome) -> None:
    ledger, run_id = outcome.world.ledger, outcome.run_id
    # Nothing after the final event, which comes once; no step's coroutine left running.
    assert [entry.effect for entry in ledger].count(Effect.END) == 1
    assert ledger[-1].effect is Effect.END
    assert outcome.world.live == 0
    journal = outcome.world.journal
    if journal is not None:  # the journal holds every event, as the sinks saw them
        assert journal.events(run_id) == tuple(outcome.world.capture)

    executes = [entry for entry in ledger if entry.effect is Effect.EXECUTE]
    compensations = [entry for entry in ledger if entry.effect is Effect.COMPENSATE]
    # Forward: every step of the entries that ran, once, on its entry's input; then no more.
    last_execute = max(n for n, entry in enumerate(ledger) if entry.effect is Effect.EXECUTE)
    assert all(entry.effect is not Effect.COMPENSATE for entry in ledger[:last_execute])
    expected_executes: list[tuple[int, str, dict[str, str]]] = []
    for start, entry in expected.ran:
        size = len(entry.members) if isinstance(entry, GroupPlan) else 1
        for index in range(start, start + size):
            expected_executes.append((index, f"{run_id}/{index}", metadata_before(expected.ran, start)))
        # Members start together: every one is called before any returns (in any order).
        span = [e for e in ledger if start <= e.index < start + size and e.effect is not Effect.COMPENSATE]
        calls = [e.effect for e in span]
        assert calls == sorted(calls, key=[Effect.EXECUTE, Effect.RETURN].index)
    assert sorted(((e.index, e.key, e.metadata) for e in executes), key=lambda e: e[0]) == expected_executes

    # Rollback: the owed steps only if the saga broke, each attempt with its own snapshot.
    if expected.broken is None:
        assert compensations == []
        return
    units: list[list[tuple[int, StepPlan, bool]]] = []  # newest first, as they must run
    for start, entry in reversed(expected.ran):
        size = len(entry.members) if isinstance(entry, GroupPlan) else 1
        owed_here = [item for item in expected.owed if start <= item[0] < start + size]
        if not owed_here:
            continue
        if isinstance(entry, GroupPlan) and entry.order is CompensationOrder.CONCURRENT:
            units.append(owed_here)
        else:
            units += [[item] for item in reversed(owed_here)]
    position = 0
    for unit in units:
        attempts = {index: min(step.undo.failures + 1, ATTEMPTS) for index, step, _ in unit}
        block = compensations[position : position + sum(attempts.values())]
        position += len(block)
        # A concurrent group's attempts interleave in any order; all of them are in its block.
        assert sorted(entry.index for entry in block) == sorted(
            index for index, count in attempts.items() for _ in range(count)
        )
        for index, _, succeeded in unit:
            snapshot = metadata_before(expected.ran, _entry_start(expected, index))
            if succeeded:
                snapshot = {**snapshot, f"s{index}": f"s{index}"}
            for line in block:
                if line.index == index:
                    assert (line.key, line.metadata) == (f"{run_id}/{index}", snapshot)
    assert position == len(compensations)


def _entry_start(expected: Expected, index: int) -> int:
    """The first flat index of the entry holding step `index`."""
    return max(start for start, _ in expected.ran if start <= index)


def check_events(plan: Plan, expected: Expected, outcome: Outcome) -> None:
    events = list(outcome.world.capture)
    assert [event.seq for event in events] == list(range(len(events)))
    assert isinstance(events[0], SagaStarted)
    assert [is_final(event) for event in events] == [False] * (len(events) - 1) + [True]
    groups_of = {
        start + n: start
        for start, entry in plan.placed()
        if isinstance(entry, GroupPlan)
        for n in range(len(entry.members))
    }
    open_steps: set[int] = set()
    started_steps: list[int] = []
    attempts: dict[int, int] = {}
    open_attempt: dict[int, int] = {}
    undo_over: set[int] = set()
    for event in events[1:-1]:
        assert isinstance(event, StepEvent)
        assert event.group == groups_of.get(event.index)
        assert event.step == f"s{event.index}"
        match event:
            case StepStarted():
                assert event.index not in started_steps
                started_steps.append(event.index)
                open_steps.add(event.index)
            case StepSucceeded() | StepFailed() | StepTimedOut():
                open_steps.remove(event.index)  # exactly one end per start, after it
            case CompensationStarted():
                assert event.index not in open_attempt
                assert event.index not in undo_over
                assert event.attempt == attempts.get(event.index, 0) + 1  # numbered from 1
                attempts[event.index] = event.attempt
                open_attempt[event.index] = event.attempt
            case CompensationSucceeded() | CompensationFailed():
                assert open_attempt.pop(event.index) == event.attempt
                if isinstance(event, CompensationSucceeded) or not event.will_retry:
                    undo_over.add(event.index)
    assert (open_steps, open_attempt) == (set(), {})
    assert undo_over == set(attempts)
    ran = sorted(
        index
        for start, entry in expected.ran
        for index in range(start, start + (len(entry.members) if isinstance(entry, GroupPlan) else 1))
    )
    assert sorted(started_steps) == ran
    # How each step's execute ended, as its fate says.
    plans_of = {
        start + n: member
        for start, entry in expected.ran
        for n, member in enumerate(entry.members if isinstance(entry, GroupPlan) else (entry,))
    }
    for event in events:
        if isinstance(event, StepSucceeded | StepFailed | StepTimedOut):
            fate = plans_of[event.index].fate
            if isinstance(event, StepSucceeded):
                assert fate is Fate.SUCCEED
            elif isinstance(event, StepTimedOut):
                assert fate in (Fate.TIME_OUT, Fate.PAST_DEADLINE)
            else:
                kind = FailureKind.ERROR if fate is Fate.FAIL else FailureKind.CANCELLED
                assert (fate in (Fate.FAIL, Fate.CANCEL, Fate.HANG), event.kind) == (True, kind)


def check_outcome(expected: Expected, outcome: Outcome) -> None:
    final = outcome.world.capture[-1]
    fate = expected.fate()
    stuck = any(step.undo is Undo.GIVE_UP for _, step, _ in expected.owed)
    cancelling_undo = any(step.undo is Undo.CANCEL_CALLER for _, step, _ in expected.owed)
    if fate is None:
        assert (type(final), outcome.error, outcome.cancelled) == (SagaCommitted, None, False)
        return
    assert isinstance(final, SagaStuck if stuck else SagaRolledBackEvent)
    report = final.report
    left = [f"s{index}" for index, step, _ in expected.owed if step.undo is Undo.GIVE_UP]
    assert sorted(report.left_standing) == sorted(left)
    assert sorted(report.compensated) == sorted(
        f"s{index}" for index, step, _ in expected.owed if step.undo is not Undo.GIVE_UP
    )
    succeeded = sorted(
        (e for e in outcome.world.capture if isinstance(e, StepSucceeded)), key=lambda e: e.index
    )
    assert report.succeeded == tuple(e.step for e in succeeded)  # in index order, however they finished
    kinds = {
        Fate.FAIL: FailureKind.ERROR,
        Fate.TIME_OUT: FailureKind.TIMEOUT,
        Fate.PAST_DEADLINE: FailureKind.TIMEOUT,
        Fate.CANCEL: FailureKind.CANCELLED,
    }
    assert report.failure_kind is kinds[fate]
    if fate is Fate.CANCEL:
        assert (outcome.error, outcome.cancelled) == (None, True)
        return
    if outcome.error is None:
        # Only a compensation that cancelled the caller may turn the error into that cancellation.
        assert cancelling_undo
        assert outcome.cancelled
    else:
        assert type(outcome.error) is (SagaCompensationFailed if stuck else SagaRolledBack)
        assert outcome.error.report == report
    if not expected.cancelled_together():
        # The member whose failure failed its group, never a sibling cancelled because of it.
        breaker = next(index for index, entry in expected.ran_steps() if entry.fate.breaks)
        assert report.failed_step == f"s{breaker}"
    if fate is Fate.FAIL:
        assert (report.cause.type, report.cause.message) == ("Boom", f"{report.failed_step} failed")  # type: ignore[union-attr]


def _masked(error: ErrorInfo | None) -> ErrorInfo | None:
    """`error`, but a cancellation's message, which anyio words with its scope's and task's ids."""
    if error is None or error.type not in ("CancelledError", "Cancelled"):
        return error
    return dataclasses.replace(error, message="(the scope and task that cancelled)")


def canonical(events: Sequence[SagaEvent], *, cancelled_together: bool = False) -> list[tuple[Any, ...]]:
    """The events without run ids, numbers and times, members' interleaving put in index order.

    A parallel group's members interleave as their tasks are scheduled (trio picks at random), so
    each stretch of consecutive events of one group is sorted by member, keeping each member's own
    order; everything else keeps its place. `cancelled_together`: the report's failed step is
    left out, as it names whichever member the caller's cancellation reached first.
    """
    shown = [_shown(event, cancelled_together) for event in events]
    out: list[tuple[Any, ...]] = []
    stretch: list[tuple[int, tuple[Any, ...]]] = []
    current: int | None = None
    for event, item in zip(events, shown, strict=True):
        group = event.group if isinstance(event, StepEvent) else None
        if group is None or group != current:
            out += [entry for _, entry in sorted(stretch, key=lambda pair: pair[0])]
            stretch = []
        current = group
        if group is None:
            out.append(item)
        else:
            assert isinstance(event, StepEvent)
            stretch.append((event.index, item))
    out += [entry for _, entry in sorted(stretch, key=lambda pair: pair[0])]
    return out


def _shown(event: SagaEvent, cancelled_together: bool) -> tuple[Any, ...]:
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(event):
        if f.name in ("run_id", "seq", "time", "duration", "steps"):
            continue
        value = getattr(event, f.name)
        if isinstance(value, AegisContext):
            value = (value.to_json(), value.step_index, value.deadline)
        elif f.name == "report":
            # Its lists follow the events' order, whose interleaving of members is not the point
            # here (the ledger's order is checked on its own): compared as sets.
            value = dataclasses.replace(
                value,
                run_id="",
                steps=(),
                cause=_masked(value.cause),
                succeeded=tuple(sorted(value.succeeded)),
                compensated=tuple(sorted(value.compensated)),
                failed_step=None if cancelled_together else value.failed_step,
                compensation_failures=tuple(sorted(value.compensation_failures, key=lambda f: f.step)),
            )
        elif f.name == "error":
            value = _masked(value)
        fields[f.name] = value
    return (type(event).__name__, tuple(sorted(fields.items())))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=150, deadline=None)
@given(plan=plans)
def test_lists_and_dynamic_sagas_keep_every_invariant_and_emit_the_same_events(
    backend: str, plan: Plan
) -> None:
    expected = Expected.of(plan)
    fate = expected.fate()
    note_case(f"ends: {'commits' if fate is None else fate.value}")
    note_case(f"groups: {sum(isinstance(entry, GroupPlan) for entry in plan.entries)}")
    outcomes = {shape: run_on(backend, plan, shape) for shape in Shape}
    for outcome in outcomes.values():
        check_ledger(plan, expected, outcome)
        check_events(plan, expected, outcome)
        check_outcome(expected, outcome)
    as_list, dynamic = outcomes[Shape.LIST], outcomes[Shape.DYNAMIC]
    together = expected.cancelled_together()
    assert canonical(as_list.world.capture, cancelled_together=together) == canonical(
        dynamic.world.capture, cancelled_together=together
    )
    first = as_list.world.capture[0]
    assert isinstance(first, SagaStarted)
    assert first.steps == tuple(f"s{i}" for i in range(sum(map(_size, plan.entries))))
    assert dynamic.world.capture[0] == dataclasses.replace(first, run_id=dynamic.run_id, steps=())
    assert (as_list.cancelled, type(as_list.error)) == (dynamic.cancelled, type(dynamic.error))


def _size(entry: EntryPlan) -> int:
    return len(entry.members) if isinstance(entry, GroupPlan) else 1
