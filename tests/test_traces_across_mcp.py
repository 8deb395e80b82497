"""The trace goes on across MCP: a step's span is the parent of the MCP calls it makes, and a served
workflow called over streamable HTTP is traced under its caller's span, down to the mock agency's
own server spans under each step's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from opentelemetry import trace

from aegis_nb import WorkflowEngine
from aegis_nb.server.session import connect
from aegis_nb.server.tool_step import ToolPairStep
from aegis_nb.tracing import SagaTracer
from tests.servers.launch import http_server
from tests.tracing_support import Node, Spans, filed_spans, filed_tree

pytestmark = pytest.mark.anyio


def probe() -> MCPServer[Any]:
    """A server whose tool answers with the trace and span its request is handled under."""
    server: MCPServer[Any] = MCPServer("probe")

    @server.tool()
    async def whose_child() -> dict[str, Any]:
        parent = trace.get_current_span().get_span_context()
        return {"trace": f"{parent.trace_id:032x}", "span": f"{parent.span_id:016x}"}

    @server.tool()
    async def forget(idempotency_key: str = "") -> dict[str, Any]:
        return {}

    return server


async def test_a_steps_mcp_call_is_handled_under_the_steps_span() -> None:
    # In-process the SDK hands the request to the server in the caller's own context (over a
    # transport its client sends the span as `traceparent` instead: see the test below).
    spans = Spans()
    async with connect(probe()) as session:
        step = ToolPairStep(session, "whose_child", "forget", name="Probe", result_key="probe")
        engine = WorkflowEngine(sinks=[SagaTracer(spans.provider)])
        run = await engine.run_saga([step], name="probing")
    assert run.context is not None
    (step_span,) = [span for span in spans.finished() if span.name == "execute_tool Probe"]
    assert step_span.context is not None
    trace_id, span_id = step_span.context.trace_id, step_span.context.span_id
    assert run.context.metadata["probe"] == {"trace": f"{trace_id:032x}", "span": f"{span_id:016x}"}


TRIP = {"destination": "Lisbon", "nights": 3, "card_number": "4000000000000002"}  # always declined


def agency_call(tool: str) -> Node:
    """The agency's own span for the step's call (in-process: the SDK's client opens no span of its own)."""
    return agency_call_named(f"tools/call {tool}")


def agency_call_named(method: str) -> Node:
    return {"name": method, "kind": "SERVER", "children": []}


def traced(name: str, attributes: dict[str, Any], children: list[Node]) -> Node:
    return {"name": name, "kind": "INTERNAL", "attributes": attributes, "children": children}


def forward(step: str, index: int, tool: str, outcome: str, *then: Node, **more: Any) -> Node:
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": step,
        "aegis.run.id": "RUN",
        "aegis.step.index": index,
        "aegis.saga.phase": "forward",
        "gen_ai.tool.call.id": f"RUN/{index}",
        "aegis.outcome": outcome,
        **more,
    }
    return traced(f"execute_tool {step}", attributes, [agency_call(tool), *then])


def undo(step: str, index: int, tool: str) -> Node:
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": step,
        "aegis.run.id": "RUN",
        "aegis.step.index": index,
        "aegis.saga.phase": "compensate",
        "aegis.compensation.attempt": 1,
        "aegis.outcome": "succeeded",
    }
    return traced(f"compensate {step}", attributes, [agency_call(tool)])


async def test_a_workflow_served_over_http_is_traced_under_its_caller_down_to_the_agency(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    filed = tmp_path / "spans.jsonl"
    monkeypatch.setenv("AEGIS_TRACE_FILE", str(filed))
    spans = Spans()
    async with (
        http_server("serve", "tests.servers.traced_travel:app") as server,
        Client(server.url) as client,
    ):
        # The client injects the current span's context as `traceparent` (here: the agent's).
        with spans.tracer.start_as_current_span("agent") as agent:
            result = await client.call_tool("book_trip", TRIP)
    # The server has stopped: every span it ended is in the file.
    assert result.is_error
    assert result.structured_content is not None
    run_id = result.structured_content["run_id"]
    context = agent.get_span_context()
    in_trace = [
        span
        for span in filed_spans(filed.read_text())
        if span["context"]["trace_id"] == f"0x{context.trace_id:032x}"
    ]
    declined = {"error.type": "ToolError"}
    assert filed_tree(in_trace, f"0x{context.span_id:016x}", [run_id]) == [
        {
            "name": "tools/call book_trip",
            "kind": "SERVER",
            "children": [
                traced(
                    "invoke_workflow book_trip",
                    {
                        "gen_ai.operation.name": "invoke_workflow",
                        "aegis.run.id": "RUN",
                        "gen_ai.workflow.name": "book_trip",
                        "aegis.saga.steps": ["BookFlight", "ReserveHotel", "ChargeCard"],
                        "aegis.outcome": "rolled_back",
                        "error.type": "ToolError",
                        "aegis.saga.failure_kind": "error",
                        "aegis.saga.failed_step": "ChargeCard",
                    },
                    [
                        # The session's first call fetches the tool list too, to check results by it.
                        forward("BookFlight", 0, "book_flight", "succeeded", agency_call_named("tools/list")),
                        forward("ReserveHotel", 1, "reserve_hotel", "succeeded"),
                        forward("ChargeCard", 2, "charge_card", "failed", **declined),
                        undo("ReserveHotel", 1, "cancel_hotel"),
                        undo("BookFlight", 0, "cancel_flight"),
                    ],
                )
            ],
        }
    ]
    assert json.dumps(in_trace).count("4000000000000002") == 0  # the card number is nowhere in the trace
