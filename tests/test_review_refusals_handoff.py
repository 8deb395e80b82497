"""Review of the refusal mark and the rollback's handoff.

Refusals: whether a failed in-doubt step is undone is decided the same way live, after a crash and on
Temporal, for every kind of `ToolError` (a subclass whose ``__init__`` skips ToolError's, one that
declares ``refused = False``); and no `AegisMCP` result says "refused" for a call that may have acted
(a workflow whose earlier saga committed, a call that acted before something inside it found no
time left), while a call refused on arrival still says so.

Handoff: a native cancellation of a failed run's caller, landing at any moment of the rollback (before
its task first runs, during it, between the task's wake-up of its caller and its end), repeated, or
from `asyncio.timeout` or an anyio scope, waits for every compensation and then propagates unchanged.
"""

from __future__ import annotations

import asyncio
import gc
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from mcp import Client
from mcp.types import RequestParamsMeta

from aegis_nb import AegisContext, FailureKind, RetryPolicy, SagaRolledBack, WorkflowEngine
from aegis_nb.kernel.errors import ToolError, ToolTimeoutError, is_refusal
from aegis_nb.kernel.report import ErrorInfo
from aegis_nb.kernel.shielding import Handoff, outlast
from aegis_nb.mock import DECLINED, DECLINED_TEST_CARD, TravelAgency, travel_saga, trip_context
from aegis_nb.mock.travel import travel_app
from aegis_nb.saga.durable import SqliteJournal
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.results import REFUSED_META_KEY, TIMED_OUT_META_KEY
from aegis_nb.server.session import unwrap_result
from aegis_nb.testing import EventCapture
from tests.conftest import STRICT
from tests.durable_support import Crash, CrashingJournal
from tests.steps import ROLLED_BACK_TRAIL, Calls, Recorded
from tests.temporal_support import temporal_address

__all__ = ["temporal_address"]  # the session fixture, imported so pytest finds it here

pytestmark = pytest.mark.anyio

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # Task.cancel() is asyncio's own
ONCE = RetryPolicy(attempts=1, initial_delay=0.0)


# -- refusals: every kind of ToolError, live, after a crash, on Temporal ----------------------------


