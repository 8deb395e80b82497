"""The live view draws sagas shaped at run time as they happen: steps it could not know ahead, members
of a parallel group whose events interleave, and runs nested in a dynamic saga's block.

A saga built as it runs (`engine.saga()`) names no steps when it starts: the view grows a lane per
step as each starts. A group's members report from tasks of their own, in whatever order they end,
and each redraw shows exactly where every member stands. A saga that the code in a dynamic saga's
``async with`` block (or one of its steps) runs is nested in it and does not take the view over.
Time is moved by hand with the widget tests' fake scheduler; members are held and released with
anyio events: nothing sleeps.
"""

from __future__ import annotations

from functools import partial

import anyio
import pytest

from aegis_nb.diagram import LaneState, MessageKind
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.report import SagaStatus
from aegis_nb.notebook import LiveView
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent, SagaStarted, StepEvent, StepStarted, StepSucceeded, is_final
from aegis_nb.saga.parallel import parallel
from tests.test_widget_live import FakeScheduler, RecordingSurface, Step

Look = tuple[tuple[str, ...], tuple[LaneState, ...], SagaStatus]


def look(view: LiveView, clock: FakeScheduler) -> Look:
    """What the view shows once its coalescer had its turn: steps, lanes and status."""
    clock.advance(1.0)
    model = view.model
    status = 'data-status="' + model.status.value + '"'
    assert status in view.widget.value, "the widget shows the model the view holds"
    return model.steps, model.lanes, model.status


class Gate:
    """A step that waits for its gate to open, so a test decides when each member ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gate = anyio.Event()

    async def execute(self, ctx: AegisContext) -> AegisContext:
        await self.gate.wait()
        return ctx.with_metadata({self.name: "done"})

    async def compensate(self, ctx: AegisContext) -> None:
        pass


class Signals:
    """A sink that sets an anyio event when a step reaches a given point (`when`), or the run ends."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[type, str], anyio.Event] = {}
        self.ended = anyio.Event()

    def when(self, kind: type[StepEvent], step: str) -> anyio.Event:
        """The event set when `step` reaches `kind`: ask before the run starts, or it may be missed."""
        return self._waiting.setdefault((kind, step), anyio.Event())

    def __call__(self, event: SagaEvent) -> None:
        if is_final(event):
            self.ended.set()
        elif isinstance(event, StepEvent) and (type(event), event.step) in self._waiting:
            self._waiting[type(event), event.step].set()


@pytest.mark.anyio
async def test_a_dynamic_saga_grows_a_lane_per_step_as_each_starts() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    seen = []
    async with engine.saga(name="trip") as saga:
        seen.append(look(view, clock))
        await saga.step(Step("Flight"))
        seen.append(look(view, clock))
        await saga.parallel(Step("Hotel"), Step("Car"))
        seen.append(look(view, clock))
        await saga.rollback("too expensive")
    seen.append(look(view, clock))
    done, undone = LaneState.SUCCEEDED, LaneState.COMPENSATED
    assert seen == [
        ((), (), SagaStatus.RUNNING),
        (("Flight",), (done,), SagaStatus.RUNNING),
        (("Flight", "Hotel", "Car"), (done, done, done), SagaStatus.RUNNING),
        (("Flight", "Hotel", "Car"), (undone, undone, undone), SagaStatus.ROLLED_BACK),
    ]
    # Once over, the live output became the static picture, once.
    assert len(surface.replaced) == 1
    assert view.events == saga.run.events


@pytest.mark.anyio
async def test_each_redraw_shows_where_every_member_of_a_group_stands() -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    flight, hotel, signals = Gate("Flight"), Gate("Hotel"), Signals()
    started = [signals.when(StepStarted, "Flight"), signals.when(StepStarted, "Hotel")]
    hotel_done = signals.when(StepSucceeded, "Hotel")
    seen = []
    async with anyio.create_task_group() as tasks:
        saga = [parallel(flight, hotel), Step("Pay")]
        tasks.start_soon(partial(engine.run_saga, saga, name="trip", sinks=(signals,)))
        for event in started:
            await event.wait()
        seen.append(look(view, clock))
        hotel.gate.set()  # the member started second ends first
        await hotel_done.wait()
        seen.append(look(view, clock))
        flight.gate.set()
        await signals.ended.wait()
    seen.append(look(view, clock))
    steps = ("Flight", "Hotel", "Pay")
    running, done, pending = LaneState.RUNNING, LaneState.SUCCEEDED, LaneState.PENDING
    assert seen == [
        (steps, (running, running, pending), SagaStatus.RUNNING),
        (steps, (running, done, pending), SagaStatus.RUNNING),
        (steps, (done, done, done), SagaStatus.COMMITTED),
    ]
    arrows = [(message.kind, message.step) for message in view.model.messages]
    # The members start together, in an order the event loop picks (trio shuffles it).
    assert sorted(arrows[:2], key=lambda arrow: arrow[1]) == [
        (MessageKind.EXECUTE, 0),
        (MessageKind.EXECUTE, 1),
    ]
    assert arrows[2:] == [
        (MessageKind.SUCCEEDED, 1),
        (MessageKind.SUCCEEDED, 0),
        (MessageKind.EXECUTE, 2),
        (MessageKind.SUCCEEDED, 2),
    ]


class Nesting:
    """A step that runs a saga of its own on the same engine, in its own task's stack."""

    name = "Plan"

    def __init__(self, engine: WorkflowEngine) -> None:
        self.engine = engine

    async def execute(self, ctx: AegisContext) -> None:
        await self.engine.run_saga([Step("Inner")], name="inner")

    async def compensate(self, ctx: AegisContext) -> None:
        pass


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["in the block", "in a step"])
async def test_a_saga_nested_in_a_dynamic_saga_does_not_take_the_view_over(where: str) -> None:
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    async with engine.saga(name="trip") as saga:
        await saga.step(Step("Flight"))
        if where == "in the block":
            await engine.run_saga([Step("Inner")], name="inner")
        else:
            await saga.step(Nesting(engine))
        await saga.step(Step("Hotel"))
    outer = saga.run
    assert view.events == outer.events
    assert [event.saga for event in view.events if isinstance(event, SagaStarted)] == ["trip"]
    expected = ("Flight", "Hotel") if where == "in the block" else ("Flight", "Plan", "Hotel")
    assert look(view, clock) == (expected, (LaneState.SUCCEEDED,) * len(expected), SagaStatus.COMMITTED)
    assert len(surface.replaced) == 1


@pytest.mark.anyio
async def test_settle_swaps_in_the_static_picture_a_finished_run_waits_for() -> None:
    # The end of a cell (`%aegis_watch` settles its views there): a run's static picture must not
    # wait for a loop turn that comes after the cell finished.
    clock, surface = FakeScheduler(), RecordingSurface()
    view = LiveView(scheduler=clock, surface=surface)
    engine = WorkflowEngine()
    view.attach(engine)
    async with engine.saga(name="trip") as saga:
        await saga.step(Step("Flight"))
    assert surface.replaced == []  # waiting for the loop's next turn
    view.settle()
    assert len(surface.replaced) == 1
    assert surface.replaced[0]["text/plain"].startswith("trip — COMMITTED")
    view.settle()  # nothing waits any more: nothing is redrawn
    assert (len(surface.replaced), view.redraws) == (1, 1)
