"""Temporal runs in OpenTelemetry traces: temporalio's `TracingInterceptor` on a client and its workers.

Optional, and off unless asked for: ``await connect(address, tracing=True)`` is
``Client.connect(address, interceptors=[TracingInterceptor()])``. A client's interceptors that also
intercept workers are used by every worker built on it (`saga_worker` included), so the starting
of a saga workflow, the workflow and each step's activity become spans under the caller's current
span, and the trace crosses into the worker processes through Temporal's headers. The spans go to
whatever tracer provider the process has configured (the OpenTelemetry API alone, with none, records
nothing).
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, Interceptor


def tracing_interceptors(tracing: bool, tracer: Any = None) -> list[Interceptor]:
    """temporalio's OpenTelemetry interceptor when `tracing` (on `tracer`, default the global
    provider's), else none."""
    if not tracing:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor  # needs only the OTel API

    return [TracingInterceptor(tracer)]


async def connect(target_host: str, *, tracing: bool = False, tracer: Any = None, **options: Any) -> Client:
    """`Client.connect(target_host, **options)`, traced if `tracing` (its workers too)."""
    interceptors = [*options.pop("interceptors", ()), *tracing_interceptors(tracing, tracer)]
    return await Client.connect(target_host, interceptors=interceptors, **options)
