"""What a workflow call returns over MCP: one structured shape, with an output schema, for every outcome.

A committed run returns `WorkflowResult` with status ``committed``, the run id, the final metadata
(secrets shown as ``***``) and the steps run with their timings: what the client needs and nothing it
already knows. A failed run returns ``is_error=True``: the report's one-line summary as text, and the
same shape with status ``rolled_back`` or ``stuck`` plus ``summary`` and the whole `SagaReport` under
``report`` (clients such as the MCP Inspector check error results against the output schema too, so
both outcomes share it).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Final, Literal, NotRequired, cast

from mcp.types import CallToolResult, TextContent
from pydantic import TypeAdapter
from pydantic_core import to_json
from typing_extensions import TypedDict

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolTimeoutError
from aegis_nb.kernel.report import SagaReport, SagaStatus
from aegis_nb.saga.events import SagaCommitted, SagaEvent, SagaRolledBackEvent, SagaStarted, StepSucceeded

REFUSED_META_KEY: Final = "aegis-nb/refused"
"""``_meta`` key of an error result (value ``true``): the call did nothing, so there is nothing to
undo. Errors without it may have acted first (a tool that crashed): `unwrap_result` tells the two
apart, and the engine compensates a failed in-doubt step unless it was refused."""

TIMED_OUT_META_KEY: Final = "aegis-nb/timedOutMs"
"""``_meta`` key of an error result: the call was stopped at its deadline mid-way, so what it did is
in doubt (not refused). Its value is the call's budget in milliseconds, or null when unknown."""

_REFUSED: Final = {REFUSED_META_KEY: True}


class StepTiming(TypedDict):
    """One step that ran to completion, with how long its execute took."""

    index: int
    name: str
    duration_ms: float


class WorkflowResult(TypedDict):
    """Structured content of a workflow call (the tool's output schema), committed or not."""

    status: Literal["committed", "rolled_back", "stuck"]
    run_id: str | None
    metadata: dict[str, Any]
    steps: list[StepTiming]
    duration_ms: float
    summary: NotRequired[str]
    report: NotRequired[dict[str, Any]]


