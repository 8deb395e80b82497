"""AegisMCP over a real in-process `mcp.Client`: workflows as tools, deadlines, progress, reports, tools."""

from __future__ import annotations

import re
from typing import Any, cast

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, RequestParamsMeta, TextContent, ToolAnnotations

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError, ToolError
from aegis_nb.kernel.values import Secret
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.app import AegisMCP, Transport
from aegis_nb.server.deadline import TIMEOUT_META_KEY
from aegis_nb.server.routing import Observing
from aegis_nb.server.signature import request_context

pytestmark = pytest.mark.anyio


class Book:
    """Records its calls; `name` is the step's display name."""

    def __init__(self, name: str, log: list[str], *, hang: bool = False, undo_failures: int = 0) -> None:
        self.name, self.log, self.hang, self.undo_failures = name, log, hang, undo_failures

    async def execute(self, ctx: AegisContext, **kwargs: Any) -> AegisContext:
        self.log.append(f"execute {self.name}")
        if self.hang:
            await anyio.sleep_forever()
        return ctx.with_metadata({f"{self.name}_id": f"{self.name}-1", **kwargs})

    async def compensate(self, ctx: AegisContext, **kwargs: Any) -> None:
        self.log.append(f"compensate {self.name}")
        if self.undo_failures:
            self.undo_failures -= 1
            raise RuntimeError(f"{self.name} cannot be undone")


class Decline:
    name = "ChargeCard"

    async def execute(self, ctx: AegisContext) -> None:
        raise ValueError("Card Declined!")

    async def compensate(self, ctx: AegisContext) -> None:
        return None


def travel_server(log: list[str], **options: Any) -> AegisMCP:
    app = AegisMCP("travel", engine=WorkflowEngine(compensation_retry=RetryPolicy.never()), **options)

    @app.workflow("book_vacation")
    async def book_vacation(ctx: AegisContext, destination: str, nights: int, declined: bool = False) -> Any:
        """Book a flight and a hotel, then pay."""
        steps: list[Any] = [
            (Book("BookFlight", log), (), {"destination": destination}),
            (Book("ReserveHotel", log), (), {"nights": nights}),
        ]
        if declined:
            steps.append(Decline())
        return await app.workflow_engine.execute_saga(steps, ctx.with_metadata({"card": Secret("4242-4242")}))

    return app


def without_timings(data: dict[str, Any]) -> dict[str, Any]:
    """The structured content with every measured duration checked and replaced by 0."""
    assert data["duration_ms"] >= 0
    steps = data.get("steps")
    if isinstance(steps, list) and steps and isinstance(steps[0], dict):
        assert all(step["duration_ms"] >= 0 for step in steps)
        steps = [{**step, "duration_ms": 0} for step in steps]
        data = {**data, "steps": steps}
    return {**data, "duration_ms": 0}


async def test_a_workflow_is_a_tool_with_an_input_and_output_schema() -> None:
    async with Client(travel_server([])) as client:
        (tool,) = (await client.list_tools()).tools
    assert tool.name == "book_vacation"
    assert tool.description == "Book a flight and a hotel, then pay."
    assert tool.input_schema == {
        "type": "object",
        "properties": {
            "destination": {"title": "Destination", "type": "string"},
            "nights": {"title": "Nights", "type": "integer"},
            "declined": {"default": False, "title": "Declined", "type": "boolean"},
        },
        "required": ["destination", "nights"],
        "title": "book_vacationArguments",
    }
    # Lean on purpose (see workflow_output_schema): clients check every result against it.
    assert tool.output_schema == {
        "type": "object",
        "description": "Structured content of a workflow call (the tool's output schema), committed or not.",
        "properties": {
            "status": {"enum": ["committed", "rolled_back", "stuck"]},
            "run_id": {"type": ["string", "null"]},
            "metadata": {"type": "object"},
            "steps": {
                "type": "array",
                "description": (
                    "The steps that ran to completion, in order, with how long each execute took: "
                    "one object each, with index (integer), name (string), duration_ms (number)."
                ),
            },
            "duration_ms": {"type": "number"},
            "summary": {
                "type": "string",
                "description": "Failures only: one line a person can act on (also the text).",
            },
            "report": {
                "type": "object",
                "description": "Failures only: the whole saga report, with left_standing.",
            },
        },
        "required": ["status", "run_id", "metadata", "steps", "duration_ms"],
    }


