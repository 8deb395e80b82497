"""An `AegisMCP` traces its workflows with the tracer it is given (`tracing=`), or with one of its own
when the process configured a tracer provider before building it."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from mcp import Client

from aegis_nb import AegisContext, AegisMCP
from aegis_nb.tracing import SagaTracer
from tests.servers.launch import python_child
from tests.tracing_support import Spans

pytestmark = pytest.mark.anyio


class Noting:
    async def execute(self, ctx: AegisContext) -> None: ...

    async def compensate(self, ctx: AegisContext) -> None: ...


def traced_app(**options: Any) -> AegisMCP:
    app = AegisMCP("traced", **options)

    @app.workflow("trip")
    async def trip(ctx: AegisContext) -> AegisContext:
        return await app.workflow_engine.execute_saga([Noting()], ctx)

    return app


async def test_an_app_given_a_tracer_traces_its_workflows_under_the_callers_span() -> None:
    spans = Spans()
    async with Client(traced_app(tracing=SagaTracer(spans.provider))) as client:
        with spans.tracer.start_as_current_span("agent"):
            result = await client.call_tool("trip", {})
    assert not result.is_error
    # In-process the SDK handles the request in the caller's context: the agent's span is the parent.
    names = [(node["name"], [child["name"] for child in node["children"]]) for node in spans.tree()]
    assert names == [("agent", ["invoke_workflow trip"])]
    (agent,) = spans.tree()
    (workflow,) = agent["children"]
    assert [child["name"] for child in workflow["children"]] == ["execute_tool Noting"]


AUTOMATIC = textwrap.dedent(
    """
    import anyio
    from mcp import Client
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.test_traces_served_by_aegismcp import traced_app

    finished = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(finished))
    trace.set_tracer_provider(provider)


    async def main() -> None:
        async with Client(traced_app()) as client:
            await client.call_tool("trip", {})
        print(sorted(span.name for span in finished.get_finished_spans()))


    anyio.run(main)
    """
)


def test_an_app_built_once_a_provider_is_configured_traces_its_workflows_by_itself() -> None:
    Spans()  # the SDK is needed (skip or fail as the other trace tests do)
    # In a process of its own: a global provider, once set, stays set for the whole process.
    done = python_child("-c", AUTOMATIC)
    # One workflow span, so one tracer: the app's own, beside the SDK's spans of the requests.
    assert done.stdout.splitlines() == [
        "['execute_tool Noting', 'invoke_workflow trip', 'server/discover', 'tools/call trip', 'tools/list']"
    ]
