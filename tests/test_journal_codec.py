"""The journal codec: every event and context survives JSON exactly, except secrets, which never do."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aegis_nb import AegisContext, Secret
from aegis_nb.kernel.report import (
    CompensationFailure,
    ErrorInfo,
    FailureKind,
    SagaReport,
    SagaStatus,
)
from aegis_nb.kernel.values import FrozenDict
from aegis_nb.saga.durable.codec import (
    SCHEMA_VERSION,
    RecordError,
    context_from_json,
    context_to_json,
    decode_event,
    dumps,
    event_to_json,
    json_problem,
)
from aegis_nb.saga.durable.eventtext import encode_event
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)

names = st.text(min_size=1, max_size=8)
json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | names
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
metadata_values = st.recursive(
    json_scalars | names.map(lambda s: Secret(f"S3CR3T-{s}")),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
deadlines = st.just(math.inf) | st.floats(0, 1e6)


@st.composite
def contexts(draw: st.DrawFn, values: st.SearchStrategy[object] = metadata_values) -> AegisContext:
    ctx = AegisContext(draw(st.dictionaries(names, values, max_size=4)), deadline=draw(deadlines))
    if draw(st.booleans()):
        ctx = ctx.for_step(draw(names), draw(st.integers(0, 50)))
    return ctx


def redacted(value: object) -> object:
    """What a value becomes after a trip through the journal: every secret is Secret("***")."""
    if isinstance(value, Secret):
        return Secret("***")
    if isinstance(value, FrozenDict):
        return FrozenDict({k: redacted(v) for k, v in value.items()})
    if isinstance(value, tuple):
        return tuple(redacted(v) for v in value)
    return value


@given(contexts(json_values))
def test_a_context_without_secrets_round_trips_exactly(ctx: AegisContext) -> None:
    assert context_from_json(json.loads(json.dumps(context_to_json(ctx)))) == ctx


@given(contexts())
def test_secrets_come_back_redacted_and_their_values_are_never_written(ctx: AegisContext) -> None:
    text = json.dumps(context_to_json(ctx))
    back = context_from_json(json.loads(text))
    assert back.metadata == redacted(ctx.metadata)
    assert (back.deadline, back.run_id, back.step_index) == (ctx.deadline, ctx.run_id, ctx.step_index)
    assert "S3CR3T" not in text


REPORT = SagaReport(
    run_id="r1",
    saga="trip",
    status=SagaStatus.STUCK,
    steps=("A", "B"),
    succeeded=("A",),
    failed_step="B",
    failure_kind=FailureKind.TIMEOUT,
    cause=ErrorInfo("ToolTimeoutError", "too slow"),
    compensated=(),
    compensation_failures=(CompensationFailure("A", 3, ErrorInfo("OSError", "down")),),
)


def every_event(ctx: AegisContext) -> list[SagaEvent]:
    error = ErrorInfo("ValueError", "Card Declined!")
    return [
        SagaStarted("r1", 0, 1.5, "trip", ("A", "B"), math.inf, ctx),
        SagaStarted("r1", 0, 1.5, "trip", ("A", "B"), 12.25, ctx),
        StepStarted("r1", 1, 2.0, 0, "A"),
        StepSucceeded("r1", 2, 2.5, 0, "A", 0.5, ctx),
        StepFailed("r1", 3, 3.0, 1, "B", 0.25, FailureKind.CANCELLED, error),
        StepTimedOut("r1", 3, 3.0, 1, "B", 0.25, 0.2, error),
        CompensationStarted("r1", 4, 3.5, 0, "A", 1),
        CompensationFailed("r1", 5, 3.75, 0, "A", 1, 0.1, error, True),
        CompensationSucceeded("r1", 6, 4.0, 0, "A", 2, 0.125),
        CompensationSucceeded("r1", 6, 4.0, 0, "A", 2, 0.125, nothing_to_undo=True),
        SagaCommitted("r1", 7, 5.0, "trip", 3.5, ctx),
        SagaRolledBackEvent("r1", 7, 5.0, "trip", 3.5, REPORT),
        SagaStuck("r1", 7, 5.0, "trip", 3.5, REPORT),
    ]


@given(contexts(json_values))
def test_every_event_type_round_trips(ctx: AegisContext) -> None:
    for event in every_event(ctx):
        assert decode_event(encode_event(event)) == event


def test_the_stored_form_is_versioned_json_with_no_secret() -> None:
    ctx = AegisContext({"card": Secret("4242-4242"), "trip": ["LIS", 3]}).for_step("r1", 0)
    assert json.loads(encode_event(StepSucceeded("r1", 2, 2.5, 0, "A", 0.5, ctx))) == {
        "v": SCHEMA_VERSION,
        "type": "StepSucceeded",
        "run_id": "r1",
        "seq": 2,
        "time": 2.5,
        "index": 0,
        "step": "A",
        "duration": 0.5,
        "context": {
            "metadata": {"card": "***", "trip": ["LIS", 3]},
            "secrets": [["card"]],
            "deadline": None,
            "run_id": "r1",
            "step": 0,
        },
    }


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ("{", "not valid JSON"),
        ("[1]", "expected a JSON object, got list"),
        ('{"type": "StepStarted"}', 'no schema version ("v"), got None'),
        ('{"v": 1, "type": "Nope"}', "unknown event type 'Nope'"),
        (
            '{"v": 1, "type": "StepStarted", "run_id": "r", "seq": 0, "time": 0.0, "index": 0}',
            "StepStarted: missing fields ['step'], unexpected fields []",
        ),
        (
            '{"v": 1, "type": "StepStarted", "run_id": "r", "seq": "0", "time": 0, "index": 0, "step": "A"}',
            "StepStarted.seq must be an integer, got '0'",
        ),
        (
            '{"v": 1, "type": "CompensationFailed", "run_id": "r", "seq": 0, "time": 0, "index": 0,'
            ' "step": "A", "attempt": 1, "duration": 0, "error": {"type": "E", "message": ""},'
            ' "will_retry": 1}',
            "CompensationFailed.will_retry must be true or false, got 1",
        ),
        ('{"v": 1, "type": "StepStarted", "x": NaN}', "not valid JSON (NaN is not JSON)"),
        (
            '{"v": 1, "type": "CompensationSucceeded", "run_id": "r", "seq": 0, "time": 0, "index": 0,'
            ' "step": "A", "attempt": 1, "duration": 0, "nothing_to_undo": "yes"}',
            "CompensationSucceeded.nothing_to_undo must be true or false, got 'yes'",
        ),
        (
            '{"v": 1, "type": "CompensationSucceeded", "run_id": "r", "seq": 0, "time": 0, "index": 0,'
            ' "step": "A", "nothing_to_undo": true}',
            "CompensationSucceeded: missing fields ['attempt', 'duration'], unexpected fields []",
        ),
        (
            '{"v": 1, "type": "CompensationSucceeded", "run_id": "r", "seq": 0, "time": 0, "index": 0,'
            ' "step": "A", "attempt": 1, "duration": 0, "nothing_to_undo": false, "undone": true}',
            "CompensationSucceeded: missing fields [], unexpected fields ['undone']",
        ),
    ],
)
def test_a_malformed_record_is_refused_with_the_reason(record: str, problem: str) -> None:
    with pytest.raises(RecordError) as caught:
        decode_event(record)
    assert str(caught.value).startswith(problem)
    assert not caught.value.too_new


def test_a_record_from_a_newer_schema_is_refused_as_too_new() -> None:
    with pytest.raises(
        RecordError, match=r"written by schema 2; this aegis_nb reads up to schema 1"
    ) as caught:
        decode_event('{"v": 2, "type": "StepStarted"}')
    assert caught.value.too_new


def test_a_secret_placeholder_that_is_not_redacted_is_refused() -> None:
    data = {
        "metadata": {"card": "4242"},
        "secrets": [["card"]],
        "deadline": None,
        "run_id": None,
        "step": None,
    }
    with pytest.raises(RecordError, match="a secret's place holds '4242'"):
        context_from_json(data)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([1, "a", {"b": [None, 2.5]}], None),
        ([math.nan], "args[0] is nan, which JSON cannot hold"),
        (
            {"k": Secret("s")},
            "args['k'] is a Secret, and secrets are never written; pass it in the context metadata",
        ),
        ({1: "a"}, "args has a int key 1; JSON keys are str"),
        ([object()], "args[0] is a object, which is not JSON data"),
    ],
)
def test_json_problem_names_the_offending_value(value: object, problem: str | None) -> None:
    assert json_problem(value, "args") == problem


CTX = AegisContext(
    {
        "trip": ["LIS", 3, 2.5, None, True],
        "card": Secret("4242"),
        "pax": {"pin": Secret("1"), "név": 'Zoë "Z"'},
    },
    deadline=12.25,
).for_step("r1", 0)
DECLINED = ErrorInfo("ValueError", 'Card "Declined"!\n')
REFUSED_REPORT = dataclasses.replace(REPORT, cause=ErrorInfo("ToolTimeoutError", "too slow", refused=True))

# Each event type as 0.1.0 stored it, byte for byte (written by its generated encoders, which gave
# exactly the json module's text): journals on users' disks hold this text, so the form never drifts.
STORED_BY_0_1_0: list[tuple[SagaEvent, str]] = [
    (
        SagaStarted("r1", 0, 1.5, "trip", ("A", "B\u00e9"), math.inf, AegisContext()),
        (
            '{"v":1,"type":"SagaStarted","run_id":"r1","seq":0,"time":1.5,"saga":"trip","steps":["A"'
            ',"Bé"],"deadline":null,"context":{"metadata":{},"deadline":null,"run_id":null,"step":null}}'
        ),
    ),
    (
        SagaStarted("r1", 0, 1.5, "trip", ("A", "B"), 12.25, CTX),
        (
            '{"v":1,"type":"SagaStarted","run_id":"r1","seq":0,"time":1.5,"saga":"trip","steps":["A","B"]'
            ',"deadline":12.25,"context":{"metadata":{"trip":["LIS",3,2.5,null,true],"card":"***"'
            ',"pax":{"pin":"***","név":"Zoë \\"Z\\""}},"secrets":[["card"],["pax","pin"]],"deadline":12.25'
            ',"run_id":"r1","step":0}}'
        ),
    ),
    (
        StepStarted("r1", 1, 2.0, 0, 'A\t"q"\u2603'),
        '{"v":1,"type":"StepStarted","run_id":"r1","seq":1,"time":2.0,"index":0,"step":"A\\t\\"q\\"☃"}',
    ),
    (
        StepSucceeded("r1", 2, 2.5, 0, "A", 0.1 + 0.2, CTX),
        (
            '{"v":1,"type":"StepSucceeded","run_id":"r1","seq":2,"time":2.5,"index":0,"step":"A"'
            ',"duration":0.30000000000000004,"context":{"metadata":{"trip":["LIS",3,2.5,null,true]'
            ',"card":"***","pax":{"pin":"***","név":"Zoë \\"Z\\""}},"secrets":[["card"],["pax","pin"]]'
            ',"deadline":12.25,"run_id":"r1","step":0}}'
        ),
    ),
    (
        StepSucceeded("r1", 2, 1e-7, 1, "B", 1e22, AegisContext().for_step("r1", 1)),
        (
            '{"v":1,"type":"StepSucceeded","run_id":"r1","seq":2,"time":1e-07,"index":1,"step":"B"'
            ',"duration":1e+22,"context":{"metadata":{},"deadline":null,"run_id":"r1","step":1}}'
        ),
    ),
    (
        StepFailed("r1", 3, 3.0, 1, "B", 0.25, FailureKind.CANCELLED, DECLINED),
        (
            '{"v":1,"type":"StepFailed","run_id":"r1","seq":3,"time":3.0,"index":1,"step":"B"'
            ',"duration":0.25,"kind":"cancelled","error":{"type":"ValueError"'
            ',"message":"Card \\"Declined\\"!\\n"}}'
        ),
    ),
    (
        StepTimedOut("r1", 3, 3.0, 1, "B", 0.25, 0.2, ErrorInfo("ToolError", "taken", refused=True)),
        (
            '{"v":1,"type":"StepTimedOut","run_id":"r1","seq":3,"time":3.0,"index":1,"step":"B"'
            ',"duration":0.25,"budget":0.2,"error":{"type":"ToolError","message":"taken","refused":true}}'
        ),
    ),
    (
        CompensationStarted("r1", 4, 3.5, 0, "A", 1),
        (
            '{"v":1,"type":"CompensationStarted","run_id":"r1","seq":4,"time":3.5,"index":0,"step":"A"'
            ',"attempt":1}'
        ),
    ),
    (
        CompensationFailed("r1", 5, 3.75, 0, "A", 1, 0.1, DECLINED, True),
        (
            '{"v":1,"type":"CompensationFailed","run_id":"r1","seq":5,"time":3.75,"index":0,"step":"A"'
            ',"attempt":1,"duration":0.1,"error":{"type":"ValueError","message":"Card \\"Declined\\"!\\n"}'
            ',"will_retry":true}'
        ),
    ),
    (
        CompensationSucceeded("r1", 6, 4.0, 0, "A", 2, 0.125),
        (
            '{"v":1,"type":"CompensationSucceeded","run_id":"r1","seq":6,"time":4.0,"index":0,"step":"A"'
            ',"attempt":2,"duration":0.125}'
        ),
    ),
    (
        SagaCommitted("r1", 7, 5.0, "trip", 3.5, CTX),
        (
            '{"v":1,"type":"SagaCommitted","run_id":"r1","seq":7,"time":5.0,"saga":"trip","duration":3.5'
            ',"context":{"metadata":{"trip":["LIS",3,2.5,null,true],"card":"***","pax":{"pin":"***"'
            ',"név":"Zoë \\"Z\\""}},"secrets":[["card"],["pax","pin"]],"deadline":12.25,"run_id":"r1"'
            ',"step":0}}'
        ),
    ),
    (
        SagaRolledBackEvent("r1", 7, 5.0, "trip", 3.5, REFUSED_REPORT),
        (
            '{"v":1,"type":"SagaCompensated","run_id":"r1","seq":7,"time":5.0,"saga":"trip"'
            ',"duration":3.5,"report":{"run_id":"r1","saga":"trip","status":"stuck","steps":["A","B"]'
            ',"succeeded":[{"index":0,"name":"A"}],"failed_step":{"index":1,"name":"B"}'
            ',"failure_kind":"timeout","cause":{"type":"ToolTimeoutError","message":"too slow"'
            ',"refused":true},"compensated":[],"compensation_failures":[{"step":{"index":0,"name":"A"}'
            ',"attempts":3,"error":{"type":"OSError","message":"down"}}]}}'
        ),
    ),
    (
        SagaStuck("r1", 7, 5.0, "trip", 3.5, REFUSED_REPORT),
        (
            '{"v":1,"type":"SagaStuck","run_id":"r1","seq":7,"time":5.0,"saga":"trip","duration":3.5'
            ',"report":{"run_id":"r1","saga":"trip","status":"stuck","steps":["A","B"]'
            ',"succeeded":[{"index":0,"name":"A"}],"failed_step":{"index":1,"name":"B"}'
            ',"failure_kind":"timeout","cause":{"type":"ToolTimeoutError","message":"too slow"'
            ',"refused":true},"compensated":[],"compensation_failures":[{"step":{"index":0,"name":"A"}'
            ',"attempts":3,"error":{"type":"OSError","message":"down"}}]}}'
        ),
    ),
]


@pytest.mark.parametrize(("event", "text"), STORED_BY_0_1_0)
def test_every_event_is_stored_as_0_1_0_stored_it(event: SagaEvent, text: str) -> None:
    assert encode_event(event) == text
    assert encode_event(decode_event(text)) == text  # what is read back is written back the same


NOTHING_UNDONE = (
    '{"v":1,"type":"CompensationSucceeded","run_id":"r1","seq":6,"time":4.0,"index":0,"step":"A"'
    ',"attempt":1,"duration":0.125,"nothing_to_undo":true}'
)


def test_a_compensation_that_found_nothing_to_undo_is_stored_with_the_flag_and_read_back() -> None:
    event = CompensationSucceeded("r1", 6, 4.0, 0, "A", 1, 0.125, nothing_to_undo=True)
    assert encode_event(event) == NOTHING_UNDONE
    assert decode_event(NOTHING_UNDONE) == event


def test_an_undone_compensation_is_stored_without_the_flag_as_0_1_0_stored_it() -> None:
    # Left out while false, so 0.1.0 (which refuses unknown fields) reads it, and absent reads as false.
    event = CompensationSucceeded("r1", 6, 4.0, 0, "A", 1, 0.125)
    text = encode_event(event)
    assert "nothing_to_undo" not in text
    assert decode_event(text) == event  # whose nothing_to_undo is False
    flagged_false = text[:-1] + ',"nothing_to_undo":false}'
    assert decode_event(flagged_false) == event
    assert encode_event(decode_event(flagged_false)) == text


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_time_that_json_cannot_hold_is_refused_as_by_the_json_module(bad: float) -> None:
    event = StepStarted("r1", 1, bad, 0, "A")
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        dumps(event_to_json(event))
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        encode_event(event)
