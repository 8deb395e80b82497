"""Parallel groups: members start together on one context, and fail, settle and roll back as one entry.

Each member has its own key; the group's output merges what the members wrote, in declaration
order, and a conflict fails the group naming both. When a member fails, the members still running
are cancelled and waited for; then the members that succeeded and the in-doubt ones that failed are
compensated, concurrently (by default) or one by one newest start first, and then the earlier
steps, newest first. A compensation that fails never stops its siblings'. No member outlives the saga.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from aegis_nb import (
    AegisContext,
    FailureKind,
    SagaCompensationFailed,
    SagaEvent,
    SagaRolledBack,
    SagaStarted,
    SagaStatus,
    StepFailed,
    StepResultError,
    StepTimedOut,
    WorkflowEngine,
    parallel,
)
from aegis_nb.saga import StepEvent
from aegis_nb.testing import EventCapture
from tests.steps import ASYNCIO_ONLY, NO_WAIT, Boom, Calls, Recorded

pytestmark = pytest.mark.anyio


class Member:
    """A member whose execute and compensate wait for the events the test sets, so the order of a
    group's interleaved events is the test's, not the scheduler's."""

    def __init__(
        self,
        name: str,
        calls: Calls,
        *,
        after: anyio.Event | None = None,
        fail: str | None = None,
        hang: bool = False,
        in_doubt: bool = False,
        undo_after: anyio.Event | None = None,
        undo_failures: int = 0,
    ) -> None:
        self.name, self.calls = name, calls
        self.after, self.fail, self.hang, self.in_doubt = after, fail, hang, in_doubt
        self.undo_after, self.undo_failures = undo_after, undo_failures
        self.done = anyio.Event()  # set once execute has returned
        self.undoing = anyio.Event()  # set as compensate starts
        self.undone = anyio.Event()  # set as compensate returns
        self.compensation_retry = NO_WAIT

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.log.append(("execute", self.name, ctx))
        await anyio.lowlevel.checkpoint()  # every member starts before any ends
        if self.after is not None:
            await self.after.wait()
        if self.hang:
            await anyio.sleep_forever()
        if self.fail is not None:
            raise Boom(self.fail)
        self.done.set()
        return ctx.with_metadata({f"{self.name}_key": ctx.idempotency_key})

    async def compensate(self, ctx: AegisContext) -> None:
        self.calls.log.append(("compensate", self.name, ctx))
        self.undoing.set()
        if self.undo_after is not None:
            await self.undo_after.wait()
        if self.undo_failures:
            self.undo_failures -= 1
            raise Boom(f"{self.name} cannot be undone")
        self.undone.set()


UNORDERED = frozenset({"StepStarted", "StepFailed", "CompensationStarted"})
"""What members do at the same moment, in the order the scheduler picks: start, get cancelled, undo."""


def settled(trail: list[tuple[str, ...]], *members: str) -> list[tuple[str, ...]]:
    """`trail` with each run of `members`' events of one `UNORDERED` kind in a row sorted: the test
    fixes every other order with events, and leaves these to the scheduler (trio varies it)."""
    out: list[tuple[str, ...]] = []
    run: list[tuple[str, ...]] = []
    for entry in [*trail, ("end",)]:
        if run and (entry[0] != run[0][0] or len(entry) < 2 or entry[1] not in members):
            out += sorted(run)
            run = []
        if len(entry) > 1 and entry[1] in members and entry[0] in UNORDERED:
            run.append(entry)
        else:
            out.append(entry)
    return out[:-1]