async def test_a_workflow_publishes_its_title_and_annotations_as_a_tool_does() -> None:
    app = AegisMCP("travel")
    hints = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)

    @app.workflow("book", title="Book a trip", description="Fly, stay, pay.", annotations=hints)
    async def book(ctx: AegisContext) -> AegisContext:
        return ctx

    async with Client(app) as client:
        (tool,) = (await client.list_tools()).tools
    assert (tool.name, tool.title, tool.description, tool.annotations) == (
        "book",
        "Book a trip",
        "Fly, stay, pay.",
        hints,
    )


async def test_a_committed_workflow_returns_structured_content_without_secrets() -> None:
    async with Client(travel_server([])) as client:
        result = await client.call_tool("book_vacation", {"destination": "Lisbon", "nights": 3})
    assert result.is_error is False
    content = result.structured_content
    assert content is not None
    assert without_timings(content) == {
        "status": "committed",
        "run_id": content["run_id"],
        "metadata": {
            "card": "***",
            "BookFlight_id": "BookFlight-1",
            "destination": "Lisbon",
            "ReserveHotel_id": "ReserveHotel-1",
            "nights": 3,
        },
        "steps": [
            {"index": 0, "name": "BookFlight", "duration_ms": 0},
            {"index": 1, "name": "ReserveHotel", "duration_ms": 0},
        ],
        "duration_ms": 0,
    }
    # With its dash: four digits alone can turn up by chance in the hex run id, and no id has a dash.
    assert "4242-" not in str(result)


async def test_a_rolled_back_workflow_is_an_error_with_the_report() -> None:
    log: list[str] = []
    async with Client(travel_server(log)) as client:
        result = await client.call_tool(
            "book_vacation", {"destination": "Lisbon", "nights": 3, "declined": True}
        )
    assert result.is_error is True
    assert result.content == [
        TextContent(type="text", text="Card Declined! — rolled back: ReserveHotel, BookFlight")
    ]
    content = result.structured_content
    assert content is not None
    summary = "Card Declined! — rolled back: ReserveHotel, BookFlight"
    assert without_timings(content) == {
        "status": "rolled_back",
        "run_id": content["run_id"],
        "summary": summary,
        "metadata": {},
        "steps": [
            {"index": 0, "name": "BookFlight", "duration_ms": 0},
            {"index": 1, "name": "ReserveHotel", "duration_ms": 0},
        ],
        "duration_ms": 0,
        "report": {
            "run_id": content["run_id"],
            "saga": "book_vacation",
            "status": "rolled_back",
            "steps": ["BookFlight", "ReserveHotel", "ChargeCard"],
            "succeeded": [{"index": 0, "name": "BookFlight"}, {"index": 1, "name": "ReserveHotel"}],
            "failed_step": {"index": 2, "name": "ChargeCard"},
            "failure_kind": "error",
            "cause": {"type": "ValueError", "message": "Card Declined!"},
            "compensated": [{"index": 1, "name": "ReserveHotel"}, {"index": 0, "name": "BookFlight"}],
            "compensation_failures": [],
            "left_standing": [],
        },
    }
    assert log == [
        "execute BookFlight",
        "execute ReserveHotel",
        "compensate ReserveHotel",
        "compensate BookFlight",
    ]


async def test_a_workflow_that_cannot_be_fully_undone_names_what_was_left_standing() -> None:
    app = AegisMCP(
        "stuck", engine=WorkflowEngine(compensation_retry=RetryPolicy(attempts=2, initial_delay=0))
    )

    @app.workflow()
    async def book(ctx: AegisContext) -> AegisContext:
        steps = [Book("BookFlight", []), Book("ReserveHotel", [], undo_failures=5), Decline()]
        return await app.workflow_engine.execute_saga(steps, ctx)

    async with Client(app) as client:
        result = await client.call_tool("book", {})
    text = (
        "Card Declined! — could not undo: ReserveHotel (ReserveHotel cannot be undone, after 2 attempts)"
        " — rolled back: BookFlight"
    )
    assert result.is_error is True
    assert result.content == [TextContent(type="text", text=text)]
    content = result.structured_content
    assert content is not None
    report = content["report"]
    assert (content["status"], content["summary"], report["status"], report["left_standing"]) == (
        "stuck",
        text,
        "stuck",
        [{"index": 1, "name": "ReserveHotel"}],
    )
    assert report["compensation_failures"] == [
        {
            "step": {"index": 1, "name": "ReserveHotel"},
            "attempts": 2,
            "error": {"type": "RuntimeError", "message": "ReserveHotel cannot be undone"},
        }
    ]