class SkipsInit(ToolError):
    """A subclass whose ``__init__`` does not call ToolError's: a refusal, as the class default says."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.tool, self.message, self.structured = "charge", message, None


class Crashed(ToolError):
    """A subclass that declares itself not a refusal: the tool may have acted."""

    refused = False


class Book:
    """Succeeds; its undo is recorded in `undone`."""

    def __init__(self, undone: list[str]) -> None:
        self.name = "Book"
        self.undone = undone

    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        self.undone.append(self.name)


class Charge:
    """An in-doubt step whose execute raises what `make` builds; its undo is recorded in `undone`."""

    in_doubt = True

    def __init__(self, undone: list[str], make: Callable[[], Exception]) -> None:
        self.name = "Charge"
        self.undone = undone
        self.make = make

    async def execute(self, ctx: AegisContext) -> None:
        raise self.make()

    async def compensate(self, ctx: AegisContext) -> None:
        self.undone.append(self.name)


ERRORS: list[tuple[Callable[[], Exception], ErrorInfo, list[str]]] = [
    (lambda: ToolError("charge", "declined"), ErrorInfo("ToolError", "declined", refused=True), ["Book"]),
    (
        lambda: ToolError("charge", "crashed", refused=False),
        ErrorInfo("ToolError", "crashed"),
        ["Charge", "Book"],
    ),
    (lambda: SkipsInit("declined"), ErrorInfo("SkipsInit", "declined", refused=True), ["Book"]),
    (lambda: Crashed("charge", "crashed"), ErrorInfo("Crashed", "crashed"), ["Charge", "Book"]),
    (
        lambda: Crashed("charge", "declined", refused=True),
        ErrorInfo("Crashed", "declined", refused=True),
        ["Book"],
    ),
]
IDS = ["refused", "not-refused", "subclass-skipping-init", "subclass-not-refused", "subclass-told-refused"]


@pytest.mark.parametrize(("make", "cause", "undone"), ERRORS, ids=IDS)
async def test_each_kind_of_tool_error_is_decided_alike_live_and_after_a_crash(
    tmp_path: Path, make: Callable[[], Exception], cause: ErrorInfo, undone: list[str]
) -> None:
    live: list[str] = []
    run = await WorkflowEngine(compensation_retry=ONCE).run_saga([Book(live), Charge(live, make)])
    assert (run.report.cause, run.report.compensated, live) == (cause, tuple(undone), undone)
    assert is_refusal(make()) is (undone == ["Book"])

    # The same saga, killed at its first compensation's start (events 0-4 are journaled), recovered.
    path, recovered = tmp_path / "runs.db", list[str]()
    steps = [Book(recovered), Charge(recovered, make)]
    with pytest.raises(Crash):
        await WorkflowEngine(journal=CrashingJournal(SqliteJournal(path, steps=steps), 5)).run_saga(steps)
    assert recovered == []
    async with SqliteJournal(path, steps=steps) as journal:
        (again,) = await WorkflowEngine(journal=journal, compensation_retry=ONCE).recover()
    assert (again.report.cause, again.report.compensated, recovered) == (cause, tuple(undone), undone)


@ASYNCIO_ONLY
@pytest.mark.parametrize(("make", "cause", "undone"), ERRORS, ids=IDS)
async def test_each_kind_of_tool_error_is_decided_alike_on_temporal(
    temporal_address: str, make: Callable[[], Exception], cause: ErrorInfo, undone: list[str]
) -> None:
    if not STRICT:
        pytest.importorskip("temporalio")
    from temporalio.client import Client as TemporalClient

    from aegis_nb.temporal import TemporalSagaRunner, saga_worker

    client = await TemporalClient.connect(temporal_address)
    remote: list[str] = []
    steps = [Book(remote), Charge(remote, make)]
    queue = f"test-{uuid.uuid4().hex}"
    async with saga_worker(client, queue, steps=steps):
        runner = TemporalSagaRunner(
            client, queue, steps=steps, compensation_retry=ONCE, heartbeat_timeout=1.0
        )
        run = await runner.run_saga(steps, AegisContext(), name="trip")
    # One attempt of Charge: a worker that fails to report the error would have Temporal retry it.
    assert (run.report.cause, run.report.compensated, remote) == (cause, tuple(undone), undone)


# -- refusals: no refusal mark for a call that may have acted ----------------------------------------


class Booked:
    async def execute(self, ctx: AegisContext) -> None:
        return None

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Declined:
    async def execute(self, ctx: AegisContext) -> None:
        raise ValueError(DECLINED)

    async def compensate(self, ctx: AegisContext) -> None:
        return None


def marks(result: Any) -> tuple[bool, object, object]:
    meta = result.meta or {}
    return result.is_error, meta.get(REFUSED_META_KEY), meta.get(TIMED_OUT_META_KEY, "-")


async def test_a_workflow_whose_earlier_saga_committed_is_not_a_refusal_when_a_later_one_rolls_back() -> None:
    app = AegisMCP("agent")

    @app.workflow("one_saga")
    async def one_saga(ctx: AegisContext) -> AegisContext:
        return await app.workflow_engine.execute_saga([Booked(), Declined()], ctx)

    @app.workflow("two_sagas")
    async def two_sagas(ctx: AegisContext) -> AegisContext:
        await app.workflow_engine.execute_saga([Booked()], ctx)  # committed: it acted
        return await app.workflow_engine.execute_saga([Booked(), Declined()], ctx)

    async def ignore(progress: float, total: float | None, message: str | None) -> None:
        return None

    async with Client(app) as client:
        one = await client.call_tool("one_saga", {})
        two = await client.call_tool("two_sagas", {})
        two_with_progress = await client.call_tool("two_sagas", {}, progress_callback=ignore)
    assert [marks(r) for r in (one, two, two_with_progress)] == [
        (True, True, "-"),
        (True, None, "-"),
        (True, None, "-"),
    ]
    with pytest.raises(ToolError) as error:
        unwrap_result("two_sagas", two)
    assert (error.value.message, error.value.refused) == (f"{DECLINED} — rolled back: Booked", False)


async def test_a_call_that_acted_before_something_in_it_had_no_time_left_is_in_doubt_not_refused() -> None:
    app = AegisMCP("agent")
    acted: list[str] = []

    @app.workflow("late_second_saga")
    async def late_second_saga(ctx: AegisContext) -> AegisContext:
        await app.workflow_engine.execute_saga([Booked()], ctx)  # committed: it acted
        # The rest of the request's time goes by; the next saga is refused before it starts.
        return await app.workflow_engine.execute_saga([Booked()], ctx.with_deadline(anyio.current_time()))

    @app.tool()
    async def charge() -> dict[str, Any]:
        acted.append("charged")
        await WorkflowEngine().execute_saga([Booked()], AegisContext(deadline=anyio.current_time()))
        return {}

    async with Client(app) as client:
        workflow = await client.call_tool("late_second_saga", {})
        tool = await client.call_tool("charge", {})
    assert [marks(r) for r in (workflow, tool)] == [(True, None, 0.0), (True, None, 0.0)]
    assert acted == ["charged"]
    for name, result in (("late_second_saga", workflow), ("charge", tool)):
        with pytest.raises(ToolTimeoutError):  # in doubt: an in-doubt step calling it is undone
            unwrap_result(name, result)


async def test_a_call_whose_deadline_had_passed_on_arrival_is_refused_and_runs_nothing() -> None:
    app = AegisMCP("agent")
    ran: list[str] = []

    @app.workflow("trip")
    async def trip(ctx: AegisContext) -> AegisContext:
        ran.append("trip")
        return await app.workflow_engine.execute_saga([Booked()], ctx)

    @app.tool()
    async def charge() -> dict[str, Any]:
        ran.append("charge")
        return {}

    async with Client(app) as client:
        results = [
            await client.call_tool(name, {}, meta=cast(RequestParamsMeta, {"aegis-nb/timeoutMs": 1e-300}))
            for name in ("trip", "charge")
        ]
    assert [marks(r) for r in results] == [(True, True, "-"), (True, True, "-")]
    assert ran == []
    texts = [re.sub(r"-?\d+\.\d ms", "N ms", r.content[0].text) for r in results]  # type: ignore[union-attr]
    assert texts == [
        f"step {name!r} had no time left: the deadline passed N ms before it started; it was not run"
        for name in ("trip", "charge")
    ]


async def test_the_mock_agency_still_refuses_a_declined_card_and_its_agent_marks_the_rollback() -> None:
    agency = TravelAgency()
    capture = EventCapture()
    async with agency.connect() as session:
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine(sinks=[capture]).execute_saga(
                travel_saga(session, "Lisbon", 3), trip_context(DECLINED_TEST_CARD)
            )
    report = failure.value.report
    assert report.cause == ErrorInfo("ToolError", DECLINED, refused=True)
    assert report.summary() == f"{DECLINED} — rolled back: {report.steps[1]}, {report.steps[0]}"
    assert [e for e in capture.trail() if e[0].startswith("Compensation")] == [
        ("CompensationStarted", report.steps[1]),
        ("CompensationSucceeded", report.steps[1]),
        ("CompensationStarted", report.steps[0]),
        ("CompensationSucceeded", report.steps[0]),
    ]  # the declined charge (in doubt) is not refunded: the card said it did nothing
    assert agency.state().is_empty

    # Served: the travel agent's workflow rolled back its one saga, so its result is a refusal.
    agent = travel_app(TravelAgency())
    async with Client(agent) as client:
        result = await client.call_tool(
            "book_trip", {"destination": "Lisbon", "nights": 3, "card_number": DECLINED_TEST_CARD}
        )
    assert marks(result) == (True, True, "-")


# -- handoff: a native cancellation at any moment of the rollback ------------------------------------


def travel(calls: Calls) -> list[Recorded]:
    return [Recorded("flight", calls), Recorded("hotel", calls), Recorded("card", calls, fail="no")]


ROLLBACK_EVENTS = range(ROLLED_BACK_TRAIL.index(("StepFailed", "card")), len(ROLLED_BACK_TRAIL))
"""Indexes of the events the rollback's own task emits, its last (SagaCompensated) included."""


