"""Crash windows: a journal that kills its "process" at a chosen event, then recovery in a new one.

Each named window of issue 6 is checked with its whole journal history after recovery; then every
event index of several saga shapes is crashed at, before and after the event is handed to the
journal, and the end state must be consistent: nothing unfinished, the world holding exactly the
effects of a committed run, and no effect undone twice.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aegis_nb import AegisContext, RetryPolicy, WorkflowEngine
from aegis_nb.kernel.report import ErrorInfo, FailureKind, SagaStatus
from aegis_nb.saga.definition import SagaEntry
from aegis_nb.saga.durable import SqliteJournal, read_run, read_runs
from aegis_nb.saga.durable.recovery import CRASH
from aegis_nb.saga.events import (
    CompensationSucceeded,
    SagaCommitted,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepSucceeded,
)
from aegis_nb.saga.history import fold_report
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.testing import outline
from tests.conftest import require
from tests.durable_support import Act, Crash, CrashingJournal, World

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(attempts=2, initial_delay=0.0)
RUN = "run1"
Shape = Callable[[World], list[Act]]


async def crash_then_recover(
    path: Path, shape: Shape, crash_at: int, *, after_write: bool = False
) -> tuple[World, list[Act], bool, tuple[SagaRun, ...]]:
    """Run the saga until its process dies at event `crash_at`, then recover in a "new process"."""
    world = World()
    steps = shape(world)
    journal = CrashingJournal(SqliteJournal(path, steps=steps), crash_at, after_write=after_write)
    engine = WorkflowEngine(journal=journal, compensation_retry=FAST)
    saga: list[SagaEntry] = [(s, (s.name.lower(),), {}) for s in steps]
    crashed = False
    try:
        await engine.run_saga(saga, AegisContext({"trip": "T1"}), name="trip", run_id=RUN)
    except Crash:
        crashed = True
    if not crashed:
        await journal.inner.aclose()
    async with SqliteJournal(path, steps=steps) as restarted:
        recovered = await WorkflowEngine(journal=restarted, compensation_retry=FAST).recover()
    return world, steps, crashed, recovered


def trail(path: Path) -> list[tuple[str, ...]]:
    return [outline(e) for e in read_run(path, RUN).events]


def plain(world: World) -> list[Act]:
    return [Act(world, "A"), Act(world, "B"), Act(world, "C")]


def doubtful_middle(world: World) -> list[Act]:
    return [Act(world, "A"), Act(world, "B", in_doubt=True), Act(world, "C")]


def last_fails(world: World) -> list[Act]:
    return [Act(world, "A"), Act(world, "B", in_doubt=True), Act(world, "C", fail=True)]


def times_out(world: World) -> list[Act]:
    return [Act(world, "A"), Act(world, "B", hang=True, in_doubt=True)]


def flaky_undo(world: World) -> list[Act]:
    return [Act(world, "A", undo_fails=1), Act(world, "B"), Act(world, "C", fail=True)]


def stuck(world: World) -> list[Act]:
    return [Act(world, "A", undo_fails=99), Act(world, "B", fail=True)]


# -- the named windows ------------------------------------------------------------------------------


async def test_crash_before_a_step_outcome_is_recorded_undoes_the_in_doubt_step(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    # events: 0 SagaStarted, 1 StepStarted A, 2 StepSucceeded A, 3 StepStarted B, 4 StepSucceeded B
    world, _, crashed, recovered = await crash_then_recover(path, doubtful_middle, 4)
    assert crashed
    assert trail(path) == [
        ("SagaStarted",),
        ("StepStarted", "A"),
        ("StepSucceeded", "A"),
        ("StepStarted", "B"),
        ("StepFailed", "B"),
        ("CompensationStarted", "B"),
        ("CompensationSucceeded", "B"),
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
    (run,) = recovered
    assert run.report.status is SagaStatus.ROLLED_BACK
    assert run.report.failed_step == "B"
    assert (run.report.failure_kind, run.report.cause) == (FailureKind.INTERRUPTED, CRASH)
    assert run.report.compensated == ("B", "A")
    assert world.live == {}
    assert world.undos == {f"{RUN}/0": 1, f"{RUN}/1": 1}


async def test_crash_before_a_plain_step_outcome_leaves_its_effect_which_is_why_in_doubt_exists(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    world, _, _, _ = await crash_then_recover(path, plain, 4)
    # A plain step's start rides along with the next sync, so the crash took it: recovery undoes A.
    assert trail(path) == [
        ("SagaStarted",),
        ("StepStarted", "A"),
        ("StepSucceeded", "A"),
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
    assert world.live == {f"{RUN}/1": "B:b"}


async def test_crash_between_steps_undoes_every_succeeded_step_newest_first(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    # 5 is StepStarted C: B's success is on disk, C never started.
    world, _, _, (run,) = await crash_then_recover(path, doubtful_middle, 5)
    assert trail(path) == [
        ("SagaStarted",),
        ("StepStarted", "A"),
        ("StepSucceeded", "A"),
        ("StepStarted", "B"),
        ("StepSucceeded", "B"),
        ("CompensationStarted", "B"),
        ("CompensationSucceeded", "B"),
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
    assert run.report.failed_step is None
    assert world.live == {}
    assert world.done == world.undos == {f"{RUN}/0": 1, f"{RUN}/1": 1}


async def test_crash_mid_compensation_runs_that_compensation_again_and_keeps_the_cause(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    # 6 StepFailed C, 7 CompensationStarted B, 8 CompensationSucceeded B: B was undone, not recorded.
    world, _, _, (run,) = await crash_then_recover(path, last_fails, 8)
    assert trail(path) == [
        ("SagaStarted",),
        ("StepStarted", "A"),
        ("StepSucceeded", "A"),
        ("StepStarted", "B"),
        ("StepSucceeded", "B"),
        ("StepStarted", "C"),
        ("StepFailed", "C"),
        ("CompensationStarted", "B"),
        ("CompensationSucceeded", "B"),
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
    assert run.report.cause == ErrorInfo("RuntimeError", "C failed")
    assert run.report.failure_kind is FailureKind.ERROR
    assert world.undo_calls == {f"{RUN}/1": 2, f"{RUN}/0": 1}  # at least once...
    assert world.undos == {f"{RUN}/1": 1, f"{RUN}/0": 1}  # ...and applied once, thanks to the key
    assert world.live == {}


async def test_crash_after_the_last_compensation_only_marks_the_run(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    # 11 is SagaRolledBackEvent: both compensations are on disk, the run's end is not.
    world, _, _, (run,) = await crash_then_recover(path, last_fails, 11)
    events = read_run(path, RUN).events
    assert [outline(e) for e in events[-3:]] == [
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
    assert sum(isinstance(e, CompensationSucceeded) for e in events) == 2
    assert run.report.compensated == ("B", "A")
    assert run.report.cause == ErrorInfo("RuntimeError", "C failed")
    assert world.undo_calls == {f"{RUN}/1": 1, f"{RUN}/0": 1}


def doubtful_last(world: World) -> list[Act]:
    return [Act(world, "A"), Act(world, "B"), Act(world, "C", in_doubt=True)]


async def test_crash_before_the_commit_is_recorded_rolls_back(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    # 6 StepSucceeded C rides along with 7 SagaCommitted: the crash takes both; C was in doubt.
    world, _, _, (run,) = await crash_then_recover(path, doubtful_last, 7)
    assert run.report.status is SagaStatus.ROLLED_BACK
    assert run.report.failed_step == "C"
    assert run.report.compensated == ("C", "B", "A")
    assert world.live == {}


async def test_crash_after_the_commit_is_recorded_leaves_the_run_committed(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    world, _, crashed, recovered = await crash_then_recover(path, plain, 7, after_write=True)
    assert (crashed, recovered) == (True, ())
    assert [r.status for r in read_runs(path)] == [SagaStatus.COMMITTED]
    assert world.live == {f"{RUN}/0": "A:a", f"{RUN}/1": "B:b", f"{RUN}/2": "C:c"}


async def test_a_stuck_run_stays_stuck_and_is_not_recovered(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    world, _, crashed, recovered = await crash_then_recover(path, stuck, 10_000)
    assert (crashed, recovered) == (False, ())
    assert [r.status for r in read_runs(path)] == [SagaStatus.STUCK]
    assert world.live == {f"{RUN}/0": "A:a"}


async def test_crash_while_retrying_a_compensation_ends_stuck_not_rolled_back(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    # 6 is A's first failed compensation attempt (will retry); the crash comes before it is written.
    world, _, _, (run,) = await crash_then_recover(path, stuck, 6)
    assert run.report.status is SagaStatus.STUCK
    assert run.report.left_standing == ("A",)
    assert isinstance(read_run(path, RUN).events[-1], SagaStuck)
    assert world.live == {f"{RUN}/0": "A:a"}


async def test_recover_twice_finds_nothing_the_second_time(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    await crash_then_recover(path, last_fails, 8)
    async with SqliteJournal(path, steps=last_fails(World())) as journal:
        assert await WorkflowEngine(journal=journal).recover() == ()
    (info,) = read_runs(path)
    assert (info.status, info.recoveries) == (SagaStatus.ROLLED_BACK, 1)


# -- every crash point ------------------------------------------------------------------------------


def check_consistent(path: Path, world: World, steps: list[Act]) -> SagaStatus | None:
    """Whatever the crash point: finished, well-formed history, world matching the outcome.

    None when the crash came before the run's start was on disk: then no step may have run.
    """
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
    assert info.status is status
    assert status.is_final
    keys = {f"{RUN}/{i}": f"{s.name}:{s.name.lower()}" for i, s in enumerate(steps)}
    if status is SagaStatus.COMMITTED:
        assert world.live == keys
        return status
    # A plain step whose success was not on disk is not undone (that is what in_doubt is for).
    recorded = {e.index for e in events if isinstance(e, StepSucceeded)}
    unrecorded_plain = {f"{RUN}/{i}" for i, s in enumerate(steps) if i not in recorded and not s.in_doubt}
    if status is SagaStatus.ROLLED_BACK:
        assert set(world.live) <= unrecorded_plain
    else:
        stubborn = {f"{RUN}/{i}" for i, s in enumerate(steps) if s.undo_fails > 1}
        # (possibly nothing: an in-doubt step whose undo fails is stuck even if it never acted)
        assert set(world.live) <= stubborn | unrecorded_plain
    assert all(count == 1 for count in world.undos.values())
    return status


@pytest.mark.parametrize(
    "shape", [plain, doubtful_middle, doubtful_last, last_fails, times_out, flaky_undo, stuck]
)
async def test_recovery_after_a_crash_at_any_event_is_consistent(tmp_path: Path, shape: Shape) -> None:
    probe = tmp_path / "probe.db"
    world, steps, crashed, _ = await crash_then_recover(probe, shape, 10_000)
    assert not crashed
    total = len(read_run(probe, RUN).events)
    uncrashed = check_consistent(probe, world, steps)
    outcomes = []
    for crash_at in range(total):
        for after_write in (False, True):
            path = tmp_path / f"crash-{crash_at}-{after_write}.db"
            world, steps, crashed, _ = await crash_then_recover(
                path, shape, crash_at, after_write=after_write
            )
            assert crashed
            outcomes.append(check_consistent(path, world, steps))
    # A crash before the start is on disk leaves no run; only one after the commit is on disk
    # keeps a committed run committed.
    assert outcomes[0] is None
    if uncrashed is SagaStatus.COMMITTED:
        assert outcomes[-1] is SagaStatus.COMMITTED
        assert set(outcomes[1:-1]) == {SagaStatus.ROLLED_BACK}
    else:
        # A crash before a stubborn step's success is on disk leaves nothing stuck.
        assert outcomes[-1] is uncrashed
        assert set(outcomes[1:]) <= {uncrashed, SagaStatus.ROLLED_BACK}


@st.composite
def shapes(draw: st.DrawFn) -> Callable[[World], list[Act]]:
    count = draw(st.integers(1, 4))
    specs = [
        {
            "in_doubt": draw(st.booleans()),
            "undo_fails": draw(st.sampled_from([0, 0, 1, 5])),
        }
        for _ in range(count)
    ]
    failing = draw(st.one_of(st.none(), st.integers(0, count - 1)))

    def shape(world: World) -> list[Act]:
        return [
            Act(world, chr(ord("A") + i), fail=(i == failing), **spec)  # type: ignore[arg-type]
            for i, spec in enumerate(specs)
        ]

    return shape


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes(), crash_at=st.integers(0, 20), after_write=st.booleans())
def test_property_any_saga_any_crash_point_recovers_consistently(
    tmp_path_factory: pytest.TempPathFactory, backend: str, shape: Shape, crash_at: int, after_write: bool
) -> None:
    path = tmp_path_factory.mktemp("prop") / "j.db"

    async def scenario() -> None:
        world, steps, _, _ = await crash_then_recover(path, shape, crash_at, after_write=after_write)
        check_consistent(path, world, steps)

    anyio.run(scenario, backend=backend)


async def test_a_recovered_run_replays_in_the_diagram(tmp_path: Path) -> None:
    from aegis_nb.diagram import MessageKind, fold

    path = tmp_path / "j.db"
    await crash_then_recover(path, doubtful_middle, 4)
    model = fold(read_run(path, RUN).events)
    assert [(m.kind, m.step, m.failure) for m in model.messages] == [
        (MessageKind.EXECUTE, 0, None),
        (MessageKind.SUCCEEDED, 0, None),
        (MessageKind.EXECUTE, 1, None),
        (MessageKind.FAILED, 1, FailureKind.INTERRUPTED),
        (MessageKind.COMPENSATE, 1, None),
        (MessageKind.COMPENSATED, 1, None),
        (MessageKind.COMPENSATE, 0, None),
        (MessageKind.COMPENSATED, 0, None),
    ]


async def test_a_recovered_run_opens_in_the_notebook_replay_view(tmp_path: Path) -> None:
    require(importlib.util.find_spec("ipywidgets") is not None, "ipywidgets (the notebook extra)")
    from aegis_nb.notebook.replay import ReplayView

    path = tmp_path / "j.db"
    await crash_then_recover(path, doubtful_middle, 4)
    events = read_run(path, RUN).events
    view = ReplayView(events)
    assert (view.widget.count, view.position) == (len(events), len(events))
    assert isinstance(view.events[-1], SagaRolledBackEvent)
