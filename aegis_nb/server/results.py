"""What a workflow call returns over MCP: structured content with an output schema, or an error report.

A committed run returns `WorkflowResult` (status, final metadata with secrets shown as ``***``, the
steps run with their timings). A failed run returns ``is_error=True`` with the report's one-line
summary as text and the full `SagaReport` as structured content, so an agent can read both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from mcp.types import CallToolResult, TextContent
from typing_extensions import TypedDict

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.report import SagaReport
from aegis_nb.saga.events import SagaEvent, SagaStarted, StepSucceeded


class StepTiming(TypedDict):
    """One step that ran, with how long its execute took."""

    index: int
    name: str
    duration_ms: float


class WorkflowResult(TypedDict):
    """Structured content of a committed workflow call (the tool's output schema)."""

    status: Literal["committed"]
    workflow: str
    run_id: str | None
    metadata: dict[str, Any]
    steps: list[StepTiming]
    duration_ms: float


def committed_result(
    workflow: str, final: AegisContext | None, events: Sequence[SagaEvent], duration: float
) -> WorkflowResult:
    """The structured content of a workflow whose sagas committed (the last run's steps and metadata)."""
    last_run = _last_run(events)
    steps = [
        StepTiming(index=e.index, name=e.step, duration_ms=round(e.duration * 1000, 3))
        for e in last_run
        if isinstance(e, StepSucceeded)
    ]
    return WorkflowResult(
        status="committed",
        workflow=workflow,
        run_id=last_run[0].run_id if last_run else None,
        metadata={} if final is None else final.to_json(),
        steps=steps,
        duration_ms=round(duration * 1000, 3),
    )


def failed_result(report: SagaReport, duration: float) -> CallToolResult:
    """``is_error=True``: the summary as text, the whole report (plus summary and timing) as structure."""
    structured: dict[str, Any] = {
        **report.to_json(),
        "summary": report.summary(),
        "left_standing": [{"index": s.index, "name": s.name} for s in report.left_standing],
        "duration_ms": round(duration * 1000, 3),
    }
    return CallToolResult(
        content=[TextContent(type="text", text=report.summary())],
        structured_content=structured,
        is_error=True,
    )


def error_result(text: str) -> CallToolResult:
    """``is_error=True`` with `text` only: the call was refused or failed before any saga ran."""
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _last_run(events: Sequence[SagaEvent]) -> list[SagaEvent]:
    for i in range(len(events) - 1, -1, -1):
        if isinstance(events[i], SagaStarted):
            run_id = events[i].run_id
            return [e for e in events[i:] if e.run_id == run_id]
    return []
