"""A call refused on arrival did nothing, and says so: bad arguments and unknown tools are marked refused.

A workflow's arguments are checked against the input schema it publishes before any step runs, so
``book_trip(card_number="42")`` books nothing (it used to book a flight and a hotel and undo them),
in words that never repeat the value. The SDK's own refusals (an unknown tool, arguments its
validation rejects) carry ``aegis-nb/refused``, so a `ToolSession` reads them as "did not act".
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolError
from aegis_nb.mock import TravelAgency
from aegis_nb.mock.travel import travel_app
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.results import REFUSED_META_KEY
from aegis_nb.server.session import connect
from aegis_nb.testing import EventCapture

pytestmark = pytest.mark.anyio


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def refused(result: CallToolResult) -> bool:
    return result.is_error and (result.meta or {}).get(REFUSED_META_KEY) is True


@pytest.mark.parametrize(
    ("card", "why"),
    [
        ("42", "card_number: must match the pattern ^[0-9]{12,19}$"),
        ("4242 4242 4242 4242", "card_number: must match the pattern ^[0-9]{12,19}$"),
        (4242424242424242, "card_number: must be of type string"),
    ],
)
async def test_a_workflow_argument_that_breaks_the_published_schema_is_refused_before_any_step(
    card: object, why: str
) -> None:
    agency = TravelAgency()
    events = EventCapture()
    app = travel_app(agency, engine=WorkflowEngine(sinks=[events]))
    async with Client(app) as client:
        result = await client.call_tool(
            "book_trip", {"destination": "Lisbon", "nights": 2, "card_number": card}
        )
    assert (refused(result), text(result)) == (True, f"book_trip: refused before anything ran: {why}")
    assert events == []
    assert agency.state().is_empty
    assert "4242" not in text(result)


async def test_arguments_pydantic_coerces_still_fit_the_schema_and_run() -> None:
    app = AegisMCP("coercing")

    @app.workflow()
    async def stay(ctx: AegisContext, nights: int) -> AegisContext:
        return ctx.with_metadata({"nights": nights})

    async with Client(app) as client:
        result = await client.call_tool("stay", {"nights": "3"})
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["metadata"] == {"nights": 3}


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("no_such_tool", {}, "Unknown tool: no_such_tool"),
        # The SDK's words, to its first lines (the rest is pydantic's, and names its version).
        ("add", {"a": "one", "b": 2}, "Error executing tool add: 1 validation error for addArguments\na"),
    ],
)
async def test_the_sdks_own_refusals_are_marked_and_a_tool_session_reads_them_as_refusals(
    tool: str, arguments: dict[str, Any], message: str
) -> None:
    app = AegisMCP("calculator")

    @app.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    async with Client(app) as client:
        result = await client.call_tool(tool, arguments)
    lines = message.count("\n") + 1
    assert (refused(result), "\n".join(text(result).splitlines()[:lines])) == (True, message)
    async with connect(app) as session:
        with pytest.raises(ToolError) as error:
            await session.call_tool(tool, arguments)
    assert (error.value.message, error.value.refused) == (text(result), True)