def asyncio_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What asyncio logged (a task destroyed while pending, an exception never retrieved)."""
    gc.collect()
    return [r.getMessage() for r in caplog.records if r.name == "asyncio"]


@ASYNCIO_ONLY
@pytest.mark.parametrize("at", ROLLBACK_EVENTS)
@pytest.mark.parametrize("how", ["now", "next-callback"])
@pytest.mark.parametrize("times", [1, 3])
async def test_a_task_cancel_at_any_rollback_event_waits_for_every_compensation_then_propagates(
    at: int, how: str, times: int, caplog: pytest.LogCaptureFixture
) -> None:
    # "next-callback" at SagaCompensated lands after the rollback task woke its caller (Handoff) and
    # ended, before the caller resumed.
    loop = asyncio.get_running_loop()
    calls, capture, tasks = Calls(), EventCapture(), list[asyncio.Task[None]]()
    cancelling: list[int] = []

    def cancel() -> None:
        for _ in range(times):
            tasks[0].cancel()

    def arm(event: object) -> None:
        if len(capture.events) - 1 == at:
            cancel() if how == "now" else loop.call_soon(cancel)

    async def caller() -> None:
        try:
            await WorkflowEngine(sinks=[capture, arm]).run_saga(travel(calls))
        finally:
            task = asyncio.current_task()
            assert task is not None
            cancelling.append(task.cancelling())

    tasks.append(loop.create_task(caller()))
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert tasks[0].cancelled()
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert calls.trail()[-2:] == [("compensate", "hotel"), ("compensate", "flight")]
    assert cancelling == [times]
    assert asyncio_errors(caplog) == []


class CancelsAsItFails(Recorded):
    """Fails, having scheduled `cancel` to run before the rollback task (created just after) first steps."""

    def __init__(self, name: str, calls: Calls, cancel: Callable[[], object]) -> None:
        super().__init__(name, calls)
        self.cancel = cancel

    async def execute(self, ctx: AegisContext) -> AegisContext:
        self.calls.log.append(("execute", self.name, ctx))
        await anyio.lowlevel.checkpoint()
        asyncio.get_running_loop().call_soon(self.cancel)
        raise ValueError("Card Declined!")


@ASYNCIO_ONLY
async def test_a_task_cancel_before_the_rollback_task_first_runs_waits_for_it() -> None:
    calls, capture, tasks = Calls(), EventCapture(), list[asyncio.Task[None]]()
    card = CancelsAsItFails("card", calls, lambda: tasks[0].cancel())

    async def caller() -> None:
        await WorkflowEngine(sinks=[capture]).run_saga(
            [Recorded("flight", calls), Recorded("hotel", calls), card]
        )

    tasks.append(asyncio.get_running_loop().create_task(caller()))
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert capture.trail() == ROLLED_BACK_TRAIL
    assert capture.events[-1].report.failure_kind is FailureKind.ERROR  # type: ignore[union-attr]
    assert calls.trail()[-2:] == [("compensate", "hotel"), ("compensate", "flight")]


@ASYNCIO_ONLY
@pytest.mark.parametrize("at", ROLLBACK_EVENTS)
async def test_an_asyncio_timeout_expiring_at_any_rollback_event_times_out_after_it(at: int) -> None:
    loop = asyncio.get_running_loop()
    calls, capture = Calls(), EventCapture()

    async def saga_under_a_timeout() -> None:
        async with asyncio.timeout(None) as timeout:

            def arm(event: object) -> None:
                if len(capture.events) - 1 == at:
                    timeout.reschedule(loop.time())

            await WorkflowEngine(sinks=[capture, arm]).run_saga(travel(calls))

    with pytest.raises(TimeoutError) as raised:
        await saga_under_a_timeout()
    assert type(raised.value) is TimeoutError
    assert capture.trail() == ROLLED_BACK_TRAIL
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


@pytest.mark.parametrize("at", ROLLBACK_EVENTS)
async def test_an_anyio_scope_cancelled_at_any_rollback_event_is_caught_by_it_after_the_rollback(
    at: int,
) -> None:
    calls, capture = Calls(), EventCapture()
    with anyio.CancelScope() as scope:

        def arm(event: object) -> None:
            if len(capture.events) - 1 == at:
                scope.cancel()

        await WorkflowEngine(sinks=[capture, arm]).run_saga(travel(calls))
        await anyio.lowlevel.checkpoint()  # the cancellation lands here if the saga had returned
        raise AssertionError("the scope's cancellation was lost")
    assert scope.cancelled_caught
    assert capture.trail() == ROLLED_BACK_TRAIL


class SpawnsUndo(Recorded):
    """Its compensation runs its work in child tasks, and the caller's cancellation lands meanwhile."""

    def __init__(self, name: str, calls: Calls, cancel: Callable[[], object]) -> None:
        super().__init__(name, calls)
        self.cancel = cancel
        self.children: list[str] = []

    async def compensate(self, ctx: AegisContext) -> None:
        async def child(n: int) -> None:
            await anyio.lowlevel.checkpoint()
            self.children.append(f"{self.name}-{n}")

        self.cancel()
        async with anyio.create_task_group() as group:
            for n in range(2):
                group.start_soon(child, n)
        await super().compensate(ctx)


