"""`SagaTracer`: the sink that records each run as OpenTelemetry spans, from its events alone.

A run is one ``invoke_workflow {saga}`` span, a child of the span current where the run started (an
MCP server's request span, say). Each step is an ``execute_tool {step}`` span under it, and each
compensation attempt a ``compensate {step}`` span under it too, linked to its step's span. The step's
(or attempt's) span is the current span while its execute (or compensate) runs, so what the step
calls is traced as its child. Every event is recorded as a span event on the span it belongs to.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    TracerProvider,
)

from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    FinalEvent,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
    is_final,
)
from aegis_nb.tracing.conventions import (
    EVENT_NAMES,
    OUTCOME,
    WORKFLOW_NAME,
    Outcome,
    Phase,
    compensation_span_name,
    end_attributes,
    error_description,
    event_attributes,
    saga_attributes,
    saga_span_name,
    step_attributes,
    step_span_name,
)
from aegis_nb.tracing.current import CurrentSpan

INSTRUMENTATION = "aegis_nb"
"""The instrumentation scope of every span aegis_nb records."""


def aegis_tracer(tracer_provider: TracerProvider | None = None) -> Tracer:
    """The tracer aegis_nb's spans come from: `tracer_provider`'s, else the global provider's.

    The global one may be configured later: the API hands out a proxy that records nothing until
    then. (Also what ``temporalio.contrib.opentelemetry.TracingInterceptor(aegis_tracer())`` takes,
    so that Temporal's spans share the scope.)
    """
    return trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider)


def tracer_provider_configured() -> bool:
    """Whether a tracer provider is set globally: the API's default is a proxy that records nothing."""
    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider | NoOpTracerProvider)


class SagaTracer:
    """Records every run it sees as spans: ``WorkflowEngine(sinks=[SagaTracer()])``.

    `tracer_provider` defaults to the global one. A sink costs nothing until added to an engine (or
    a run); leave it out to trace nothing at all.
    """

    __slots__ = ("_runs", "_tracer")

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = aegis_tracer(tracer_provider)
        self._runs: dict[str, _RunSpans] = {}  # runs begun and not yet ended, by run id

    def __call__(self, event: SagaEvent) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            run = self._runs[event.run_id] = _RunSpans(self._tracer, event)
        run.record(event)
        if is_final(event):
            del self._runs[event.run_id]

    def __repr__(self) -> str:
        return f"SagaTracer({len(self._runs)} runs open)"


Tracing = SagaTracer | bool | None
"""An `AegisMCP(tracing=...)` option: a tracer to use, True (one on the global provider), False
(none), or None: one on the global provider if it is configured when the app is built."""


def tracing_sink(tracing: Tracing) -> SagaTracer | None:
    """The sink `tracing` asks for, or None for none (so that tracing off costs nothing)."""
    if isinstance(tracing, SagaTracer):
        return tracing
    if tracing is None:
        tracing = tracer_provider_configured()
    if not isinstance(tracing, bool):
        raise TypeError(f"tracing must be a SagaTracer, True, False or None, got {type(tracing).__name__}")
    return SagaTracer() if tracing else None


_Key = tuple[Phase, int]
"""A span in progress within a run: a step's (`Phase.FORWARD`) or its compensation attempt's."""


class _RunSpans:
    """One run's spans: its own, its steps' (kept for the compensations' links), those in progress."""

    __slots__ = ("current", "in_progress", "saga", "steps", "tracer", "within")

    def __init__(self, tracer: Tracer, first: SagaEvent) -> None:
        # A run that recovery finishes has no SagaStarted here: its forward phase ran in another process.
        started = first if isinstance(first, SagaStarted) else None
        self.tracer = tracer
        # Parented by the context current where the run starts, the caller's.
        self.saga = tracer.start_span(
            saga_span_name(None if started is None else started.saga),
            kind=SpanKind.INTERNAL,
            attributes=saga_attributes(first.run_id, started),
        )
        self.within = trace.set_span_in_context(self.saga)
        self.steps: dict[int, Span] = {}
        self.in_progress: dict[_Key, Span] = {}
        self.current: dict[_Key, CurrentSpan] = {}  # insertion order is attach order

    def record(self, event: SagaEvent) -> None:
        match event:
            case SagaStarted():
                self._note(self.saga, event)
            case StepStarted():
                span = self._begin(step_span_name(event.step), event, Phase.FORWARD, ())
                self.steps[event.index] = span
            case StepSucceeded() | StepFailed() | StepTimedOut():
                self._end((Phase.FORWARD, event.index), event)
            case CompensationStarted():
                step = self.steps.get(event.index)
                links = () if step is None else (Link(step.get_span_context()),)
                self._begin(compensation_span_name(event.step), event, Phase.COMPENSATE, links)
            case CompensationSucceeded() | CompensationFailed():
                self._end((Phase.COMPENSATE, event.index), event)
            case SagaCommitted() | SagaRolledBackEvent() | SagaStuck():
                self._conclude(event)

    def _begin(
        self, name: str, event: StepStarted | CompensationStarted, phase: Phase, links: tuple[Link, ...]
    ) -> Span:
        span = self.tracer.start_span(
            name,
            context=self.within,
            kind=SpanKind.INTERNAL,
            attributes=step_attributes(event, phase),
            links=links,
        )
        self._note(span, event)
        key = (phase, event.index)
        self.in_progress[key] = span
        # The engine awaits the step's execute (or compensate) in this very task, right after this.
        self.current[key] = CurrentSpan(span)
        return span

    def _end(self, key: _Key, event: SagaEvent) -> None:
        current = self.current.pop(key, None)
        if current is not None:
            current.release()
        span = self.in_progress.pop(key, None)
        if span is None:
            # An end whose start this tracer never saw: recovery records how a step it finds
            # interrupted ended, its start long gone with the process that ran it.
            self._note(self.saga, event)
            return
        self._note(span, event)
        _finish(span, event)

    def _conclude(self, event: FinalEvent) -> None:
        # A start whose end never came (a cancellation landed during its journal write): released
        # newest first, so that each detach restores what the one before it attached over.
        for key in reversed(self.current):
            self.current[key].release()
        self.current.clear()
        for span in self.in_progress.values():
            span.set_attribute(OUTCOME, Outcome.UNRECORDED.value)
            span.end()
        self.in_progress.clear()
        # Named at its start, unless recovery finishes it: then its end is the first to say the saga.
        self.saga.update_name(saga_span_name(event.saga))
        self.saga.set_attribute(WORKFLOW_NAME, event.saga)
        self._note(self.saga, event)
        _finish(self.saga, event)

    @staticmethod
    def _note(span: Span, event: SagaEvent) -> None:
        span.add_event(EVENT_NAMES[type(event)], event_attributes(event))


def _finish(span: Span, event: SagaEvent) -> None:
    span.set_attributes(end_attributes(event))
    description = error_description(event)
    if description is not None:
        span.set_status(Status(StatusCode.ERROR, description))
    span.end()
