"""Bad input to run-time sagas and parallel groups gets a clear error, whole, and nothing runs.

Each case says what was wrong in words a caller can act on, before any step of the bad entry
runs: a saga used after it ended or outside its block, a step used twice in one group, an empty
group, a group inside a group, a member that is no step, an unknown compensation order. A dynamic
saga stays open after a refused entry (the code may go on), and its events show nothing of it.
Members writing one metadata key with different values are a run-time conflict: the group fails
with a `StepResultError` naming both members and the key, and the saga rolls back.
"""

from __future__ import annotations

import enum

import pytest

from aegis_nb import (
    AegisContext,
    SagaDefinitionError,
    SagaRolledBack,
    SagaStatus,
    StepResultError,
    StepStarted,
    WorkflowEngine,
    parallel,
)
from aegis_nb.saga.dynamic import Saga, SagaState
from aegis_nb.saga.parallel import ParallelGroup
from aegis_nb.testing import EventCapture

pytestmark = pytest.mark.anyio


class Effect(enum.Enum):
    EXECUTE = "execute"
    COMPENSATE = "compensate"


class Ledger(list[tuple[Effect, str]]):
    """Every effect a test step had, in order."""


class Tracked:
    """A step that writes `key` (its name unless given) and logs each call in a `Ledger`."""

    def __init__(self, name: str, ledger: Ledger, key: str | None = None) -> None:
        self.name = name
        self.ledger = ledger
        self.key = key or name

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.ledger.append((Effect.EXECUTE, self.name))
        return ctx.with_metadata({self.key: self.name})

    async def compensate(self, ctx: AegisContext) -> None:
        self.ledger.append((Effect.COMPENSATE, self.name))


class Action(enum.Enum):
    """What a caller asks of a dynamic saga."""

    STEP = "step"
    PARALLEL = "parallel"
    ROLLBACK = "rollback"
    COMMIT = "commit"


async def act(saga: Saga, action: Action, step: Tracked) -> None:
    """Ask `saga` for `action`, with `step` where it takes one."""
    match action:
        case Action.STEP:
            await saga.step(step)
        case Action.PARALLEL:
            await saga.parallel(step)
        case Action.ROLLBACK:
            await saga.rollback("why")
        case Action.COMMIT:
            await saga.commit()


class SyncExecute:
    """Not a step the engine accepts: its execute is a plain function."""

    name = "sync"

    def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        return None


async def test_a_step_after_the_saga_committed_is_refused_and_does_not_run() -> None:
    ledger, capture = Ledger(), EventCapture()
    async with WorkflowEngine().saga(name="trip", sinks=[capture]) as saga:
        await saga.step(Tracked("flight", ledger))
    events = list(capture)
    late = Tracked("hotel", ledger)
    with pytest.raises(RuntimeError) as caught:
        await saga.step(late)
    assert str(caught.value) == "saga 'trip' has ended (committed): saga.step() cannot change it"
    assert ledger == [(Effect.EXECUTE, "flight")]
    assert capture == events
    assert saga.run.status is SagaStatus.COMMITTED


@pytest.mark.parametrize("action", Action)
async def test_every_action_after_a_requested_rollback_is_refused(action: Action) -> None:
    ledger, capture = Ledger(), EventCapture()
    async with WorkflowEngine().saga(name="trip", sinks=[capture]) as saga:
        await saga.step(Tracked("flight", ledger))
        await saga.rollback("too expensive")
    events = list(capture)
    late = Tracked("hotel", ledger)
    with pytest.raises(RuntimeError) as caught:
        await act(saga, action, late)
    assert str(caught.value) == f"saga 'trip' has ended (rolled_back): saga.{action.value}() cannot change it"
    assert ledger == [(Effect.EXECUTE, "flight"), (Effect.COMPENSATE, "flight")]
    assert capture == events


@pytest.mark.parametrize("action", Action)
async def test_a_saga_used_outside_its_block_is_refused_and_nothing_starts(action: Action) -> None:
    ledger, capture = Ledger(), EventCapture()
    saga = WorkflowEngine().saga(name="trip", sinks=[capture])
    step = Tracked("flight", ledger)
    with pytest.raises(RuntimeError) as caught:
        await act(saga, action, step)
    assert str(caught.value) == (
        f"saga.{action.value}() outside its block: use `async with engine.saga(ctx) as saga:` first"
    )
    assert (ledger, list(capture), saga.state) == ([], [], SagaState.NOT_STARTED)


async def test_a_saga_entered_twice_is_refused() -> None:
    saga = WorkflowEngine().saga(name="trip")
    async with saga:
        pass
    with pytest.raises(RuntimeError) as caught:
        async with saga:
            pass  # pragma: no cover
    assert str(caught.value) == "saga 'trip' was already entered; a Saga runs once"


