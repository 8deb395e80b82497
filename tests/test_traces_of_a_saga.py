"""A run traced by `SagaTracer`, as the whole span tree: a commit, a rollback, a compensation that
fails with retries; each step's span current while it runs; no secret in any span."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import pytest
from opentelemetry import trace

from aegis_nb import AegisContext, RetryPolicy, Secret, WorkflowEngine
from aegis_nb.testing import CallLog
from aegis_nb.tracing import SagaTracer
from tests.steps import Recorded
from tests.tracing_support import Node, Spans, spans_json

pytestmark = pytest.mark.anyio

THREE_TRIES = RetryPolicy(attempts=3, initial_delay=0)


class Traced(Recorded):
    """A recorded step that opens a span of its own in execute and in compensate, as a tool call would."""

    def __init__(self, spans: Spans, name: str, **options: Any) -> None:
        super().__init__(name, CallLog(), **options)
        self.spans = spans

    async def execute(self, ctx: AegisContext) -> AegisContext:
        with self.span(f"call {self.name}"):
            return await super().execute(ctx)

    async def compensate(self, ctx: AegisContext) -> None:
        with self.span(f"undo {self.name}"):
            await super().compensate(ctx)

    def span(self, name: str) -> AbstractContextManager[object]:
        # A plain child of whatever span is current: what a failure means is for the engine's spans to say.
        return self.spans.tracer.start_as_current_span(
            name, record_exception=False, set_status_on_exception=False
        )


def leaf(name: str) -> Node:
    return {
        "name": name,
        "attributes": {},
        "events": [],
        "status": ("UNSET", None),
        "links": [],
        "children": [],
    }


def step(
    name: str,
    index: int,
    events: list[tuple[str, dict[str, Any]]],
    outcome: str,
    *,
    error: tuple[str, str] | None = None,
) -> Node:
    """The span of step `name`'s execute, with the span its execute opened."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "aegis.run.id": "RUN",
        "aegis.step.index": index,
        "aegis.saga.phase": "forward",
        "gen_ai.tool.call.id": f"RUN/{index}",
        "aegis.outcome": outcome,
    }
    if error is not None:
        attributes["error.type"] = error[0]
    return {
        "name": f"execute_tool {name}",
        "attributes": attributes,
        "events": events,
        "status": ("UNSET", None) if error is None else ("ERROR", f"{error[0]}: {error[1]}"),
        "links": [],
        "children": [leaf(f"call {name}")],
    }


