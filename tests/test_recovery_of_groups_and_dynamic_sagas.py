"""Recovery of sagas with parallel groups and of dynamic sagas, from a crash at any of their events.

A dynamic saga's steps are checked and journaled as they are added, before they run, so recovery
rebuilds them; a group's members keep their group in the journal. After a crash, recovery owes every
step that succeeded and every in-doubt step that failed or was cut off (a group's members, a dynamic
saga's caught failure), newest first by index, a group's members together as their group says, each
in-doubt step with its input context (after a group: the members' outputs merged). Crashing at every
event, before and after it is written, must leave the run finished, its history well formed, and the
world holding exactly what the outcome says, nothing undone twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pytest

from aegis_nb import AegisContext, RetryPolicy, WorkflowEngine, parallel
from aegis_nb.kernel.errors import SagaFailed
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.saga.definition import SagaEntry
from aegis_nb.saga.durable import SqliteJournal, StepNotRecoverable, plan_recovery, read_run, read_runs
from aegis_nb.saga.durable.codec import RecordError, dumps
from aegis_nb.saga.durable.locator import LocatorKind, StepLocator
from aegis_nb.saga.durable.steprecord import StepRecord
from aegis_nb.saga.events import (
    CompensationSucceeded,
    SagaCommitted,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepSucceeded,
)
from aegis_nb.saga.history import fold_report
from aegis_nb.saga.parallel import CompensationOrder, ParallelGroup, StepGroup
from aegis_nb.testing import outline
from tests.durable_support import Act, Crash, CrashingJournal, World

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(attempts=2, initial_delay=0.0)
RUN = "run1"
START = AegisContext({"trip": "T1"})

Body = Callable[[WorkflowEngine, list[Act]], Awaitable[None]]


@dataclass(frozen=True)
class Shape:
    """A saga: the steps it uses (`acts` builds them on a world) and the code that runs them."""

    name: str
    acts: Callable[[World], list[Act]]
    body: Body


def as_list(entries: Callable[[list[Act]], list[SagaEntry | ParallelGroup]]) -> Body:
    async def body(engine: WorkflowEngine, acts: list[Act]) -> None:
        await engine.run_saga(entries(acts), START, name="trip", run_id=RUN)

    return body


async def dynamic_caught(engine: WorkflowEngine, acts: list[Act]) -> None:
    """A, then B fails in doubt and the code goes on, a group of C and D, then E: commits."""
    a, b, c, d, e = acts
    async with engine.saga(START, name="trip", run_id=RUN) as saga:
        await saga.step(a, "a")
        with contextlib.suppress(RuntimeError):  # the agent decides to go on without B
            await saga.step(b, "b")
        await saga.parallel((c, ("c",), {}), (d, ("d",), {}))
        await saga.step(e, "e")


async def dynamic_fails(engine: WorkflowEngine, acts: list[Act]) -> None:
    """A, a group of B and C, then D fails: the block leaves by D's error and everything rolls back."""
    a, b, c, d = acts
    async with engine.saga(START, name="trip", run_id=RUN) as saga:
        await saga.step(a, "a")
        await saga.parallel((b, ("b",), {}), (c, ("c",), {}), compensation="reverse_start")
        await saga.step(d, "d")


async def dynamic_requested(engine: WorkflowEngine, acts: list[Act]) -> None:
    """A and B, then the code asks for the rollback."""
    a, b = acts
    async with engine.saga(START, name="trip", run_id=RUN) as saga:
        await saga.step(a, "a")
        await saga.step(b, "b")
        await saga.rollback("too expensive")