async def test_a_group_that_commits_merges_its_members_outputs_in_declaration_order() -> None:
    calls, capture = Calls(), EventCapture()
    hotel = Member("hotel", calls)
    car = Member("car", calls, after=hotel.done)
    saga = [Recorded("flight", calls), parallel(hotel, car), Recorded("card", calls)]

    run = await WorkflowEngine(sinks=[capture]).run_saga(saga, name="trip")

    assert run.status is SagaStatus.COMMITTED
    run_id = run.run_id
    (card_input,) = calls.contexts("execute", "card")
    assert card_input.to_json() == {
        "flight_id": "FLIGHT-0",
        "hotel_key": f"{run_id}/1",
        "car_key": f"{run_id}/2",
    }
    assert card_input.idempotency_key == f"{run_id}/3"
    # Both members were given the flight's output, each with its own key.
    assert [calls.contexts("execute", m)[0].idempotency_key for m in ("hotel", "car")] == [
        f"{run_id}/1",
        f"{run_id}/2",
    ]
    assert settled(capture.trail(), "hotel", "car") == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "car"),
        ("StepStarted", "hotel"),
        ("StepSucceeded", "hotel"),
        ("StepSucceeded", "car"),
        ("StepStarted", "card"),
        ("StepSucceeded", "card"),
        ("SagaCommitted",),
    ]
    groups = {e.step: e.group for e in capture if isinstance(e, StepEvent)}
    assert groups == {"flight": None, "hotel": 1, "car": 1, "card": None}
    started = capture[0]
    assert isinstance(started, SagaStarted)
    assert started.steps == ("flight", "hotel", "car", "card")


def failing_group(calls: Calls, order: str = "concurrent") -> tuple[list[object], dict[str, Member]]:
    """flight, then hotel (succeeds), car (fails once hotel is booked), taxi and shuttle (still
    running when car fails; shuttle may have acted), then card (never reached)."""
    hotel = Member("hotel", calls)
    members = {
        "hotel": hotel,
        "car": Member("car", calls, after=hotel.done, fail="no cars left"),
        "taxi": Member("taxi", calls, hang=True),
        "shuttle": Member("shuttle", calls, hang=True, in_doubt=True),
    }
    group = parallel(*members.values(), compensation=order)
    return [Recorded("flight", calls), group, Recorded("card", calls)], members


