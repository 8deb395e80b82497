"""Tracing is off unless asked for or a tracer provider is configured: then `tracing_sink`, what
`AegisMCP(tracing=...)` asks, makes no sink at all, so tracing off costs nothing."""

from __future__ import annotations

import pytest

from aegis_nb.tracing import SagaTracer, tracer_provider_configured, tracing_sink


def test_with_no_provider_configured_no_tracer_is_made_unless_asked_for() -> None:
    assert not tracer_provider_configured()  # the test process never sets a global provider
    assert tracing_sink(None) is None
    assert tracing_sink(False) is None
    assert isinstance(tracing_sink(True), SagaTracer)
    given = SagaTracer()
    assert tracing_sink(given) is given
    with pytest.raises(TypeError, match=r"^tracing must be a SagaTracer, True, False or None, got str$"):
        tracing_sink("yes")  # type: ignore[arg-type]
