"""Sagas on Temporal in OpenTelemetry traces, when asked for: `aegis_nb.temporal.connect(tracing=True)`
puts temporalio's `TracingInterceptor` on the client and so on its workers, and a saga's workflow
and step activities become spans of one trace under the caller's span. Off by default: a plain
client records none. Asyncio only (temporalio runs on asyncio alone).
"""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import STRICT

if not STRICT:  # on a developer machine without the `temporal` extra, skip; under CI, fail
    pytest.importorskip("temporalio")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aegis_nb import AegisContext
from aegis_nb.temporal import TemporalSagaRunner, connect, saga_worker, tracing_interceptors
from tests.steps import Calls, Recorded
from tests.temporal_support import anyio_backend, temporal_address

__all__ = ["anyio_backend", "temporal_address"]  # fixtures, imported so pytest finds them here

pytestmark = pytest.mark.anyio


async def test_a_traced_client_and_its_worker_put_the_saga_in_one_trace(temporal_address: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    client = await connect(temporal_address, tracing=True, tracer=tracer)
    queue = f"traced-{uuid.uuid4().hex}"
    calls = Calls()
    steps = [Recorded("flight", calls), Recorded("hotel", calls)]
    with tracer.start_as_current_span("caller") as caller:
        async with saga_worker(client, queue, steps=steps):
            await TemporalSagaRunner(client, queue, steps=steps).execute_saga(
                steps, AegisContext(), name="trip"
            )
    spans = exporter.get_finished_spans()
    names = sorted({span.name for span in spans})
    assert names == [
        "CompleteWorkflow:aegis_nb.saga",
        "RunActivity:aegis_nb.execute",
        "RunWorkflow:aegis_nb.saga",
        "StartActivity:aegis_nb.execute",
        "StartWorkflow:aegis_nb.saga",
        "caller",
    ]
    trace_id = caller.get_span_context().trace_id
    assert {span.context.trace_id for span in spans} == {trace_id}
    assert sum(span.name == "RunActivity:aegis_nb.execute" for span in spans) == 2


def test_tracing_is_off_unless_asked_for() -> None:
    assert tracing_interceptors(False) == []
    assert [type(i).__name__ for i in tracing_interceptors(True)] == ["TracingInterceptor"]
