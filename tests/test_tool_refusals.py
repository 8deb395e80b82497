"""A tool's error is a refusal (nothing to undo) only when the tool says so; any other may follow an effect.

An `AegisMCP` server marks its refusals (a `ToolError` raised by a tool, a bad request, a workflow
that rolled back) with ``_meta["aegis-nb/refused"]``. A tool that crashed after acting, a stuck
workflow, or an error from a server that marks nothing arrive as ``ToolError(refused=False)``, and a
failed in-doubt step is then compensated, live as in the journal. Whether a failed in-doubt step is
undone is decided the same way live, after a crash and on Temporal, for every kind of `ToolError`; no
result says "refused" for a call that may have acted, while a call refused on arrival still says so.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, RequestParamsMeta, TextContent

from aegis_nb import SagaCompensationFailed, SagaStatus
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaRolledBack, ToolError, ToolTimeoutError, is_refusal
from aegis_nb.kernel.report import ErrorInfo
from aegis_nb.mock import DECLINED, DECLINED_TEST_CARD, TravelAgency, travel_saga, trip_context
from aegis_nb.mock.travel import travel_app
from aegis_nb.saga import fold_report
from aegis_nb.saga.durable import SqliteJournal
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.results import REFUSED_META_KEY, TIMED_OUT_META_KEY
from aegis_nb.server.session import connect, unwrap_result
from aegis_nb.server.tool_step import ToolPairStep
from aegis_nb.testing import EventCapture
from tests.conftest import STRICT
from tests.durable_support import Crash, CrashingJournal
from tests.steps import ASYNCIO_ONLY, ROLLED_BACK_TRAIL, Calls, Recorded
from tests.temporal_support import temporal_address

__all__ = ["temporal_address"]  # the session fixture, imported so pytest finds it here

pytestmark = pytest.mark.anyio


CHARGE_UNDONE = [
    ("SagaStarted",),
    ("StepStarted", "Charge"),
    ("StepFailed", "Charge"),
    ("CompensationStarted", "Charge"),
    ("CompensationSucceeded", "Charge"),
    ("SagaRolledBackEvent",),
]
"""The failed in-doubt charge is refunded."""


def bank(ledger: dict[str, str], server: MCPServer[Any]) -> MCPServer[Any]:
    """`charge` takes effect and then crashes, or refuses a declined card before acting."""

    @server.tool()
    async def charge(card: str, idempotency_key: str = "") -> dict[str, Any]:
        if card == "declined":
            raise ToolError("charge", "Card Declined!")
        ledger[idempotency_key] = "charged"
        raise KeyError("receipt printer")  # a crash after the money moved

    @server.tool()
    async def refund(idempotency_key: str = "") -> dict[str, Any]:
        ledger.pop(idempotency_key, None)
        return {}

    return server


async def charge_in_doubt(server: MCPServer[Any], card: str) -> tuple[SagaRolledBack, EventCapture]:
    capture = EventCapture()
    async with connect(server) as session:
        step = ToolPairStep(
            session,
            "charge",
            "refund",
            name="Charge",
            in_doubt=True,
            arguments=lambda ctx: {"card": card},
        )
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine(sinks=[capture]).execute_saga([step])
    return failure.value, capture


@pytest.mark.parametrize("framework", ["aegis", "plain"])
async def test_a_tool_that_crashed_after_acting_is_compensated_in_doubt(framework: str) -> None:
    ledger: dict[str, str] = {}
    server = AegisMCP("bank") if framework == "aegis" else MCPServer("bank")
    error, capture = await charge_in_doubt(bank(ledger, server), "4242")
    assert ledger == {}  # refunded: it used to be left charged under a "rolled back" report
    assert capture.trail() == CHARGE_UNDONE
    assert error.report.compensated == ("Charge",)
    cause = error.__cause__
    assert isinstance(cause, ToolError)
    assert (cause.refused, is_refusal(cause), error.report.cause) == (
        False,
        False,
        ErrorInfo("ToolError", "Error executing tool charge"),  # the SDK keeps the crash's details
    )


async def test_a_refusal_in_the_tools_own_words_owes_no_compensation() -> None:
    ledger: dict[str, str] = {}
    error, capture = await charge_in_doubt(bank(ledger, AegisMCP("bank")), "declined")
    assert capture.trail() == [
        ("SagaStarted",),
        ("StepStarted", "Charge"),
        ("StepFailed", "Charge"),
        ("SagaRolledBackEvent",),
    ]
    assert (error.report.summary(), error.report.cause) == (
        "Card Declined! — rolled back: nothing to undo",
        ErrorInfo("ToolError", "Card Declined!", refused=True),
    )
    assert ledger == {}


async def test_an_unmarked_error_from_a_server_that_marks_nothing_is_in_doubt() -> None:
    # A third-party server's "declined" cannot be told from a crash: the step is compensated, and
    # an undo that finds nothing under the key changes nothing.
    ledger: dict[str, str] = {}
    error, capture = await charge_in_doubt(bank(ledger, MCPServer("bank")), "declined")
    assert error.report.compensated == ("Charge",)
    assert capture.trail() == CHARGE_UNDONE
    assert ledger == {}


def result(meta: dict[str, Any] | None) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text="no")], is_error=True, _meta=meta)


@pytest.mark.parametrize(
    ("meta", "refused"),
    [
        ({REFUSED_META_KEY: True}, True),
        (None, False),
        ({}, False),
        ({REFUSED_META_KEY: "yes"}, False),  # only the JSON value true says so
        ({REFUSED_META_KEY: False}, False),
    ],
)
def test_only_a_result_marked_refused_unwraps_to_a_refusal(
    meta: dict[str, Any] | None, refused: bool
) -> None:
    with pytest.raises(ToolError) as error:
        unwrap_result("charge", result(meta))
    assert (error.value.tool, error.value.message, error.value.refused) == ("charge", "no", refused)


async def test_workflows_mark_a_rollback_refused_and_leave_a_stuck_run_in_doubt() -> None:
    class Booked:
        async def execute(self, ctx: AegisContext) -> None:
            return None

        async def compensate(self, ctx: AegisContext) -> None:
            raise RuntimeError("the hotel's line is down")

    class Declined:
        async def execute(self, ctx: AegisContext) -> None:
            raise ValueError("Card Declined!")

        async def compensate(self, ctx: AegisContext) -> None:
            return None

    app = AegisMCP("agent")

    @app.workflow("rolls_back")
    async def rolls_back(ctx: AegisContext) -> AegisContext:
        return await app.workflow_engine.execute_saga([Declined()], ctx)

    @app.workflow("gets_stuck")
    async def gets_stuck(ctx: AegisContext) -> AegisContext:
        stuck_engine = WorkflowEngine(compensation_retry=RetryPolicy.never())
        return await stuck_engine.execute_saga([Booked(), Declined()], ctx)

    @app.workflow("bad_input")
    async def bad_input(ctx: AegisContext, nights: int) -> None:
        return None

    async with Client(app) as client:
        rolled_back = await client.call_tool("rolls_back", {})
        stuck = await client.call_tool("gets_stuck", {})
        deadline_refused = await client.call_tool(
            "bad_input", {"nights": 1}, meta=cast(RequestParamsMeta, {"aegis-nb/timeoutMs": -1})
        )
    outcomes = [
        (r.is_error, (r.meta or {}).get(REFUSED_META_KEY)) for r in (rolled_back, stuck, deadline_refused)
    ]
    assert outcomes == [(True, True), (True, None), (True, True)]
    assert [unwrap_refused(name, r) for name, r in [("rolls_back", rolled_back), ("gets_stuck", stuck)]] == [
        True,
        False,
    ]


def unwrap_refused(tool: str, outcome: CallToolResult) -> bool:
    with pytest.raises(ToolError) as error:
        unwrap_result(tool, outcome)
    return error.value.refused


async def test_an_in_doubt_step_whose_tool_refused_is_not_compensated() -> None:
    calls = Calls()

    class DeclinedCharge(Recorded):
        async def execute(self, ctx: AegisContext) -> AegisContext:
            calls.log.append(("execute", self.name, ctx))
            raise ToolError("charge_card", "Card Declined!")

    steps = [Recorded("flight", calls), DeclinedCharge("card", calls, in_doubt=True)]
    with pytest.raises(SagaRolledBack) as raised:
        await WorkflowEngine().execute_saga(steps)
    assert calls.trail() == [("execute", "flight"), ("execute", "card"), ("compensate", "flight")]
    assert raised.value.report.summary() == "Card Declined! — rolled back: flight"


# -- an error that cannot tell whether it is a refusal ---------------------------------------------


class UnsureError(ToolError):
    """A tool error that cannot say whether the tool acted: reading `refused` raises."""

    @property
    def refused(self) -> bool:
        raise RuntimeError("refused is unknown")

    @refused.setter
    def refused(self, value: bool) -> None:
        pass


class FailsUnsure(Recorded):
    """An in-doubt step whose execute fails with an `UnsureError`."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        await super().execute(ctx)
        raise UnsureError("card", "Card Declined!")