SHAPES = [
    Shape(
        "group commits",
        lambda w: [Act(w, "A"), Act(w, "B"), Act(w, "C", in_doubt=True), Act(w, "D")],
        as_list(
            lambda s: [
                (s[0], ("a",), {}),
                parallel((s[1], ("b",), {}), (s[2], ("c",), {})),
                (s[3], ("d",), {}),
            ]
        ),
    ),
    Shape(
        "member fails",
        lambda w: [Act(w, "A"), Act(w, "B", in_doubt=True), Act(w, "C", fail=True, in_doubt=True)],
        as_list(lambda s: [(s[0], ("a",), {}), parallel((s[1], ("b",), {}), (s[2], ("c",), {}))]),
    ),
    Shape(
        "step after a reverse-start group fails",
        lambda w: [Act(w, "A"), Act(w, "B"), Act(w, "C"), Act(w, "D", fail=True, in_doubt=True)],
        as_list(
            lambda s: [
                (s[0], ("a",), {}),
                parallel((s[1], ("b",), {}), (s[2], ("c",), {}), compensation="reverse_start"),
                (s[3], ("d",), {}),
            ]
        ),
    ),
    Shape(
        "dynamic, a caught in-doubt failure, commits",
        lambda w: [Act(w, "A"), Act(w, "B", fail=True, in_doubt=True), Act(w, "C"), Act(w, "D"), Act(w, "E")],
        dynamic_caught,
    ),
    Shape(
        "dynamic with a group, fails",
        lambda w: [
            Act(w, "A"),
            Act(w, "B", in_doubt=True),
            Act(w, "C"),
            Act(w, "D", fail=True, in_doubt=True),
        ],
        dynamic_fails,
    ),
    Shape(
        "dynamic, rolled back on request",
        lambda w: [Act(w, "A"), Act(w, "B", in_doubt=True)],
        dynamic_requested,
    ),
]


async def crash_then_recover(
    path: Path, shape: Shape, crash_at: int, *, after_write: bool = False
) -> tuple[World, bool]:
    """Run `shape` until its process dies at event `crash_at`, then recover in a "new process"."""
    world = World()
    acts = shape.acts(world)
    journal = CrashingJournal(SqliteJournal(path, steps=acts), crash_at, after_write=after_write)
    crashed = False
    try:
        await shape.body(WorkflowEngine(journal=journal, compensation_retry=FAST), acts)
    except SagaFailed:
        pass
    except BaseException as exc:
        if not crash(exc):
            raise
        crashed = True
    if not crashed:
        await journal.inner.aclose()
    async with SqliteJournal(path, steps=acts) as restarted:
        await WorkflowEngine(journal=restarted, compensation_retry=FAST).recover()
    return world, crashed


def crash(exc: BaseException) -> bool:
    """`Crash`, or a group's members each cut off by it (they were compensating together)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(crash(inner) for inner in exc.exceptions)
    return isinstance(exc, Crash)


def check_consistent(path: Path, world: World, committed: dict[str, str]) -> SagaStatus | None:
    """Finished, well formed, and the world as the outcome says (`committed`: the uncrashed commit's)."""
    runs = read_runs(path)
    if not runs:
        assert world.done == {}
        return None
    (info,) = runs
    events = read_run(path, RUN).events
    assert [e.seq for e in events] == list(range(len(events)))
    assert isinstance(events[0], SagaStarted)
    finals = [e for e in events if isinstance(e, SagaCommitted | SagaRolledBackEvent | SagaStuck)]
    assert finals == [events[-1]]
    status = fold_report(events).status
    assert info.status is status is not SagaStatus.STUCK
    if status is SagaStatus.COMMITTED:
        assert world.live == committed
        return status
    # A plain step whose success was not on disk is not undone (that is what in_doubt is for).
    recorded = {f"{RUN}/{e.index}" for e in events if isinstance(e, StepSucceeded)}
    compensated = {f"{RUN}/{e.index}" for e in events if isinstance(e, CompensationSucceeded)}
    assert set(world.live).isdisjoint(recorded)
    assert recorded <= compensated
    assert all(count == 1 for count in world.undos.values())
    return status


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.name for shape in SHAPES])
async def test_a_crash_at_any_event_is_recovered_consistently(tmp_path: Path, shape: Shape) -> None:
    probe = tmp_path / "probe.db"
    world, crashed = await crash_then_recover(probe, shape, 10_000)
    assert not crashed
    total = len(read_run(probe, RUN).events)
    uncrashed = check_consistent(probe, world, dict(world.live))
    committed = dict(world.live) if uncrashed is SagaStatus.COMMITTED else {}
    outcomes = []
    for crash_at in range(total):
        for after_write in (False, True):
            path = tmp_path / f"crash-{crash_at}-{after_write}.db"
            world, crashed = await crash_then_recover(path, shape, crash_at, after_write=after_write)
            assert crashed
            outcomes.append(check_consistent(path, world, committed))
    assert outcomes[0] is None  # the run's start never reached the disk: nothing ran
    assert outcomes[-1] is uncrashed
    assert set(outcomes[1:]) <= {uncrashed, SagaStatus.ROLLED_BACK}