@functools.cache
def workflow_output_schema() -> dict[str, Any]:
    """The JSON schema of `WorkflowResult`, shaped to be cheap to check.

    Clients check every structured result against the output schema (the Python SDK with
    `jsonschema`, which builds a validator for each subschema it applies to a value: ~4 µs each).
    So the published schema applies as few subschemas as say the same thing: no ``$ref``, a list
    of types instead of an ``anyOf``, no generated titles, no ``type`` beside an ``enum`` of
    strings, and no subschema per step (a step's fields are given in words). A 3-step result takes
    ~36 µs to check against it, ~140 µs against the schema pydantic generates, and a step more
    costs nothing instead of another ~4 µs.
    """
    schema = TypeAdapter(WorkflowResult).json_schema()
    definitions = schema.pop("$defs", {})

    def lean(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return lean(definitions[ref.removeprefix("#/$defs/")])
            # Generated titles only repeat the field names; ``additionalProperties: true`` is the default.
            node = {
                key: lean(value)
                for key, value in node.items()
                if key != "title" and (key, value) != ("additionalProperties", True)
            }
            branches = node.get("anyOf")
            # anyOf of bare types (``X | None``) says the same as a list of types, checked far faster.
            if isinstance(branches, list) and all(
                set(b) <= {"type", "additionalProperties"} for b in branches
            ):
                node.pop("anyOf")
                node["type"] = [b["type"] for b in branches]
            # An enum of strings already says the value is a string.
            if node.get("type") == "string" and all(isinstance(v, str) for v in node.get("enum", [None])):
                node.pop("type")
            return node
        if isinstance(node, list):
            return [lean(item) for item in node]
        return node

    result = dict(lean(schema))
    steps = result["properties"]["steps"]
    step = steps.pop("items")
    fields = ", ".join(f"{name} ({field['type']})" for name, field in step["properties"].items())
    steps["description"] = (
        f"The steps that ran to completion, in order, with how long each execute took: "
        f"one object each, with {fields}."
    )
    properties = result["properties"]
    properties["summary"]["description"] = "Failures only: one line a person can act on (also the text)."
    properties["report"]["description"] = "Failures only: the whole saga report, with left_standing."
    return result


def committed_result(returned: object, events: Sequence[SagaEvent], duration: float) -> CallToolResult:
    """A committed workflow: final metadata and the steps of the run it ended with, as structure and JSON.

    `returned` is what the workflow returned: a context, or anything else (then the last committed
    run's context stands for it).
    """
    final, run_id = _ending(returned, events)
    structured: WorkflowResult = {
        "status": "committed",
        "run_id": run_id,
        "metadata": {} if final is None else final.to_json(),
        "steps": [] if run_id is None else _timings(events, run_id),
        "duration_ms": _ms(duration),
    }
    # The text block repeats the structure as JSON, for clients that only read content (the MCP
    # spec asks for it). The dict is fresh, so it is handed over as it is, not copied.
    return CallToolResult(
        content=[TextContent(type="text", text=to_json(structured).decode())],
        structured_content=cast(dict[str, Any], structured),
    )


def failed_result(report: SagaReport, events: Sequence[SagaEvent], duration: float) -> CallToolResult:
    """``is_error=True``: the summary as text; as structure, the same shape with the whole report.

    Rolled back, the call left nothing standing, as if refused, unless another saga of the same
    request committed (or is stuck, or unfinished): then it acted. Stuck, it did not say so.
    """
    stuck = report.status is SagaStatus.STUCK
    refused = not stuck and _all_rolled_back(events)
    status: Literal["rolled_back", "stuck"] = "stuck" if stuck else "rolled_back"
    structured = WorkflowResult(
        status=status,
        run_id=report.run_id,
        metadata={},
        steps=_timings(events, report.run_id),
        duration_ms=_ms(duration),
        summary=report.summary(),
        report={
            **report.to_json(),
            "left_standing": [
                {"index": report.steps.index(name), "name": name} for name in report.left_standing
            ],
        },
    )
    return CallToolResult(
        content=[TextContent(type="text", text=report.summary())],
        structured_content=dict(structured),
        is_error=True,
        _meta=dict(_REFUSED) if refused else None,
    )


def _all_rolled_back(events: Sequence[SagaEvent]) -> bool:
    """Whether every saga the request started ended rolled back (so nothing it did is left standing)."""
    started = {e.run_id for e in events if type(e) is SagaStarted}
    return started <= {e.run_id for e in events if type(e) is SagaRolledBackEvent}


def error_result(text: str, *, refused: bool, structured: dict[str, Any] | None = None) -> CallToolResult:
    """``is_error=True`` with `text` (and `structured`, if any); `refused`: the call did nothing."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=True,
        _meta=dict(_REFUSED) if refused else None,
    )


def timed_out_result(text: str, exc: ToolTimeoutError) -> CallToolResult:
    """``is_error=True`` for a call stopped at its deadline mid-way: marked in ``_meta`` as in doubt.

    A call cut off mid-way may have acted: `unwrap_result` raises `ToolTimeoutError` for it, and the
    engine compensates an in-doubt step. That holds even when what timed out inside it had no time
    left (a budget <= 0, sent as 0): the call may have acted before. A call whose own deadline had
    passed before it started is refused by its runner (`error_result`), not sent here.
    """
    budget = None if exc.budget is None else _ms(max(exc.budget, 0.0))
    return CallToolResult(
        content=[TextContent(type="text", text=text)], is_error=True, _meta={TIMED_OUT_META_KEY: budget}
    )


def _timings(events: Sequence[SagaEvent], run_id: str) -> list[StepTiming]:
    # Exact types (event classes are final) and the rounding inline: built on every workflow call.
    return [
        {"index": e.index, "name": e.step, "duration_ms": round(e.duration * 1000, 3)}
        for e in events
        if type(e) is StepSucceeded and e.run_id == run_id
    ]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _ending(returned: object, events: Sequence[SagaEvent]) -> tuple[AegisContext | None, str | None]:
    """The context a workflow ends with, and the run a committed result describes.

    The context is the one returned, else the last committed run's. The run is the one that context
    came from: a workflow may run several sagas and catch a failed one, so "the last run started"
    could be one that was rolled back. A context from none of this call's runs (a fresh one) stands
    for the last run that committed, if any.
    """
    last_committed = next((e for e in reversed(events) if type(e) is SagaCommitted), None)
    fallback = None if last_committed is None else last_committed.run_id
    if not isinstance(returned, AegisContext):
        return (None if last_committed is None else last_committed.context), fallback
    if returned.run_id == fallback:  # the usual ending: the context of the run that committed last
        return returned, fallback
    started = {e.run_id for e in events if type(e) is SagaStarted}
    return returned, (returned.run_id if returned.run_id in started else fallback)