class UndoFailsUnsure(Recorded):
    """A step whose every compensation fails with an `UnsureError`."""

    async def compensate(self, ctx: AegisContext) -> None:
        await super().compensate(ctx)
        raise UnsureError("hotel", "hotel cannot be undone")


# Regression guard: a ToolError whose `refused` raises is no refusal.
def test_a_refused_attribute_that_raises_is_no_refusal() -> None:
    assert is_refusal(UnsureError("t", "m")) is False
    assert is_refusal(ToolError("t", "m")) is True
    assert is_refusal(ToolError("t", "m", refused=False)) is False


# Regression guard: an in-doubt step failing with such an error is undone, and the rollback goes on.
async def test_a_failed_in_doubt_step_whose_error_cannot_tell_refused_is_compensated_with_the_rest() -> None:
    calls, capture = Calls(), EventCapture()
    saga = [Recorded("flight", calls), Recorded("hotel", calls), FailsUnsure("card", calls, in_doubt=True)]
    run = await WorkflowEngine(sinks=[capture]).run_saga(saga)
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "hotel"),
        ("execute", "card"),
        ("compensate", "card"),
        ("compensate", "hotel"),
        ("compensate", "flight"),
    ]
    assert capture.trail() == [
        *ROLLED_BACK_TRAIL[:7],
        ("CompensationStarted", "card"),
        ("CompensationSucceeded", "card"),
        *ROLLED_BACK_TRAIL[7:],
    ]
    assert run.report.cause == ErrorInfo("UnsureError", "Card Declined!")
    assert run.report.compensated == ("card", "hotel", "flight")
    assert isinstance(run.error, SagaRolledBack)
    assert str(run.error) == "saga 'saga': Card Declined! — rolled back: card, hotel, flight"
    assert [e.seq for e in run.events] == list(range(len(run.events)))
    assert fold_report(run.events) == run.report


