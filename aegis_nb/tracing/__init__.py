"""Tracing layer: OpenTelemetry spans from saga events, by a sink. Depends on saga and kernel only.

``WorkflowEngine(sinks=[SagaTracer()])`` records each run as an ``invoke_workflow {saga}`` span with an
``execute_tool {step}`` span per step and a ``compensate {step}`` span per compensation attempt
(`aegis_nb.tracing.conventions` names them all). Nothing is recorded unless a tracer provider is
configured; an `AegisMCP` adds the sink itself when one is (`tracing_sink`). The OpenTelemetry API
comes with the ``mcp`` extra, the SDK and an exporter with ``otel``; without the API, importing this
package raises `MissingExtra` naming ``otel``.
"""

from aegis_nb.kernel.extras import needs_extra

with needs_extra("otel", "aegis_nb.tracing (SagaTracer)"):
    from aegis_nb.tracing.conventions import EVENT_NAMES, Operation, Outcome, Phase
    from aegis_nb.tracing.sink import (
        INSTRUMENTATION,
        SagaTracer,
        Tracing,
        aegis_tracer,
        tracer_provider_configured,
        tracing_sink,
    )

__all__ = [
    "EVENT_NAMES",
    "INSTRUMENTATION",
    "Operation",
    "Outcome",
    "Phase",
    "SagaTracer",
    "Tracing",
    "aegis_tracer",
    "tracer_provider_configured",
    "tracing_sink",
]
