"""A request's deadline on the server: a tool stopped at it after acting is in doubt, across MCP.

The server's tool deadline stops a tool that took effect and never answered: its result is marked
in doubt (with the budget it had), so an in-doubt step calling it is compensated; a tool whose deadline
had passed before it started is a plain refusal. A client's deadline of any size is read safely: past
float range it leaves the server's own deadline, negative or nan it is refused.
"""

from __future__ import annotations

import math
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, RequestParamsMeta, TextContent

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaRolledBack, ToolError, ToolTimeoutError
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.deadline import TIMEOUT_META_KEY, request_deadline
from aegis_nb.server.results import TIMED_OUT_META_KEY
from aegis_nb.server.session import connect, unwrap_result
from aegis_nb.server.tool_step import ToolPairStep

pytestmark = pytest.mark.anyio


ROOT = str(Path(__file__).resolve().parent.parent)


def measured(text: str) -> str:
    """`text` with the measured budget of a timeout replaced by N."""
    return re.sub(r"budget \d+\.\d ms", "budget N ms", text)


def bank(ledger: dict[str, str], *, tool_timeout: float, starts: list[float] | None = None) -> AegisMCP:
    """A charge that takes effect and then never answers, under the server's own tool deadline.

    Each charge appends the loop clock's reading as it starts to `starts`, if given.
    """
    app = AegisMCP("bank", tool_timeout=tool_timeout)

    @app.tool()
    async def charge(idempotency_key: str = "") -> dict[str, Any]:
        if starts is not None:
            starts.append(anyio.current_time())
        ledger[idempotency_key] = "charged"
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    @app.tool()
    async def refund(idempotency_key: str = "") -> dict[str, Any]:
        ledger.pop(idempotency_key, None)
        return {}

    return app


# Regression guard: a tool the server stopped at its deadline after acting is in doubt, and undone.
async def test_a_tool_the_server_stops_at_its_deadline_after_acting_is_compensated_in_doubt() -> None:
    # The server's tool deadline (0.1 s) comes long before the saga's (60 s). The charge took
    # effect, so its in-doubt step must be refunded; it used to arrive as a ToolError (the tool's
    # answer that it did not act) and the charge was left standing under a "rolled back" report.
    ledger: dict[str, str] = {}
    async with connect(bank(ledger, tool_timeout=0.1)) as session:
        step = ToolPairStep(session, "charge", "refund", name="Charge", in_doubt=True)
        with pytest.raises(SagaRolledBack) as failure:
            await WorkflowEngine().execute_saga([step], AegisContext(deadline=anyio.current_time() + 60))
    assert measured(failure.value.report.summary()) == (
        "step 'charge' exceeded its deadline (budget N ms) — rolled back: Charge"
    )
    assert type(failure.value.__cause__) is ToolTimeoutError
    assert ledger == {}


# Regression guard: a timed-out result carries the in-doubt mark and its budget; a refused one does not.
async def test_a_timed_out_tool_result_is_marked_in_doubt_and_a_refused_one_is_not() -> None:
    ledger: dict[str, str] = {}
    starts: list[float] = []
    app = bank(ledger, tool_timeout=0.1, starts=starts)
    async with Client(app) as client:
        sent = anyio.current_time()
        timed_out = await client.call_tool("charge", {"idempotency_key": "k"})
        never_started = await client.call_tool(
            "charge", {"idempotency_key": "late"}, meta=cast(RequestParamsMeta, {TIMEOUT_META_KEY: 1e-300})
        )
    assert timed_out.meta is not None
    assert never_started.meta is not None
    # The budget runs from the request's arrival (after `sent`) to the tool's start (before it read
    # the clock): the tool timeout less the time in between, which a loaded machine can stretch.
    budget = timed_out.meta[TIMED_OUT_META_KEY]
    assert round((0.1 - (starts[0] - sent)) * 1000, 3) <= budget <= 100
    assert timed_out == CallToolResult(content=timed_out.content, is_error=True, _meta=timed_out.meta)
    assert [measured(block.text) for block in timed_out.content if isinstance(block, TextContent)] == [
        "step 'charge' exceeded its deadline (budget N ms)"
    ]
    # Its deadline had passed before it started: nothing happened, so it is a plain refusal.
    assert TIMED_OUT_META_KEY not in never_started.meta
    assert never_started.is_error is True
    assert ledger == {"k": "charged"}
    with pytest.raises(ToolTimeoutError) as in_doubt:
        unwrap_result("charge", timed_out)
    assert (measured(str(in_doubt.value)), in_doubt.value.step, in_doubt.value.budget) == (
        "step 'charge' exceeded its deadline (budget N ms)",
        "charge",
        budget / 1000,
    )
    with pytest.raises(ToolError):
        unwrap_result("charge", never_started)