async def test_a_rollback_reason_that_is_no_string_is_refused_and_the_saga_stays_open() -> None:
    ledger = Ledger()
    async with WorkflowEngine().saga(name="trip") as saga:
        await saga.step(Tracked("flight", ledger))
        with pytest.raises(TypeError) as caught:
            await saga.rollback(402)  # type: ignore[arg-type]
        assert saga.state is SagaState.OPEN
    assert str(caught.value) == "rollback(reason) takes a str, got int"
    assert (saga.run.status, ledger) == (SagaStatus.COMMITTED, [(Effect.EXECUTE, "flight")])


SAME_STEP = (
    "parallel members 0 and 1 are the same step object; members run at once, each with its own key, "
    "so give each its own step"
)
EMPTY = "parallel() needs at least one member: an empty group has nothing to run"
NESTED = (
    "parallel member 1 is itself a parallel group; groups do not nest "
    "(list its members in the outer group instead)"
)
NOT_A_STEP = (
    "parallel member 1 is not a step: got int, which has no async execute(ctx, ...) and compensate(ctx, ...)"
)
BAD_ORDER = "parallel(compensation=...) must be one of 'concurrent', 'reverse_start', got 'sideways'"


def bad_groups(ledger: Ledger) -> list[tuple[str, tuple[object, ...], dict[str, str], str]]:
    """(case, members, options, whole message) of every group `parallel` refuses."""
    twice = Tracked("car", ledger)
    return [
        ("same step twice", (twice, twice), {}, SAME_STEP),
        ("same step twice, with arguments", ((twice, (), {}), twice), {}, SAME_STEP),
        ("empty", (), {}, EMPTY),
        ("nested", (Tracked("car", ledger), parallel(Tracked("taxi", ledger))), {}, NESTED),
        (
            "nested, with arguments",
            (Tracked("car", ledger), (parallel(Tracked("taxi", ledger)), (), {})),
            {},
            NESTED,
        ),
        ("not a step", (Tracked("car", ledger), 7), {}, NOT_A_STEP),
        ("unknown order", (Tracked("car", ledger),), {"compensation": "sideways"}, BAD_ORDER),
    ]


CASES = [case for case, *_ in bad_groups(Ledger())]


@pytest.mark.parametrize("case", CASES)
async def test_a_bad_group_is_refused_where_it_is_built_before_any_list_saga_holds_it(case: str) -> None:
    ledger = Ledger()
    ((_, members, options, message),) = [bad for bad in bad_groups(ledger) if bad[0] == case]
    with pytest.raises(SagaDefinitionError) as caught:
        parallel(*members, **options)
    assert str(caught.value) == message
    assert ledger == []


@pytest.mark.parametrize("case", CASES)
async def test_a_bad_group_is_refused_by_a_dynamic_saga_which_stays_open(case: str) -> None:
    ledger, capture = Ledger(), EventCapture()
    ((_, members, options, message),) = [bad for bad in bad_groups(ledger) if bad[0] == case]
    async with WorkflowEngine().saga(name="trip", sinks=[capture]) as saga:
        await saga.step(Tracked("flight", ledger))
        before = list(capture)
        with pytest.raises(SagaDefinitionError) as caught:
            await saga.parallel(*members, **options)
        assert (list(capture), saga.state) == (before, SagaState.OPEN)
        await saga.step(Tracked("hotel", ledger))
    assert str(caught.value) == message
    assert ledger == [(Effect.EXECUTE, "flight"), (Effect.EXECUTE, "hotel")]
    assert saga.run.status is SagaStatus.COMMITTED
    # The refused group took no place in the run: the next step has the next index.
    assert [(e.index, e.step) for e in capture if isinstance(e, StepStarted)] == [
        (0, "flight"),
        (1, "hotel"),
    ]


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (Tracked, "saga entry 2 (Tracked): Tracked is a step class; pass an instance, Tracked(...)"),
        (
            SyncExecute(),
            "saga entry 2 (sync): execute must be `async def` "
            "(a sync function cannot be cancelled at its deadline)",
        ),
    ],
    ids=["a step class", "a sync execute"],
)
async def test_a_member_the_saga_check_refuses_stops_a_list_saga_before_its_first_step(
    member: object, message: str
) -> None:
    ledger, capture = Ledger(), EventCapture()
    with pytest.raises(SagaDefinitionError) as caught:
        await WorkflowEngine().run_saga(
            [Tracked("flight", ledger), parallel(Tracked("car", ledger), member)], sinks=[capture]
        )
    assert str(caught.value) == message
    assert (ledger, list(capture)) == ([], [])


async def test_a_group_nested_by_hand_is_refused_when_the_list_is_checked() -> None:
    """`parallel` refuses nesting; a `ParallelGroup` built directly is caught by the saga's check."""
    ledger = Ledger()
    nested = ParallelGroup((Tracked("car", ledger), ParallelGroup((Tracked("taxi", ledger),))))
    with pytest.raises(SagaDefinitionError) as caught:
        await WorkflowEngine().run_saga([Tracked("flight", ledger), nested])
    assert str(caught.value) == (
        "saga entry 2 (parallel): a parallel group inside a parallel group; groups do not nest"
    )
    assert ledger == []


