"""A tool's error is a refusal (nothing to undo) only when the tool says so; any other may follow an effect.

An `AegisMCP` server marks its refusals (a `ToolError` raised by a tool, a bad request, a workflow
that rolled back) with ``_meta["aegis-nb/refused"]``. A tool that crashed after acting, a stuck
workflow, or an error from a server that marks nothing arrive as ``ToolError(refused=False)``, and a
failed in-doubt step is then compensated, live as in the journal.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, RequestParamsMeta, TextContent

from aegis_nb import SagaCompensationFailed, SagaStatus
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaRolledBack, ToolError, is_refusal
from aegis_nb.kernel.report import ErrorInfo
from aegis_nb.saga import fold_report
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.results import REFUSED_META_KEY
from aegis_nb.server.session import connect, unwrap_result
from aegis_nb.server.tool_step import ToolPairStep
from aegis_nb.testing import EventCapture
from tests.steps import ROLLED_BACK_TRAIL, Calls, Recorded

pytestmark = pytest.mark.anyio


CHARGE_UNDONE = [
    ("SagaStarted",),
    ("StepStarted", "Charge"),
    ("StepFailed", "Charge"),
    ("CompensationStarted", "Charge"),
    ("CompensationSucceeded", "Charge"),
    ("SagaCompensated",),
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
        ("SagaCompensated",),
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