# Regression guard: a workflow stopped at a deadline outside its sagas is marked in doubt too.
async def test_a_workflow_stopped_at_a_deadline_outside_its_sagas_is_marked_in_doubt() -> None:
    app = AegisMCP("agent")

    @app.workflow("lookup")
    async def lookup(ctx: AegisContext) -> None:
        raise ToolTimeoutError("fetch_quote", 0.25)

    async with Client(app) as client:
        result = await client.call_tool("lookup", {})
    assert result == CallToolResult(
        content=[
            TextContent(
                type="text",
                text="workflow 'lookup': step 'fetch_quote' exceeded its deadline (budget 250.0 ms)",
            )
        ],
        is_error=True,
        _meta={**(result.meta or {}), TIMED_OUT_META_KEY: 250.0},
    )


# Regression guard: the in-doubt mark crosses a real (stdio) transport.
async def test_the_in_doubt_mark_crosses_a_real_transport() -> None:
    server = textwrap.dedent(
        """
        import anyio
        from aegis_nb.server.app import AegisMCP

        app = AegisMCP("bank", tool_timeout=0.1)

        @app.tool()
        async def charge() -> dict:
            await anyio.sleep_forever()

        app.run()
        """
    )
    async with connect(
        StdioServerParameters(command=sys.executable, args=["-c", server], cwd=ROOT)
    ) as session:
        with pytest.raises(
            ToolTimeoutError, match=r"^step 'charge' exceeded its deadline \(budget \d+\.\d ms\)$"
        ):
            await session.call_tool("charge")


# Regression guard: a client deadline past float range leaves the server's own deadline in force.
@pytest.mark.parametrize("budget", [10**400, 2**1100], ids=["10**400", "2**1100"])
async def test_a_client_deadline_past_float_range_leaves_the_server_deadline(budget: int) -> None:
    # JSON integers have no bound; converting one to a float overflowed and failed the call with
    # the SDK's bare "Error executing tool".
    app = AegisMCP("agent", workflow_timeout=30.0, tool_timeout=None)
    seen: list[float] = []

    @app.workflow("wf")
    async def wf(ctx: AegisContext) -> None:
        seen.append(ctx.remaining())

    @app.tool()
    async def tool() -> str:
        return "ok"

    async with Client(app) as client:
        workflow = await client.call_tool("wf", {}, meta=cast(RequestParamsMeta, {TIMEOUT_META_KEY: budget}))
        plain = await client.call_tool("tool", {}, meta=cast(RequestParamsMeta, {TIMEOUT_META_KEY: budget}))
    assert (workflow.is_error, plain.is_error, plain.structured_content) == (False, False, {"result": "ok"})
    assert 29 < seen[0] <= 30
    assert request_deadline({TIMEOUT_META_KEY: budget}, None, 5.0) == math.inf


# Regression guard: a negative or nan client deadline is refused.
async def test_a_negative_client_deadline_past_float_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"must be a positive number of milliseconds"):
        request_deadline({TIMEOUT_META_KEY: -(10**400)}, 30.0, 5.0)
    with pytest.raises(ValueError, match=r"must be a positive number of milliseconds, got nan"):
        request_deadline({TIMEOUT_META_KEY: math.nan}, 30.0, 5.0)