async def test_a_step_the_check_refuses_leaves_a_dynamic_saga_open_and_its_index_free() -> None:
    ledger, capture = Ledger(), EventCapture()
    async with WorkflowEngine().saga(name="trip", sinks=[capture]) as saga:
        await saga.step(Tracked("flight", ledger))
        with pytest.raises(SagaDefinitionError) as caught:
            await saga.step(Tracked("hotel", ledger), 3)
        await saga.step(Tracked("car", ledger))
    assert str(caught.value) == (
        "saga entry 1 (hotel): execute(ctx) does not fit the arguments the saga gives it "
        "(1 positional argument after the context): too many positional arguments"
    )
    assert ledger == [(Effect.EXECUTE, "flight"), (Effect.EXECUTE, "car")]
    assert [(type(e).__name__, getattr(e, "index", None)) for e in capture] == [
        ("SagaStarted", None),
        ("StepStarted", 0),
        ("StepSucceeded", 0),
        ("StepStarted", 1),
        ("StepSucceeded", 1),
        ("SagaCommitted", None),
    ]


async def test_a_group_given_to_step_with_arguments_is_refused_and_nothing_runs() -> None:
    ledger, capture = Ledger(), EventCapture()
    async with WorkflowEngine().saga(name="trip", sinks=[capture]) as saga:
        await saga.step(Tracked("flight", ledger))
        before = list(capture)
        with pytest.raises(SagaDefinitionError) as caught:
            await saga.step(parallel(Tracked("car", ledger), Tracked("taxi", ledger)), nights=3)
        assert (list(capture), saga.state) == (before, SagaState.OPEN)
    assert str(caught.value) == (
        "saga.step(parallel(...)) takes no arguments: give each member its own, as (step, args, kwargs)"
    )
    assert ledger == [(Effect.EXECUTE, "flight")]


CONFLICT = (
    "parallel members 'car' and 'taxi' both wrote metadata key 'ride', with different values: "
    "the group's output would depend on which finished last"
)


async def test_members_writing_one_key_differently_fail_a_list_saga_naming_both_and_the_key() -> None:
    ledger = Ledger()
    car, taxi = Tracked("car", ledger, key="ride"), Tracked("taxi", ledger, key="ride")
    run = await WorkflowEngine().run_saga(
        [Tracked("flight", ledger), parallel(car, taxi, compensation="reverse_start")], name="trip"
    )
    assert isinstance(run.error, SagaRolledBack)
    assert str(run.error) == f"saga 'trip': {CONFLICT} — rolled back: taxi, car, flight"
    assert isinstance(run.error.__cause__, StepResultError)
    assert str(run.error.__cause__) == CONFLICT
    # Both members ran (in either order) and succeeded, so both are undone, newest start first.
    assert ledger[0] == (Effect.EXECUTE, "flight")
    assert sorted(ledger[1:3]) == [(Effect.EXECUTE, "car"), (Effect.EXECUTE, "taxi")]
    assert ledger[3:] == [
        (Effect.COMPENSATE, "taxi"),
        (Effect.COMPENSATE, "car"),
        (Effect.COMPENSATE, "flight"),
    ]


async def test_members_writing_one_key_differently_fail_saga_parallel_naming_both_and_the_key() -> None:
    ledger = Ledger()
    car, taxi = Tracked("car", ledger, key="ride"), Tracked("taxi", ledger, key="ride")
    saga = WorkflowEngine().saga(name="trip")

    async def trip() -> None:
        async with saga:
            await saga.step(Tracked("flight", ledger))
            await saga.parallel(car, taxi, compensation="reverse_start")

    with pytest.raises(SagaRolledBack) as caught:
        await trip()
    assert str(caught.value) == f"saga 'trip': {CONFLICT} — rolled back: taxi, car, flight"
    assert isinstance(caught.value.__cause__, StepResultError)
    assert str(caught.value.__cause__) == CONFLICT
    assert ledger[3:] == [
        (Effect.COMPENSATE, "taxi"),
        (Effect.COMPENSATE, "car"),
        (Effect.COMPENSATE, "flight"),
    ]


async def test_members_writing_one_key_alike_merge_without_conflict() -> None:
    ledger = Ledger()

    class Same(Tracked):
        async def execute(self, ctx: AegisContext) -> AegisContext:
            self.ledger.append((Effect.EXECUTE, self.name))
            return ctx.with_metadata({"city": "LIS"})

    async with WorkflowEngine().saga(name="trip") as saga:
        ctx = await saga.parallel(Same("car", ledger), Same("taxi", ledger))
    assert (saga.run.status, ctx.to_json()) == (SagaStatus.COMMITTED, {"city": "LIS"})