def undo(
    name: str,
    index: int,
    attempt: int,
    events: list[tuple[str, dict[str, Any]]],
    outcome: str,
    *,
    error: tuple[str, str] | None = None,
    will_retry: bool | None = None,
) -> Node:
    """The span of one attempt of step `name`'s compensation, linked to its step's span."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "aegis.run.id": "RUN",
        "aegis.step.index": index,
        "aegis.saga.phase": "compensate",
        "aegis.compensation.attempt": attempt,
        "aegis.outcome": outcome,
    }
    if error is not None:
        attributes["error.type"] = error[0]
        attributes["aegis.compensation.will_retry"] = will_retry
    return {
        "name": f"compensate {name}",
        "attributes": attributes,
        "events": events,
        "status": ("UNSET", None) if error is None else ("ERROR", f"{error[0]}: {error[1]}"),
        "links": [f"execute_tool {name}"],
        "children": [leaf(f"undo {name}")],
    }


def request(children: list[Node]) -> list[Node]:
    return [{**leaf("request"), "children": children}]


SAGA_ATTRIBUTES = {
    "gen_ai.operation.name": "invoke_workflow",
    "aegis.run.id": "RUN",
    "gen_ai.workflow.name": "trip",
    "aegis.saga.steps": ("flight", "hotel", "card"),
}


async def run_traced(spans: Spans, steps: list[Traced], **engine: Any) -> str:
    """Run `steps` as saga ``trip`` inside a ``request`` span; return the run id."""
    tracer = SagaTracer(spans.provider)
    with spans.tracer.start_as_current_span("request") as outer:
        run = await WorkflowEngine(sinks=[tracer], **engine).run_saga(steps, name="trip")
        # Every span the run made current was detached again, in the task that attached it.
        assert trace.get_current_span() is outer
    assert repr(tracer) == "SagaTracer(0 runs open)"
    return run.events[0].run_id


async def test_a_commit_is_one_workflow_span_with_a_tool_span_per_step_each_current_while_it_ran() -> None:
    spans = Spans()
    steps = [Traced(spans, "flight"), Traced(spans, "hotel"), Traced(spans, "card")]
    run_id = await run_traced(spans, steps)
    assert spans.tree([run_id]) == request(
        [
            {
                "name": "invoke_workflow trip",
                "attributes": {**SAGA_ATTRIBUTES, "aegis.outcome": "committed"},
                "events": [
                    ("aegis.saga.started", {"aegis.event.seq": 0}),
                    ("aegis.saga.committed", {"aegis.event.seq": 7}),
                ],
                "status": ("UNSET", None),
                "links": [],
                "children": [
                    step(
                        "flight",
                        0,
                        [
                            ("aegis.step.started", {"aegis.event.seq": 1}),
                            ("aegis.step.succeeded", {"aegis.event.seq": 2}),
                        ],
                        "succeeded",
                    ),
                    step(
                        "hotel",
                        1,
                        [
                            ("aegis.step.started", {"aegis.event.seq": 3}),
                            ("aegis.step.succeeded", {"aegis.event.seq": 4}),
                        ],
                        "succeeded",
                    ),
                    step(
                        "card",
                        2,
                        [
                            ("aegis.step.started", {"aegis.event.seq": 5}),
                            ("aegis.step.succeeded", {"aegis.event.seq": 6}),
                        ],
                        "succeeded",
                    ),
                ],
            }
        ]
    )


DECLINED = ("Boom", "declined")
DECLINED_EVENT = {
    "aegis.saga.failure_kind": "error",
    "exception.type": "Boom",
    "exception.message": "declined",
}


async def test_a_rollback_adds_a_compensation_span_per_undone_step_linked_to_its_step() -> None:
    spans = Spans()
    steps = [Traced(spans, "flight"), Traced(spans, "hotel"), Traced(spans, "card", fail="declined")]
    run_id = await run_traced(spans, steps)
    assert spans.tree([run_id]) == request(
        [
            {
                "name": "invoke_workflow trip",
                "attributes": {
                    **SAGA_ATTRIBUTES,
                    "aegis.outcome": "rolled_back",
                    "error.type": "Boom",
                    "aegis.saga.failure_kind": "error",
                    "aegis.saga.failed_step": "card",
                },
                "events": [
                    ("aegis.saga.started", {"aegis.event.seq": 0}),
                    ("aegis.saga.rolled_back", {"aegis.event.seq": 11}),
                ],
                "status": ("ERROR", "declined — rolled back: hotel, flight"),
                "links": [],
                "children": [
                    step(
                        "flight",
                        0,
                        [
                            ("aegis.step.started", {"aegis.event.seq": 1}),
                            ("aegis.step.succeeded", {"aegis.event.seq": 2}),
                        ],
                        "succeeded",
                    ),
                    step(
                        "hotel",
                        1,
                        [
                            ("aegis.step.started", {"aegis.event.seq": 3}),
                            ("aegis.step.succeeded", {"aegis.event.seq": 4}),
                        ],
                        "succeeded",
                    ),
                    step(
                        "card",
                        2,
                        [
                            ("aegis.step.started", {"aegis.event.seq": 5}),
                            ("aegis.step.failed", {"aegis.event.seq": 6, **DECLINED_EVENT}),
                        ],
                        "failed",
                        error=DECLINED,
                    ),
                    undo(
                        "hotel",
                        1,
                        1,
                        [
                            (
                                "aegis.compensation.started",
                                {"aegis.event.seq": 7, "aegis.compensation.attempt": 1},
                            ),
                            (
                                "aegis.compensation.succeeded",
                                {"aegis.event.seq": 8, "aegis.compensation.attempt": 1},
                            ),
                        ],
                        "succeeded",
                    ),
                    undo(
                        "flight",
                        0,
                        1,
                        [
                            (
                                "aegis.compensation.started",
                                {"aegis.event.seq": 9, "aegis.compensation.attempt": 1},
                            ),
                            (
                                "aegis.compensation.succeeded",
                                {"aegis.event.seq": 10, "aegis.compensation.attempt": 1},
                            ),
                        ],
                        "succeeded",
                    ),
                ],
            }
        ]
    )


def failed_attempt(seq: int, attempt: int, will_retry: bool) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("aegis.compensation.started", {"aegis.event.seq": seq, "aegis.compensation.attempt": attempt}),
        (
            "aegis.compensation.failed",
            {
                "aegis.event.seq": seq + 1,
                "aegis.compensation.attempt": attempt,
                "aegis.compensation.will_retry": will_retry,
                "exception.type": "Boom",
                "exception.message": "hotel cannot be undone yet",
            },
        ),
    ]


async def test_a_compensation_that_fails_every_retry_is_a_span_per_attempt_and_the_run_is_stuck() -> None:
    spans = Spans()
    steps = [
        Traced(spans, "flight"),
        Traced(spans, "hotel", compensation_failures=5),
        Traced(spans, "card", fail="declined"),
    ]
    run_id = await run_traced(spans, steps, compensation_retry=THREE_TRIES)
    cannot = ("Boom", "hotel cannot be undone yet")
    assert spans.tree([run_id]) == request(
        [
            {
                "name": "invoke_workflow trip",
                "attributes": {
                    **SAGA_ATTRIBUTES,
                    "aegis.outcome": "stuck",
                    "error.type": "Boom",
                    "aegis.saga.failure_kind": "error",
                    "aegis.saga.failed_step": "card",
                    "aegis.saga.left_standing": ("hotel",),
                },
                "events": [
                    ("aegis.saga.started", {"aegis.event.seq": 0}),
                    ("aegis.saga.stuck", {"aegis.event.seq": 15}),
                ],
                "status": (
                    "ERROR",
                    "declined — could not undo: hotel (hotel cannot be undone yet, after 3 attempts)"
                    " — rolled back: flight",
                ),
                "links": [],
                "children": [
                    step(
                        "flight",
                        0,
                        [
                            ("aegis.step.started", {"aegis.event.seq": 1}),
                            ("aegis.step.succeeded", {"aegis.event.seq": 2}),
                        ],
                        "succeeded",
                    ),
                    step(
                        "hotel",
                        1,
                        [
                            ("aegis.step.started", {"aegis.event.seq": 3}),
                            ("aegis.step.succeeded", {"aegis.event.seq": 4}),
                        ],
                        "succeeded",
                    ),
                    step(
                        "card",
                        2,
                        [
                            ("aegis.step.started", {"aegis.event.seq": 5}),
                            ("aegis.step.failed", {"aegis.event.seq": 6, **DECLINED_EVENT}),
                        ],
                        "failed",
                        error=DECLINED,
                    ),
                    undo("hotel", 1, 1, failed_attempt(7, 1, True), "failed", error=cannot, will_retry=True),
                    undo("hotel", 1, 2, failed_attempt(9, 2, True), "failed", error=cannot, will_retry=True),
                    undo(
                        "hotel", 1, 3, failed_attempt(11, 3, False), "failed", error=cannot, will_retry=False
                    ),
                    undo(
                        "flight",
                        0,
                        1,
                        [
                            (
                                "aegis.compensation.started",
                                {"aegis.event.seq": 13, "aegis.compensation.attempt": 1},
                            ),
                            (
                                "aegis.compensation.succeeded",
                                {"aegis.event.seq": 14, "aegis.compensation.attempt": 1},
                            ),
                        ],
                        "succeeded",
                    ),
                ],
            }
        ]
    )


CARD = "4242424242424242"


class Passenger(Traced):
    """Books for the passport it is given, as a saga argument."""

    async def execute(self, ctx: AegisContext, passport: str = "") -> AegisContext:
        return await super().execute(ctx)

    async def compensate(self, ctx: AegisContext, passport: str = "") -> None:
        await super().compensate(ctx)


class LeakyCard(Traced):
    """Fails quoting the card it was given: the engine must scrub it before any event holds it."""

    async def execute(self, ctx: AegisContext) -> AegisContext:
        card = ctx.metadata["card"]
        assert isinstance(card, Secret)
        raise ValueError(f"card {card.reveal()} declined")


async def test_no_span_holds_a_secret_the_metadata_or_an_argument() -> None:
    spans = Spans()
    ctx = AegisContext({"card": Secret(CARD), "traveller": "Ada Lovelace"})
    saga = [(Passenger(spans, "flight"), (), {"passport": "P-1234567"}), LeakyCard(spans, "card")]
    run = await WorkflowEngine(sinks=[SagaTracer(spans.provider)]).run_saga(saga, ctx, name="trip")
    assert run.report is not None
    exported = spans_json(spans.finished())
    assert "card *** declined" in exported  # the failure is there, scrubbed as the events carry it
    for never in (CARD, "Ada Lovelace", "traveller", "P-1234567", "passport"):
        assert never not in exported
