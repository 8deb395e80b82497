"""AegisMCP keeps each request to itself, over a real in-process `mcp.Client`.

Sagas run by a tool of another in-process server stay on that server; a workflow may take the SDK's
own `Context`; a workflow and a tool can never share a name.
"""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context
from mcp.types import RequestParamsMeta, TextContent

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent, SagaStarted
from aegis_nb.server.app import AegisMCP
from aegis_nb.server.deadline import TIMEOUT_META_KEY
from aegis_nb.server.session import ToolSession, connect

pytestmark = pytest.mark.anyio


class Mark:
    """A step that records `name` in the context's metadata and undoes nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({self.name: "ok"})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


class Pay:
    """A step that charges through a plain tool of another in-process server."""

    name = "Pay"

    def __init__(self, payments: ToolSession) -> None:
        self.payments = payments

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({"payment": await self.payments.call_tool("charge", {"amount": 100})})

    async def compensate(self, ctx: AegisContext) -> None:
        return None


def runs_started(engine: WorkflowEngine) -> list[tuple[str, str]]:
    """(saga name, run id) of every run `engine` starts, in order."""
    started: list[tuple[str, str]] = []

    def record(event: SagaEvent) -> None:
        if isinstance(event, SagaStarted):
            started.append((event.saga, event.run_id))

    engine.subscribe(record)
    return started


def without_timings(data: dict[str, Any]) -> dict[str, Any]:
    """The structured content with every measured duration checked and replaced by 0."""
    assert data["duration_ms"] >= 0
    assert all(step["duration_ms"] >= 0 for step in data["steps"])
    steps = [{**step, "duration_ms": 0} for step in data["steps"]]
    return {**data, "steps": steps, "duration_ms": 0}


@pytest.mark.parametrize("sync", [False, True], ids=["async tool", "sync tool"])
async def test_a_saga_run_by_a_tool_another_server_calls_stays_on_that_server(sync: bool) -> None:
    # The SDK runs an in-process server's handler in the caller's context (a sync tool in a worker
    # thread with a copy of it): without a clean slate per request, the payments run would be the
    # travel call's progress, run id and steps.
    payments = AegisMCP("payments")
    payment_runs = runs_started(payments.workflow_engine)
    payment_saga = [Mark("ReserveFunds"), Mark("Capture")]

    if sync:

        @payments.tool()
        def charge(amount: int) -> dict[str, Any]:
            anyio.from_thread.run(payments.workflow_engine.execute_saga, payment_saga)
            return {"charged": amount}

    else:
        # The same tool, async here and sync above: mypy wants both variants of a def to match.
        @payments.tool()
        async def charge(amount: int) -> dict[str, Any]:  # type: ignore[misc]
            await payments.workflow_engine.execute_saga(payment_saga)
            return {"charged": amount}

    app = AegisMCP("travel")
    travel_runs = runs_started(app.workflow_engine)
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    async with connect(payments) as session:

        @app.workflow()
        async def pay_trip(ctx: AegisContext) -> Any:
            return await app.workflow_engine.execute_saga([Mark("BookFlight"), Pay(session)], ctx)

        async with Client(app) as client:
            result = await client.call_tool("pay_trip", {}, progress_callback=on_progress)

    assert [name for name, _ in travel_runs] == ["pay_trip"]
    assert [name for name, _ in payment_runs] == ["charge"]
    assert result.is_error is False
    assert result.structured_content is not None
    assert without_timings(result.structured_content) == {
        "status": "committed",
        "run_id": travel_runs[0][1],
        "metadata": {"BookFlight": "ok", "payment": {"charged": 100}},
        "steps": [
            {"index": 0, "name": "BookFlight", "duration_ms": 0},
            {"index": 1, "name": "Pay", "duration_ms": 0},
        ],
        "duration_ms": 0,
    }
    assert messages == [
        "pay_trip started: BookFlight -> Pay",
        "step 1 of 2: executing BookFlight",
        "step 1 of 2: BookFlight done",
        "step 2 of 2: executing Pay",
        "step 2 of 2: Pay done",
        "pay_trip committed",
    ]


def sdk_context_server(seen: list[Context[Any, Any]]) -> AegisMCP:
    """A server whose workflow `book` also takes the SDK's `Context` (recorded in `seen`)."""
    app = AegisMCP("travel")

    @app.workflow()
    async def book(ctx: AegisContext, city: str, request: Context[Any, Any]) -> Any:
        """Book a trip in `city`."""
        seen.append(request)
        return await app.workflow_engine.execute_saga([Mark("BookFlight")], ctx.with_metadata({"city": city}))

    return app