async def test_invalid_arguments_are_rejected_before_any_step_runs() -> None:
    log: list[str] = []
    async with Client(travel_server(log)) as client:
        result = await client.call_tool("book_vacation", {"destination": "Lisbon", "nights": "three"})
    assert result.is_error is True
    assert isinstance(result.content[0], TextContent)
    assert result.content[0].text.startswith(
        "Error executing tool book_vacation: 1 validation error for book_vacationArguments\nnights\n"
        "  Input should be a valid integer, unable to parse string as an integer"
    )
    assert log == []


async def test_an_unknown_tool_is_an_error() -> None:
    async with Client(travel_server([])) as client:
        result = await client.call_tool("book_cruise", {})
    assert (result.is_error, result.content) == (
        True,
        [TextContent(type="text", text="Unknown tool: book_cruise")],
    )


async def test_every_saga_event_becomes_a_progress_notification() -> None:
    notifications: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notifications.append((progress, total, message))

    async with Client(travel_server([])) as client:
        await client.call_tool(
            "book_vacation",
            {"destination": "Lisbon", "nights": 3, "declined": True},
            progress_callback=on_progress,
        )
    assert notifications == [
        (1.0, None, "book_vacation started: BookFlight -> ReserveHotel -> ChargeCard"),
        (2.0, None, "step 1 of 3: executing BookFlight"),
        (3.0, None, "step 1 of 3: BookFlight done"),
        (4.0, None, "step 2 of 3: executing ReserveHotel"),
        (5.0, None, "step 2 of 3: ReserveHotel done"),
        (6.0, None, "step 3 of 3: executing ChargeCard"),
        (7.0, None, "step 3 of 3: ChargeCard failed: Card Declined!"),
        (8.0, None, "compensating ReserveHotel"),
        (9.0, None, "ReserveHotel undone"),
        (10.0, None, "compensating BookFlight"),
        (11.0, None, "BookFlight undone"),
        (12.0, None, "book_vacation rolled back: Card Declined! — rolled back: ReserveHotel, BookFlight"),
    ]


def deadline_server() -> tuple[AegisMCP, list[float]]:
    """A server whose workflow records the time its context had left, then hangs in its second step."""
    seen: list[float] = []
    app = AegisMCP("deadlines")

    class Measure:
        async def execute(self, ctx: AegisContext) -> None:
            seen.append(ctx.remaining())

        async def compensate(self, ctx: AegisContext) -> None:
            return None

    @app.workflow("slow")
    async def slow(ctx: AegisContext) -> AegisContext:
        return await app.workflow_engine.execute_saga([Measure(), Book("Hang", [], hang=True)], ctx)

    return app, seen


async def test_the_client_deadline_in_meta_shortens_the_workflow_timeout() -> None:
    app, seen = deadline_server()
    async with Client(app) as client:
        result = await client.call_tool("slow", {}, meta=cast(RequestParamsMeta, {TIMEOUT_META_KEY: 200}))
    assert result.is_error is True
    assert result.structured_content is not None
    assert result.structured_content["report"]["failure_kind"] == "timeout"
    assert result.structured_content["report"]["failed_step"] == {"index": 1, "name": "Hang"}
    assert 0 < seen[0] <= 0.2


async def test_the_workflow_timeout_applies_without_a_client_deadline() -> None:
    app = AegisMCP("timeouts", workflow_timeout=100.0)
    seen: list[float] = []

    class Measure:
        async def execute(self, ctx: AegisContext) -> None:
            seen.append(ctx.remaining())

        async def compensate(self, ctx: AegisContext) -> None:
            return None

    @app.workflow("server_default")
    async def server_default(ctx: AegisContext) -> AegisContext:
        return await app.workflow_engine.execute_saga([Measure()], ctx)

    @app.workflow("own_timeout", timeout=0.2)
    async def own_timeout(ctx: AegisContext) -> AegisContext:
        return await app.workflow_engine.execute_saga([Measure(), Book("Hang", [], hang=True)], ctx)

    @app.workflow("no_timeout", timeout=None)
    async def no_timeout(ctx: AegisContext) -> AegisContext:
        return await app.workflow_engine.execute_saga([Measure()], ctx)

    async with Client(app) as client:
        assert (await client.call_tool("server_default", {})).is_error is False
        timed_out = await client.call_tool(
            "own_timeout", {}, meta=cast(RequestParamsMeta, {TIMEOUT_META_KEY: 60_000})
        )
        assert (await client.call_tool("no_timeout", {})).is_error is False
    assert timed_out.structured_content is not None
    assert timed_out.structured_content["report"]["failure_kind"] == "timeout"
    assert 99 < seen[0] <= 100
    assert 0 < seen[1] <= 0.2
    assert seen[2] == float("inf")