async def test_a_compensation_that_spawns_tasks_finishes_them_under_a_cancellation() -> None:
    calls, capture = Calls(), EventCapture()
    with anyio.CancelScope() as scope:
        hotel = SpawnsUndo("hotel", calls, scope.cancel)
        await WorkflowEngine(sinks=[capture]).run_saga(
            [Recorded("flight", calls), hotel, Recorded("card", calls, fail="no")]
        )
        await anyio.lowlevel.checkpoint()  # the scope's cancellation lands here
        raise AssertionError("the scope's cancellation was lost")
    assert scope.cancelled_caught
    assert (capture.trail(), sorted(hotel.children)) == (ROLLED_BACK_TRAIL, ["hotel-0", "hotel-1"])


@ASYNCIO_ONLY
async def test_a_compensation_that_spawns_tasks_finishes_them_under_a_task_cancel() -> None:
    calls, capture, tasks = Calls(), EventCapture(), list[asyncio.Task[None]]()
    hotel = SpawnsUndo("hotel", calls, lambda: tasks[0].cancel())

    async def caller() -> None:
        await WorkflowEngine(sinks=[capture]).run_saga(
            [Recorded("flight", calls), hotel, Recorded("card", calls, fail="no")]
        )

    tasks.append(asyncio.get_running_loop().create_task(caller()))
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert (capture.trail(), sorted(hotel.children)) == (ROLLED_BACK_TRAIL, ["hotel-0", "hotel-1"])


