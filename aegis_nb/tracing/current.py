"""`CurrentSpan`: a span made the current one of the task that runs a step, from a sink's two calls.

The engine publishes a step's start in the task that then awaits its execute, so attaching the span's
context there makes every span the step opens (an MCP call through the SDK client, which injects
``traceparent``) its child. The end usually comes in that same task, and is detached there. Not
always: on asyncio a failure is recorded by the rollback, which runs in a task of its own (see
`aegis_nb.kernel.shielding.run_shielded`), where a context attached in the step's task cannot be
detached. So what is attached is a stand-in that delegates to the step's span until the step ends,
and from then on to the span that was current before: whatever a task still holds of it reads as
the context it had before the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import Token

import anyio
import sniffio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanContext, Status, StatusCode
from opentelemetry.util import types


class CurrentSpan:
    """Makes `span` the current span of the calling task until `release`, which any task may call."""

    __slots__ = ("_released", "_stand_in", "_task", "_token")

    def __init__(self, span: Span) -> None:
        before = otel_context.get_current()
        self._stand_in = _StandIn(span, trace.get_current_span(before))
        self._token: Token[Context] = otel_context.attach(trace.set_span_in_context(self._stand_in, before))
        self._task = _current_task()
        self._released = False

    def release(self) -> None:
        """Stop being the current span: detached here if this is the task that attached it, and in
        any case read as the span current before it, wherever the context is still held."""
        if self._released:
            return
        self._released = True
        self._stand_in.step_down()
        if _current_task() == self._task:
            otel_context.detach(self._token)


def _current_task() -> int | None:
    """The running task's id (None outside an event loop, when a sink is called directly)."""
    try:
        return anyio.get_current_task().id
    except (sniffio.AsyncLibraryNotFoundError, RuntimeError):
        return None


class _StandIn(Span):
    """The current span while a step runs: its own span until it ends, then the one before."""

    __slots__ = ("_before", "_target")

    def __init__(self, span: Span, before: Span) -> None:
        self._target = span
        self._before = before

    def step_down(self) -> None:
        self._target = self._before

    def end(self, end_time: int | None = None) -> None:
        self._target.end(end_time)

    def get_span_context(self) -> SpanContext:
        return self._target.get_span_context()

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        self._target.set_attributes(attributes)

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self._target.set_attribute(key, value)

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        self._target.add_event(name, attributes, timestamp)

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        self._target.add_link(context, attributes)

    def update_name(self, name: str) -> None:
        self._target.update_name(name)

    def is_recording(self) -> bool:
        return self._target.is_recording()

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        self._target.set_status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self._target.record_exception(exception, attributes, timestamp, escaped)

    def __repr__(self) -> str:
        return f"_StandIn({self._target!r})"