@pytest.mark.parametrize("bad", [-5, 0, "soon", True])
async def test_a_bad_client_deadline_is_refused_before_any_step_runs(bad: object) -> None:
    log: list[str] = []
    async with Client(travel_server(log)) as client:
        result = await client.call_tool(
            "book_vacation",
            {"destination": "Lisbon", "nights": 3},
            meta=cast(RequestParamsMeta, {TIMEOUT_META_KEY: bad}),
        )
    assert result == CallToolResult(
        _meta=result.meta,
        content=[
            TextContent(
                type="text",
                text=f"_meta['aegis-nb/timeoutMs'] must be a positive number of milliseconds, got {bad!r}",
            )
        ],
        is_error=True,
    )
    assert log == []


async def test_a_cancelled_call_still_rolls_back_on_the_server() -> None:
    log: list[str] = []
    hotel_started = anyio.Event()
    rolled_back = anyio.Event()
    app = AegisMCP("cancel")

    class Signal(Book):
        async def execute(self, ctx: AegisContext, **kwargs: Any) -> AegisContext:
            hotel_started.set()
            return await super().execute(ctx, **kwargs)

    def watch(event: Any) -> None:
        if type(event).__name__ == "SagaRolledBackEvent":
            rolled_back.set()

    app.workflow_engine.subscribe(watch)

    @app.workflow()
    async def book(ctx: AegisContext) -> AegisContext:
        steps = [Book("BookFlight", log), Signal("ReserveHotel", log, hang=True)]
        return await app.workflow_engine.execute_saga(steps, ctx)

    async with Client(app) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(client.call_tool, "book", {})
        await hotel_started.wait()
        tasks.cancel_scope.cancel()
    await rolled_back.wait()
    assert log == ["execute BookFlight", "execute ReserveHotel", "compensate BookFlight"]


async def test_plain_tools_run_under_the_tool_deadline_and_refuse_in_their_own_words() -> None:
    app = AegisMCP("tools", tool_timeout=0.2)

    @app.tool()
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @app.tool()
    async def stall() -> str:
        await anyio.sleep_forever()
        return "never"

    @app.tool()
    async def refuse(reason: str) -> str:
        raise ToolError("refuse", reason, {"reason": reason})

    @app.resource("travel://rules")
    def rules() -> str:
        return "no refunds after departure"

    @app.prompt()
    def plan(city: str) -> str:
        return f"Plan a trip to {city}"

    async with Client(app) as client:
        added = await client.call_tool("add", {"a": 2, "b": 3})
        stalled = await client.call_tool("stall", {}, meta=cast(RequestParamsMeta, {TIMEOUT_META_KEY: 50}))
        refused = await client.call_tool("refuse", {"reason": "sold out"})
        resource = await client.read_resource("travel://rules")
        prompt = await client.get_prompt("plan", {"city": "Rome"})
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert (added.is_error, added.structured_content) == (False, {"result": 5})
    assert tools["add"].description == "Add two numbers."
    assert tools["add"].input_schema["required"] == ["a", "b"]
    assert stalled.is_error is True
    assert isinstance(stalled.content[0], TextContent)
    assert stalled.content[0].text.startswith("step 'stall' exceeded its deadline (budget ")
    assert (refused.is_error, refused.content, refused.structured_content) == (
        True,
        [TextContent(type="text", text="sold out")],
        {"reason": "sold out"},
    )
    assert [c.text for c in resource.contents] == ["no refunds after departure"]  # type: ignore[union-attr]
    assert prompt.messages[0].content == TextContent(type="text", text="Plan a trip to Rome")


def test_bad_workflow_definitions_fail_at_registration() -> None:
    app = AegisMCP("bad")

    def sync_workflow(ctx: AegisContext) -> None:
        return None

    async def no_context() -> None:
        return None

    async def ok(ctx: AegisContext) -> None:
        return None

    with pytest.raises(SagaDefinitionError, match="workflow 'sync_workflow' must be an `async def` function"):
        app.workflow()(sync_workflow)
    with pytest.raises(SagaDefinitionError, match="must take the AegisContext as its first parameter"):
        app.workflow()(no_context)
    app.workflow("ok")(ok)
    with pytest.raises(SagaDefinitionError, match="workflow 'ok' is already registered"):
        app.workflow("ok")(ok)
    with pytest.raises(TypeError, match=r"use @app.workflow\(\)"):
        app.workflow(ok)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be positive seconds or None, got -1"):
        app.workflow("neg", timeout=-1)(ok)
    with pytest.raises(ValueError, match="workflow_timeout must be positive seconds or None, got 0"):
        AegisMCP("bad", workflow_timeout=0)
    with pytest.raises(ValueError, match="tool_timeout must be positive seconds or None, got 1000"):
        AegisMCP("bad", tool_timeout=10**400)  # past float range: refused, not an OverflowError
    assert list(app.workflows) == ["ok"]