async def crashed_run(path: Path, shape: Shape, crash_at: int, *, after_write: bool = True) -> World:
    """The world after `shape` died at event `crash_at` (handed to the journal first), not recovered."""
    world = World()
    acts = shape.acts(world)
    engine = WorkflowEngine(
        journal=CrashingJournal(SqliteJournal(path, steps=acts), crash_at, after_write=after_write),
        compensation_retry=FAST,
    )
    with pytest.raises((Crash, BaseExceptionGroup)) as raised:
        await shape.body(engine, acts)
    assert crash(raised.value)
    return world


async def test_a_dynamic_sagas_steps_and_a_groups_members_are_journaled_with_their_group(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    await crashed_run(path, SHAPES[3], 10)  # 0 start, 1-2 A, 3-4 B fails, 5-6 C and D start ...
    (run,) = [read_run(path, RUN)]
    concurrent = StepGroup(2, 2, CompensationOrder.CONCURRENT)
    assert [(r.index, r.name, r.args, r.in_doubt, r.group) for r in run.steps] == [
        (0, "A", ("a",), False, None),
        (1, "B", ("b",), True, None),
        (2, "C", ("c",), False, concurrent),
        (3, "D", ("d",), False, concurrent),
        (4, "E", ("e",), False, None),
    ]


async def test_recovery_owes_the_caught_in_doubt_failure_with_its_input_and_undoes_newest_first(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    shape = SHAPES[3]
    # Events: 0 start, 1-2 A, 3 B started, 4 B failed (caught), 5-8 C and D, 9-10 E, 11 the commit:
    # killed there, so E's success is the last event on disk.
    world = await crashed_run(path, shape, 11, after_write=False)
    run = read_run(path, RUN)
    plan = plan_recovery(run)
    assert [(record.name, ctx.step_index, dict(ctx.metadata)) for record, ctx in plan.owed] == [
        ("E", 4, {"trip": "T1", "A": "a", "C": "c", "D": "d", "E": "e"}),
        ("D", 3, {"trip": "T1", "A": "a", "D": "d"}),
        ("C", 2, {"trip": "T1", "A": "a", "C": "c"}),
        ("B", 1, {"trip": "T1", "A": "a"}),  # its input: A's output (B's failure left it), stamped for B
        ("A", 0, {"trip": "T1", "A": "a"}),
    ]
    async with SqliteJournal(path, steps=shape.acts(world)) as restarted:
        (recovered,) = await WorkflowEngine(journal=restarted, compensation_retry=FAST).recover()
    after = [outline(e) for e in recovered.events[len(run.events) :]]
    assert after[:2] == [("CompensationStarted", "E"), ("CompensationSucceeded", "E")]
    # C and D are undone together, after E and before B (their events may interleave either way).
    assert together(after[2:6], "C", "D")
    assert after[6:] == [
        ("CompensationStarted", "B"),
        ("CompensationSucceeded", "B"),
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
    assert world.live == {}
    assert world.undos == {f"{RUN}/{i}": 1 for i in range(5)}


def together(events: list[tuple[str, ...]], *members: str) -> bool:
    """Whether `events` are exactly each member's compensation starting and then succeeding."""
    return sorted(events) == sorted(
        (kind, member) for member in members for kind in ("CompensationStarted", "CompensationSucceeded")
    ) and all(
        events.index(("CompensationStarted", m)) < events.index(("CompensationSucceeded", m)) for m in members
    )


async def test_a_group_cut_off_mid_way_owes_its_succeeded_and_in_doubt_members(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    shape = SHAPES[1]  # A, then B (in doubt) and C (in doubt, fails) together
    # Events: 0 start, 1-2 A, 3-4 B and C started (in either order), 5 the first outcome: killed
    # before it is written, so both members are in flight on disk, and both acted.
    world = await crashed_run(path, shape, 5, after_write=False)
    run = read_run(path, RUN)
    plan = plan_recovery(run)
    assert (plan.in_flight, plan.interrupted, plan.failed) == (("B", "C"), "C", "C")
    assert [(record.name, ctx.step_index, dict(ctx.metadata)) for record, ctx in plan.owed] == [
        ("C", 2, {"trip": "T1", "A": "a"}),
        ("B", 1, {"trip": "T1", "A": "a"}),
        ("A", 0, {"trip": "T1", "A": "a"}),
    ]
    async with SqliteJournal(path, steps=shape.acts(world)) as restarted:
        (recovered,) = await WorkflowEngine(journal=restarted, compensation_retry=FAST).recover()
    after = [outline(e) for e in recovered.events[len(run.events) :]]
    assert after[:2] == [("StepFailed", "B"), ("StepFailed", "C")]
    assert [e.kind.value for e in recovered.events[len(run.events) :][:2]] == ["interrupted"] * 2  # type: ignore[union-attr]
    assert together(after[2:6], "B", "C")
    assert after[6:] == [
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
    assert (world.live, world.undos) == ({}, {f"{RUN}/{i}": 1 for i in range(3)})


async def test_a_reverse_start_group_is_undone_one_by_one_newest_start_first(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    shape = SHAPES[4]  # dynamic: A, then B (in doubt) and C in reverse-start order, then D fails
    # Events: 0 start, 1-2 A, 3-4 B and C started, 5-6 their successes, 7 D (in doubt) started:
    # killed once that is written. D is then undone first, C before B (it started last), then A.
    world = await crashed_run(path, shape, 7)
    run = read_run(path, RUN)
    async with SqliteJournal(path, steps=shape.acts(world)) as restarted:
        (recovered,) = await WorkflowEngine(journal=restarted, compensation_retry=FAST).recover()
    assert [outline(e) for e in recovered.events[len(run.events) :]] == [
        ("StepFailed", "D"),
        ("CompensationStarted", "D"),
        ("CompensationSucceeded", "D"),
        ("CompensationStarted", "C"),
        ("CompensationSucceeded", "C"),
        ("CompensationStarted", "B"),
        ("CompensationSucceeded", "B"),
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
    # D's undo is called though D never ran (the crash came as it started): in doubt, it may have.
    assert (world.live, world.undos, world.undo_calls[f"{RUN}/3"]) == (
        {},
        {f"{RUN}/{i}": 1 for i in range(3)},
        1,
    )


async def test_a_dynamic_step_recovery_could_not_rebuild_is_refused_before_it_runs(tmp_path: Path) -> None:
    world = World()
    a = Act(world, "A")
    unregistered = Act(world, "Stray")
    async with SqliteJournal(tmp_path / "j.db", steps=[a]) as journal:
        engine = WorkflowEngine(journal=journal)

        async def trip() -> None:
            async with engine.saga(START, name="trip", run_id=RUN) as saga:
                await saga.step(a, "a")
                await saga.step(unregistered, "x")

        with pytest.raises(SagaFailed) as failure:
            await trip()
    assert isinstance(failure.value.__cause__, StepNotRecoverable)
    assert "step 'Stray' (saga entry 1)" in str(failure.value.__cause__)
    assert world.done == {f"{RUN}/0": 1}  # Stray never ran; A was undone
    assert world.live == {}


def test_a_members_record_keeps_its_group_and_a_lone_steps_record_is_written_as_before() -> None:
    locator = StepLocator(LocatorKind.NAME, "B", {})
    lone = StepRecord(1, "B", locator, ("b",), MappingProxyType({}), None, None, True)
    member = dataclasses.replace(lone, group=StepGroup(1, 2, CompensationOrder.REVERSE_START))
    assert dumps(lone.to_json()) == (
        '{"index":1,"name":"B","locator":{"by":"name","target":"B"},"args":["b"],'
        '"kwargs":{},"timeout":null,"retry":null,"in_doubt":true}'
    )
    assert member.to_json() == {
        **lone.to_json(),
        "group": {"start": 1, "size": 2, "compensation": "reverse_start"},
    }
    assert StepRecord.from_json(member.to_json(), 1) == member
    assert StepRecord.from_json(lone.to_json(), 1) == lone
    with pytest.raises(RecordError, match="step 1 has a malformed parallel group"):
        StepRecord.from_json(
            {**lone.to_json(), "group": {"start": 2, "size": 2, "compensation": "concurrent"}}, 1
        )
