"""The travel agent tracing into a file, for `tests/test_traces_across_mcp.py`.

``aegis-nb serve tests.servers.traced_travel:app`` with ``AEGIS_TRACE_FILE`` set: the process's
global tracer provider (the one the MCP SDK's own spans use) writes every span as it ends, as one
line of JSON, to that file; the app's engine has a `SagaTracer` on that provider, added by hand (the
provider is set once the app is built, so `AegisMCP` does not add one of its own as well).
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from aegis_nb.mock import TravelAgency, travel_app
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.server.app import AegisMCP
from aegis_nb.tracing import SagaTracer


def one_line(span: ReadableSpan) -> str:
    text: str = span.to_json(indent=None)
    return text + "\n"


def app() -> AegisMCP:
    """The travel agent over an in-memory agency it calls through the SDK's client, every span filed."""
    served = travel_app(TravelAgency(), engine=WorkflowEngine(sinks=[SagaTracer()]))
    provider = TracerProvider()
    # Written as each span ends (SimpleSpanProcessor), so the file is whole once the server stops.
    out = open(os.environ["AEGIS_TRACE_FILE"], "a", encoding="utf-8")  # noqa: SIM115 (open while serving)
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=one_line)))
    trace.set_tracer_provider(provider)  # what the SDK's tracer and the SagaTracer's both defer to
    return served