def test_run_refuses_an_unknown_transport() -> None:
    with pytest.raises(ValueError, match="unknown transport 'carrier-pigeon': use 'stdio' or 'http'"):
        AegisMCP("x").run("carrier-pigeon")
    assert [t.value for t in Transport] == ["stdio", "http"]


async def test_a_client_that_times_out_still_gets_the_world_rolled_back() -> None:
    log: list[str] = []
    rolled_back = anyio.Event()
    app = AegisMCP("timeout")
    app.workflow_engine.subscribe(
        lambda event: rolled_back.set() if type(event).__name__ == "SagaRolledBackEvent" else None
    )

    @app.workflow()
    async def book(ctx: AegisContext) -> AegisContext:
        steps = [Book("BookFlight", log), Book("ReserveHotel", log, hang=True)]
        return await app.workflow_engine.execute_saga(steps, ctx)

    async with Client(app) as client:
        with pytest.raises(MCPError, match=re.escape("Timed out after 0.2s waiting for 'tools/call'")):
            await client.call_tool("book", {}, read_timeout_seconds=0.2)
        await rolled_back.wait()
    assert log == ["execute BookFlight", "execute ReserveHotel", "compensate BookFlight"]


async def test_a_workflow_can_be_called_without_a_client() -> None:
    result = await travel_server([]).call_tool("book_vacation", {"destination": "Oslo", "nights": 1})
    assert isinstance(result, CallToolResult)
    assert result.is_error is False
    assert result.structured_content is not None
    assert [step["name"] for step in result.structured_content["steps"]] == ["BookFlight", "ReserveHotel"]


def test_the_request_context_is_read_where_the_sdk_context_keeps_it() -> None:
    request: Any = object()  # stands in for the SDK's ServerRequestContext
    served: Context[Any, Any] = Context(request_context=request)
    assert request_context(served) is served.request_context is request
    assert request_context(Context()) is None
    assert request_context(None) is None


async def test_servers_sharing_an_engine_report_each_step_once() -> None:
    engine = WorkflowEngine(compensation_retry=RetryPolicy.never())
    AegisMCP("another server on the same engine", engine=engine)
    app = AegisMCP("travel", engine=engine)

    @app.workflow()
    async def trip(ctx: AegisContext) -> AegisContext:
        return await engine.execute_saga([Book("BookFlight", [])], ctx)

    async with Client(app) as client:
        result = await client.call_tool("trip", {})
    assert result.structured_content is not None
    assert without_timings(result.structured_content)["steps"] == [
        {"index": 0, "name": "BookFlight", "duration_ms": 0}
    ]


async def test_an_observer_that_raises_loses_its_own_run_and_no_other_requests_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = travel_server([])

    def broken(event: SagaEvent) -> None:
        raise RuntimeError("observer bug")

    with Observing(broken, "book_vacation"):
        await app.workflow_engine.execute_saga([Book("BookFlight", [])])
    assert [record.getMessage() for record in caplog.records] == [
        f"event sink {broken!r} raised on SagaStarted and was detached; the saga goes on"
    ]

    async with Client(app) as client:
        result = await client.call_tool("book_vacation", {"destination": "Oslo", "nights": 1})
    assert result.structured_content is not None
    assert [step["name"] for step in result.structured_content["steps"]] == ["BookFlight", "ReserveHotel"]


async def test_a_workflow_error_whose_str_raises_is_still_a_one_line_result() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no words")

    app = AegisMCP("agent")

    @app.workflow("broken")
    async def broken(ctx: AegisContext) -> None:
        raise Unprintable

    async with Client(app) as client:
        result = await client.call_tool("broken", {})
    assert result == CallToolResult(
        content=[
            TextContent(
                type="text", text="workflow 'broken' failed: Unprintable: <Unprintable: str() failed>"
            )
        ],
        is_error=True,
        _meta=result.meta,  # the SDK's server info; no refusal mark: the workflow may have acted
    )
    assert result.meta is not None
    assert "aegis-nb/refused" not in result.meta