# Regression guard: an undo failing with such an error is a failed undo, and the rest are still undone.
async def test_a_compensation_failing_with_an_error_that_cannot_tell_refused_leaves_the_rest_undone() -> None:
    calls, capture = Calls(), EventCapture()
    saga = [
        Recorded("flight", calls),
        UndoFailsUnsure("hotel", calls, retry=RetryPolicy.never()),
        Recorded("card", calls, fail="Card Declined!"),
    ]
    run = await WorkflowEngine(sinks=[capture]).run_saga(saga)
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "hotel"),
        ("execute", "card"),
        ("compensate", "hotel"),
        ("compensate", "flight"),
    ]
    assert capture.trail() == [
        *ROLLED_BACK_TRAIL[:8],
        ("CompensationFailed", "hotel"),
        *ROLLED_BACK_TRAIL[9:11],
        ("SagaStuck",),
    ]
    assert run.status is SagaStatus.STUCK
    assert run.report.left_standing == ("hotel",)
    assert run.report.compensated == ("flight",)
    assert isinstance(run.error, SagaCompensationFailed)
    assert str(run.error) == (
        "saga 'saga': Card Declined! — could not undo: hotel (hotel cannot be undone, after 1 attempt)"
        " — rolled back: flight"
    )
    assert fold_report(run.events) == run.report


# -- every kind of ToolError, decided alike live, after a crash and on Temporal --------------------


ONCE = RetryPolicy(attempts=1, initial_delay=0.0)


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


# Regression guard: every kind of ToolError (a subclass skipping ToolError's __init__, one declaring
# refused = False) is decided the same live and by recovery.
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


# Regression guard: ... and by the Temporal workflow.
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


# -- no refusal mark for a call that may have acted ------------------------------------------------


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


# Regression guard: a workflow whose earlier saga committed is not marked refused when a later one rolls back.
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


# Regression guard: a call that acted before running out of time is in doubt, not refused.
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


# Regression guard: a call whose deadline passed before it arrived is still refused.
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


# Regression guard: the mock agency's declined card is still a refusal, and its agent's rollback too.
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