async def test_a_failing_member_cancels_the_others_and_the_group_is_undone_concurrently() -> None:
    calls, capture = Calls(), EventCapture()
    saga, members = failing_group(calls)
    # The hotel's compensation waits for the shuttle's to start, which waits for the hotel's to end:
    # they can only finish if they run at once.
    members["hotel"].undo_after = members["shuttle"].undoing
    members["shuttle"].undo_after = members["hotel"].undone

    with anyio.fail_after(5):  # a sequential rollback would wait here forever
        run = await WorkflowEngine(sinks=[capture]).run_saga(saga, name="trip")

    assert isinstance(run.error, SagaRolledBack)
    assert str(run.error) == "saga 'trip': no cars left — rolled back: hotel, shuttle, flight"
    assert (run.report.failed_step, run.report.failure_kind) == ("car", FailureKind.ERROR)
    group = ("hotel", "car", "taxi", "shuttle")
    assert settled(capture.trail(), *group) == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "car"),
        ("StepStarted", "hotel"),
        ("StepStarted", "shuttle"),
        ("StepStarted", "taxi"),
        ("StepSucceeded", "hotel"),
        ("StepFailed", "car"),
        ("StepFailed", "shuttle"),
        ("StepFailed", "taxi"),
        ("CompensationStarted", "hotel"),
        ("CompensationStarted", "shuttle"),
        ("CompensationSucceeded", "hotel"),
        ("CompensationSucceeded", "shuttle"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    cancelled = {e.step: (e.kind, e.error.message) for e in capture if isinstance(e, StepFailed)}
    sibling = "cancelled: another member of its parallel group failed (Boom)"
    assert cancelled == {
        "car": (FailureKind.ERROR, "no cars left"),
        "taxi": (FailureKind.CANCELLED, sibling),
        "shuttle": (FailureKind.CANCELLED, sibling),
    }
    # The hotel is undone with its own output; the in-doubt shuttle with what it was given.
    (hotel_undo,) = calls.contexts("compensate", "hotel")
    assert hotel_undo.metadata["hotel_key"] == f"{run.run_id}/1"
    (shuttle_undo,), (shuttle_input,) = (
        calls.contexts("compensate", "shuttle"),
        calls.contexts("execute", "shuttle"),
    )
    assert (shuttle_undo.metadata, shuttle_undo.idempotency_key) == (
        shuttle_input.metadata,
        shuttle_input.idempotency_key,
    )


async def test_in_reverse_start_order_the_group_is_undone_one_by_one_newest_start_first() -> None:
    calls, capture = Calls(), EventCapture()
    saga, _ = failing_group(calls, order="reverse_start")

    run = await WorkflowEngine(sinks=[capture]).run_saga(saga, name="trip")

    assert run.status is SagaStatus.ROLLED_BACK
    assert [e for e in capture.trail() if e[0].startswith("Compensation")] == [
        ("CompensationStarted", "shuttle"),
        ("CompensationSucceeded", "shuttle"),
        ("CompensationStarted", "hotel"),
        ("CompensationSucceeded", "hotel"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
    ]
    assert run.report.compensated == ("shuttle", "hotel", "flight")


async def test_a_compensation_that_fails_never_stops_its_siblings() -> None:
    calls, capture = Calls(), EventCapture()
    saga, members = failing_group(calls)
    members["hotel"].undo_failures = 3  # every attempt: the hotel is left standing
    members["hotel"].undo_after = members["shuttle"].undoing

    run = await WorkflowEngine(sinks=[capture]).run_saga(saga, name="trip")

    assert isinstance(run.error, SagaCompensationFailed)
    assert run.status is SagaStatus.STUCK
    assert [(f.step, f.attempts, f.error.message) for f in run.report.compensation_failures] == [
        ("hotel", 3, "hotel cannot be undone")
    ]
    assert run.report.compensated == ("shuttle", "flight")
    assert [method for method, step in calls.trail() if step == "hotel"] == ["execute"] + ["compensate"] * 3


async def test_a_cancelled_caller_cancels_every_member_and_gets_the_cancellation_after_the_rollback() -> None:
    calls, capture = Calls(), EventCapture()
    both_running = anyio.Event()
    hotel = Member("hotel", calls, hang=True)
    shuttle = Member("shuttle", calls, hang=True, in_doubt=True)
    started: list[str] = []

    def on_start(event: object) -> None:
        if isinstance(event, StepEvent) and type(event).__name__ == "StepStarted":
            started.append(event.step)
            if {"hotel", "shuttle"} <= set(started):
                both_running.set()

    engine = WorkflowEngine(sinks=[capture, on_start])
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(engine.run_saga, [Recorded("flight", calls), parallel(hotel, shuttle)])
            await both_running.wait()
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    assert scope.cancelled_caught
    kinds = {e.step: e.kind for e in capture if isinstance(e, StepFailed)}
    assert kinds == {"hotel": FailureKind.CANCELLED, "shuttle": FailureKind.CANCELLED}
    # The hotel had not acted and is not in doubt: only the shuttle and the flight are undone.
    assert [step for method, step in calls.trail() if method == "compensate"] == ["shuttle", "flight"]
    assert capture.trail()[-1] == ("SagaRolledBackEvent",)


async def test_no_member_outlives_the_saga() -> None:
    calls = Calls()
    release = anyio.Event()
    order: list[str] = []

    class Lingering:
        """Holds on for a while after its cancellation, as a tool finishing a request might."""

        name = "lingering"

        async def execute(self, ctx: AegisContext) -> None:
            try:
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):
                    await release.wait()
                order.append("lingering settled")

        async def compensate(self, ctx: AegisContext) -> None:
            pass

    failing = Member("car", calls, fail="no cars left")

    async def trip() -> None:
        await WorkflowEngine().run_saga([parallel(Lingering(), failing)])
        order.append("saga returned")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(trip)
        await anyio.wait_all_tasks_blocked()
        assert order == []  # the car failed, and the saga waits for the lingering member
        release.set()
    assert order == ["lingering settled", "saga returned"]


async def test_a_member_past_its_own_timeout_times_out_and_cancels_its_siblings() -> None:
    calls, capture = Calls(), EventCapture()
    slow = Recorded("slow", calls, hang=True, timeout=0.01)
    other = Member("other", calls, hang=True)

    run = await WorkflowEngine(sinks=[capture]).run_saga([Recorded("flight", calls), parallel(slow, other)])

    assert run.report.failure_kind is FailureKind.TIMEOUT
    timed_out = [e for e in capture if isinstance(e, StepTimedOut)]
    assert [e.step for e in timed_out] == ["slow"]
    assert timed_out[0].budget == pytest.approx(0.01)
    assert [(e.step, e.kind) for e in capture if isinstance(e, StepFailed)] == [
        ("other", FailureKind.CANCELLED)
    ]
    assert [step for method, step in calls.trail() if method == "compensate"] == ["flight"]


class Writes:
    """A member that writes one metadata key."""

    def __init__(self, name: str, key: str, value: str) -> None:
        self.name, self.key, self.value = name, key, value

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({self.key: self.value})

    async def compensate(self, ctx: AegisContext) -> None:
        pass


async def test_two_members_writing_one_key_differently_fail_the_group_naming_both() -> None:
    run = await WorkflowEngine().run_saga(
        [parallel(Writes("hotel", "booking", "H-1"), Writes("car", "booking", "C-7"))], name="trip"
    )
    assert isinstance(run.error, SagaRolledBack)
    cause = run.error.__cause__
    assert isinstance(cause, StepResultError)
    assert str(cause) == (
        "parallel members 'hotel' and 'car' both wrote metadata key 'booking', with different values: "
        "the group's output would depend on which finished last"
    )
    assert run.report.compensated in (("hotel", "car"), ("car", "hotel"))


async def test_members_writing_one_key_alike_agree() -> None:
    final = await WorkflowEngine().execute_saga(
        [parallel(Writes("hotel", "city", "LIS"), Writes("car", "city", "LIS"))]
    )
    assert final.to_json() == {"city": "LIS"}


def shape(events: Sequence[SagaEvent]) -> list[tuple[str, ...]]:
    """Each event's type, step, index and group: what two runs of the same steps share."""
    return [
        (type(e).__name__, e.step, str(e.index), str(e.group))
        if isinstance(e, StepEvent)
        else (type(e).__name__,)
        for e in events
    ]


async def test_a_dynamic_group_runs_as_the_same_group_in_a_list() -> None:
    listed, dynamic = EventCapture(), EventCapture()
    engine = WorkflowEngine()

    def steps(calls: Calls) -> tuple[Recorded, Member, Member]:
        hotel = Member("hotel", calls)
        return Recorded("flight", calls), hotel, Member("car", calls, after=hotel.done)

    flight, hotel, car = steps(Calls())
    await engine.run_saga([flight, parallel(hotel, car)], sinks=[listed])
    flight, hotel, car = steps(Calls())
    async with engine.saga(sinks=[dynamic]) as saga:
        await saga.step(flight)
        merged = await saga.parallel(hotel, car)

    assert merged == saga.context
    assert sorted(merged.metadata) == ["car_key", "flight_id", "hotel_key"]
    assert settled(shape(dynamic), "hotel", "car") == settled(shape(listed), "hotel", "car")
    assert ("StepSucceeded", "car", "2", "1") in shape(listed)


async def test_an_interrupt_in_one_members_compensation_propagates_as_it_is() -> None:
    calls = Calls()
    saga, members = failing_group(calls)

    async def interrupted(ctx: AegisContext) -> None:
        raise KeyboardInterrupt

    members["hotel"].compensate = interrupted  # type: ignore[method-assign]

    with pytest.raises(KeyboardInterrupt):
        await WorkflowEngine().run_saga(saga, name="trip")


@ASYNCIO_ONLY  # asyncio starts tasks in order; trio's order varies, so the hotel may begin first
async def test_a_member_whose_task_begins_after_the_group_failed_never_starts() -> None:
    calls, capture = Calls(), EventCapture()

    class FailsAtOnce:
        """Fails before its first await, so its siblings' tasks have not begun."""

        name = "card"

        async def execute(self, ctx: AegisContext) -> None:
            raise Boom("declined")

        async def compensate(self, ctx: AegisContext) -> None:
            pass

    run = await WorkflowEngine(sinks=[capture]).run_saga(
        [Recorded("flight", calls), parallel(FailsAtOnce(), Member("hotel", calls))]
    )

    assert run.status is SagaStatus.ROLLED_BACK
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("StepStarted", "card"),
        ("StepFailed", "card"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
        ("SagaRolledBackEvent",),
    ]
    assert calls.trail() == [("execute", "flight"), ("compensate", "flight")]