async def test_a_workflow_may_take_the_sdk_context_and_it_is_not_an_argument() -> None:
    seen: list[Context[Any, Any]] = []
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    async with Client(sdk_context_server(seen)) as client:
        (tool,) = (await client.list_tools()).tools
        result = await client.call_tool("book", {"city": "Paris"}, progress_callback=on_progress)
    assert tool.input_schema == {
        "type": "object",
        "properties": {"city": {"title": "City", "type": "string"}},
        "required": ["city"],
        "title": "bookArguments",
    }
    (request,) = seen
    assert isinstance(request, Context)
    assert result.is_error is False
    assert result.structured_content is not None
    assert without_timings(result.structured_content) == {
        "status": "committed",
        "run_id": result.structured_content["run_id"],
        "metadata": {"city": "Paris", "BookFlight": "ok"},
        "steps": [{"index": 0, "name": "BookFlight", "duration_ms": 0}],
        "duration_ms": 0,
    }
    # The progress token reached the runner through the workflow's own Context parameter.
    assert messages == [
        "book started: BookFlight",
        "step 1 of 1: executing BookFlight",
        "step 1 of 1: BookFlight done",
        "book committed",
    ]


async def test_a_workflow_with_the_sdk_context_reads_the_client_deadline_from_it() -> None:
    seen: list[Context[Any, Any]] = []
    async with Client(sdk_context_server(seen)) as client:
        result = await client.call_tool(
            "book", {"city": "Paris"}, meta=cast(RequestParamsMeta, {TIMEOUT_META_KEY: -1})
        )
    assert result.is_error is True
    assert result.structured_content is None
    assert result.content == [
        TextContent(
            type="text",
            text="_meta['aegis-nb/timeoutMs'] must be a positive number of milliseconds, got -1",
        )
    ]
    assert seen == []


def test_the_first_parameter_of_a_workflow_cannot_be_the_sdk_context() -> None:
    app = AegisMCP("travel")

    async def book(request: Context[Any, Any], city: str) -> Any:
        return None

    with pytest.raises(SagaDefinitionError) as raised:
        app.workflow()(book)
    assert str(raised.value) == (
        "workflow 'book': the first parameter receives the AegisContext, not the SDK's Context"
    )
    assert dict(app.workflows) == {}


def plain_book_server(ran: list[str]) -> AegisMCP:
    """A server with the plain tool `book`."""
    app = AegisMCP("travel")

    @app.tool("book")
    async def book_tool(city: str) -> dict[str, str]:
        ran.append("plain tool")
        return {"city": city}

    return app


async def test_a_workflow_cannot_take_the_name_of_a_tool() -> None:
    ran: list[str] = []
    app = plain_book_server(ran)
    async with Client(app) as client:
        (before,) = (await client.list_tools()).tools

    async def book(ctx: AegisContext, city: str) -> Any:
        ran.append("workflow")
        return ctx

    with pytest.raises(SagaDefinitionError) as raised:
        app.workflow("book")(book)
    assert str(raised.value) == "workflow 'book': a tool named 'book' is already registered"
    assert dict(app.workflows) == {}

    # The tool is left as it was: same listing (its own output schema), and it still runs.
    async with Client(app) as client:
        (after,) = (await client.list_tools()).tools
        result = await client.call_tool("book", {"city": "Paris"})
    assert after == before
    assert result.is_error is False
    assert result.structured_content == {"city": "Paris"}
    assert ran == ["plain tool"]


async def test_a_tool_cannot_take_the_name_of_a_workflow() -> None:
    app = AegisMCP("travel")

    @app.workflow()
    async def book(ctx: AegisContext) -> Any:
        return await app.workflow_engine.execute_saga([Mark("BookFlight")], ctx)

    async def async_book() -> dict[str, str]:
        return {}

    def sync_book() -> dict[str, str]:
        return {}

    for fn in (async_book, sync_book):
        with pytest.raises(SagaDefinitionError) as raised:
            app.tool("book")(fn)
        assert str(raised.value) == "tool 'book': a workflow named 'book' is already registered"
    async_book.__name__ = "book"  # named by the function itself, not by the decorator
    with pytest.raises(SagaDefinitionError) as raised:
        app.tool()(async_book)
    assert str(raised.value) == "tool 'book': a workflow named 'book' is already registered"

    async with Client(app) as client:
        result = await client.call_tool("book", {})
    assert result.is_error is False
    assert result.structured_content is not None
    assert without_timings(result.structured_content) == {
        "status": "committed",
        "run_id": result.structured_content["run_id"],
        "metadata": {"BookFlight": "ok"},
        "steps": [{"index": 0, "name": "BookFlight", "duration_ms": 0}],
        "duration_ms": 0,
    }


async def test_removing_a_workflow_frees_its_name() -> None:
    app = AegisMCP("travel")

    @app.workflow()
    async def book(ctx: AegisContext) -> Any:
        return ctx

    app.remove_tool("book")
    assert dict(app.workflows) == {}

    @app.tool("book")
    async def book_tool(city: str) -> dict[str, str]:
        return {"city": city}

    async with Client(app) as client:
        result = await client.call_tool("book", {"city": "Oslo"})
    assert result.is_error is False
    assert result.structured_content == {"city": "Oslo"}
