"""One step of a saga, two forms: the live `StepSpec` the engine runs, and the `StepRecord` with one JSON
form that crosses into the journal's run row and into a Temporal plan alike, and reads what 0.1.0 wrote."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from aegis_nb import AegisContext, RetryPolicy, WorkflowEngine
from aegis_nb.saga.definition import StepSpec, normalize_saga
from aegis_nb.saga.durable import SqliteJournal
from aegis_nb.saga.durable.codec import RecordError
from aegis_nb.saga.durable.locator import LocatorKind, StepLocator, StepResolver
from aegis_nb.saga.durable.steprecord import StepRecord
from aegis_nb.temporal.plan import plan_steps
from tests.golden.schema_1_steps import BookHotel, Pay, PaymentClient

PATIENT = RetryPolicy(attempts=2, initial_delay=0.0)
HOTEL = StepLocator(LocatorKind.CLASS, "tests.golden.schema_1_steps:BookHotel", {"city": "Oslo", "nights": 2})
RECORD = StepRecord(2, "BookHotel", HOTEL, ("ritz",), {"rooms": 1}, 5.0, PATIENT, True)
RECORD_JSON = {
    "index": 2,
    "name": "BookHotel",
    "locator": {
        "by": "class",
        "target": "tests.golden.schema_1_steps:BookHotel",
        "state": {"city": "Oslo", "nights": 2},
    },
    "args": ["ritz"],
    "kwargs": {"rooms": 1},
    "timeout": 5.0,
    "retry": {"attempts": 2, "initial_delay": 0.0, "multiplier": 2.0, "max_delay": 5.0},
    "in_doubt": True,
}


def test_a_spec_is_a_frozen_record_read_by_name_not_a_tuple() -> None:
    (spec,) = normalize_saga([(Pay(PaymentClient()), ("card-1",), {"amount": 120})])
    assert tuple not in type(spec).__mro__  # nothing unpacks it by position, or shadows tuple.index
    assert (spec.index, spec.name, spec.args, dict(spec.kwargs), spec.timeout, spec.retry, spec.in_doubt) == (
        0,
        "Pay",
        ("card-1",),
        {"amount": 120},
        5.0,
        RetryPolicy(attempts=2, initial_delay=0.0),
        False,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "Other"  # type: ignore[misc]


def test_a_record_is_its_spec_with_the_step_named_by_its_locator() -> None:
    spec = StepSpec(2, "BookHotel", BookHotel("Oslo", 2), ("ritz",), {"rooms": 1}, 5.0, PATIENT, True)
    assert StepRecord.of(spec, HOTEL) == RECORD


def test_a_record_round_trips_through_its_one_json_form() -> None:
    assert RECORD.to_json() == RECORD_JSON
    assert StepRecord.from_json(json.loads(json.dumps(RECORD_JSON)), 2) == RECORD


def test_records_in_0_1_0_forms_still_read() -> None:
    journal_row = {
        "name": "BookHotel",
        "locator": RECORD_JSON["locator"],
        "args": [],
        "kwargs": {},
        "in_doubt": True,
    }
    plan_step = {**RECORD_JSON, "step": RECORD_JSON["locator"]}
    del plan_step["locator"]
    assert StepRecord.from_json(journal_row, 2) == StepRecord(2, "BookHotel", HOTEL, (), {}, None, None, True)
    assert StepRecord.from_json(plan_step, 2) == RECORD


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"index": 3}, "step 2 is malformed"),
        ({"kwargs": {"rooms": 1, "1": 2}, "args": "ritz"}, "step 2 is malformed"),
        ({"timeout": 0}, "step 2 timeout must be positive seconds or null, got 0"),
        ({"retry": {"attempts": 0}}, "malformed retry policy {'attempts': 0}"),
        ({"locator": {"by": "pickle", "target": "os:system"}}, "unknown step locator kind 'pickle'"),
    ],
)
def test_a_malformed_record_is_a_record_error_saying_what(change: dict[str, object], problem: str) -> None:
    with pytest.raises(RecordError) as raised:
        StepRecord.from_json({**RECORD_JSON, **change}, 2)
    assert str(raised.value).startswith(problem)


@pytest.mark.anyio
async def test_the_journal_and_a_temporal_plan_write_the_same_records(tmp_path: Path) -> None:
    pay = Pay(PaymentClient())
    saga = [(pay, ("card-1",), {"amount": 120}), BookHotel("Oslo", 2)]
    path = tmp_path / "journal.db"
    async with SqliteJournal(path, steps={"payments": pay}) as journal:
        await WorkflowEngine(journal=journal).run_saga(saga, AegisContext(), run_id="r1")
    with sqlite3.connect(path) as db:
        (row,) = db.execute("SELECT steps FROM runs").fetchone()
    pay_json = {
        "index": 0,
        "name": "Pay",
        "locator": {"by": "name", "target": "payments"},
        "args": ["card-1"],
        "kwargs": {"amount": 120},
        "timeout": 5.0,
        "retry": {"attempts": 2, "initial_delay": 0.0, "multiplier": 2.0, "max_delay": 5.0},
        "in_doubt": False,
    }
    hotel_json = {**RECORD_JSON, "index": 1, "args": [], "kwargs": {}, "timeout": None, "retry": None}
    assert json.loads(row) == {"v": 1, "steps": [pay_json, hotel_json]}
    planned = plan_steps("trip", normalize_saga(saga), StepResolver({"payments": pay}))
    assert [record.to_json() for record in planned] == [pay_json, hotel_json]