@ASYNCIO_ONLY
async def test_a_system_exit_from_a_compensation_wins_over_a_held_cancellation_which_stays_counted() -> None:
    calls, tasks, seen = Calls(), list[asyncio.Task[None]](), list[tuple[BaseException, int]]()
    leaving = SystemExit("shutting down mid-undo")

    class ExitsMidUndo(Recorded):
        async def compensate(self, ctx: AegisContext) -> None:
            tasks[0].cancel()
            await anyio.lowlevel.checkpoint()
            raise leaving

    async def caller() -> None:
        try:
            await WorkflowEngine().run_saga(
                [Recorded("flight", calls), ExitsMidUndo("hotel", calls), Recorded("card", calls, fail="no")]
            )
        except SystemExit as exc:
            task = asyncio.current_task()
            assert task is not None
            seen.append((exc, task.cancelling()))

    tasks.append(asyncio.get_running_loop().create_task(caller()))
    await tasks[0]
    assert seen == [(leaving, 1)]
    # The exit stopped the rollback (as an interrupt raised by a compensation does): flight stands.
    assert calls.trail() == [("execute", "flight"), ("execute", "hotel"), ("execute", "card")]


@ASYNCIO_ONLY
@pytest.mark.parametrize("cancel", ["before-wake", "after-wake"])
async def test_outlast_returns_a_cancellation_that_lands_around_the_handoff(cancel: str) -> None:
    loop = asyncio.get_running_loop()
    handoff, order = Handoff(), list[str]()
    waiters: list[asyncio.Task[asyncio.CancelledError | None]] = []

    async def work() -> str:
        await asyncio.sleep(0)
        if cancel == "before-wake":
            waiters[0].cancel()
        handoff.wake()
        if cancel == "after-wake":
            waiters[0].cancel()  # its waiter is already woken: the cancellation is still delivered
        order.append("work ends")
        return "done"

    task = loop.create_task(work())

    async def waiter() -> asyncio.CancelledError | None:
        cancelled = await outlast(task, handoff=handoff)
        order.append(f"waiter resumes, task done: {task.done()}")
        return cancelled

    waiters.append(loop.create_task(waiter()))
    cancelled = await waiters[0]
    assert isinstance(cancelled, asyncio.CancelledError)
    assert (order, task.result(), waiters[0].cancelling()) == (
        ["work ends", "waiter resumes, task done: True"],
        "done",
        1,
    )
