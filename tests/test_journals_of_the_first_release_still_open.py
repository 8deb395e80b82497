"""Journals written by 0.1.0 (schema 1) still open: every kind of record they hold reads back whole.

``tests/golden/journal-schema-1.db`` was written by the last schema-1 code (see
``tests/golden/write_first_release_journal.py``) and is never rewritten: it stands for the journals on users'
disks. It holds five runs of one saga whose steps are found by name, by object and by class, with
arguments; every event type; contexts with secrets in nested places, with and without deadlines;
errors with and without the ``refused`` flag; reports of every final status; a recovered run; and a
run left unfinished, which this code must still plan and finish.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from aegis_nb import (
    AegisContext,
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    Secret,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
    WorkflowEngine,
)
from aegis_nb.kernel.report import CompensationFailure, ErrorInfo, FailureKind, SagaReport, SagaStatus
from aegis_nb.saga.durable import SqliteJournal, plan_recovery, read_run, read_runs
from aegis_nb.saga.durable.locator import LocatorKind, StepLocator
from aegis_nb.saga.durable.steprecord import StepRecord
from tests.golden.schema_1_steps import Pay, PaymentClient

GOLDEN = Path(__file__).parent / "golden" / "journal-schema-1.db"
SAGA = "trip"
STEPS = ("Pay", "reserve_seat", "BookHotel")
TRAVELLER = {
    "traveller": "Ada",
    "card": Secret("***"),
    "cards": [Secret("***"), "visa"],
    "profile": {"pin": Secret("***"), "tier": "gold"},
}
REFUSED = ErrorInfo("ToolError", "seat 12A is taken", refused=True)
DECLINED = ErrorInfo("RuntimeError", "payments service unavailable")
TIMED_OUT = ErrorInfo("ToolTimeoutError", "step 'BookHotel' ran past its deadline (0.5 s)")
CANCELLED = ErrorInfo("CancelledError", "cancelled")
CRASH = ErrorInfo("ProcessCrashed", "the process running the saga stopped before the run finished")


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    """A private copy: reading may add files beside the journal, and recovery writes to it."""
    copy = tmp_path / "journal-schema-1.db"
    shutil.copyfile(GOLDEN, copy)
    copy.chmod(0o600)
    return copy


# -- what each record should decode to --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Context:
    """What a decoded context shows: compared through its public fields, secrets' places included."""

    metadata: Mapping[str, Any]  # a decoded FrozenDict equals the plain dict it freezes to
    deadline: float
    run_id: str | None
    step: int | None


def context(run_id: str | None, step: int | None, deadline: float = math.inf, **added: Any) -> Context:
    return Context({**TRAVELLER, **added}, deadline, run_id, step)


def seen(ctx: AegisContext) -> Context:
    """A decoded context as a `Context`."""
    return Context(ctx.metadata, ctx.deadline, ctx.run_id, ctx.step_index)


ADDED_SINCE = frozenset({"group"})  # StepEvent.group: parallel groups, after 0.1.0


def shown(event: SagaEvent) -> tuple[str, dict[str, Any]]:
    """An event as its type and fields, its context (if any) as a `Context`.

    Fields added since the first release must read back as their defaults, and are left out.
    """
    fields = {}
    for field in dataclasses.fields(event):
        value = getattr(event, field.name)
        if field.name in ADDED_SINCE:
            assert value == field.default, (field.name, value)
            continue
        fields[field.name] = seen(value) if isinstance(value, AegisContext) else value
    return type(event).__name__, fields


class Expected:
    """One run's expected events, with consecutive sequence numbers and times 10 s apart."""

    def __init__(self, run_id: str) -> None:
        self.run_id, self.events = run_id, list[tuple[str, dict[str, Any]]]()

    def add(self, event_type: type[SagaEvent], /, **fields: Any) -> None:
        seq = len(self.events)
        header = {"run_id": self.run_id, "seq": seq, "time": 100.0 + 10 * seq}
        self.events.append((event_type.__name__, {**header, **fields}))

    def start(self, deadline: float = math.inf) -> None:
        self.add(
            SagaStarted, saga=SAGA, steps=STEPS, deadline=deadline, context=context(None, None, deadline)
        )

    def succeed(self, index: int, deadline: float = math.inf) -> None:
        self.add(StepStarted, index=index, step=STEPS[index])
        snapshot = context(self.run_id, index, deadline, done=index)
        self.add(StepSucceeded, index=index, step=STEPS[index], duration=1.5, context=snapshot)

    def undo(self, index: int, attempt: int = 1) -> None:
        self.add(CompensationStarted, index=index, step=STEPS[index], attempt=attempt)
        # Schema 1 as 0.1.0 wrote it has no nothing_to_undo: absent, it reads as false (undone).
        self.add(
            CompensationSucceeded,
            index=index,
            step=STEPS[index],
            attempt=attempt,
            duration=0.25,
            nothing_to_undo=False,
        )

    def fail_undo(self, index: int, attempt: int, will_retry: bool) -> None:
        self.add(CompensationStarted, index=index, step=STEPS[index], attempt=attempt)
        self.add(
            CompensationFailed,
            index=index,
            step=STEPS[index],
            attempt=attempt,
            duration=0.75,
            error=DECLINED,
            will_retry=will_retry,
        )

    def report(self, status: SagaStatus, **fields: Any) -> SagaReport:
        return SagaReport(run_id=self.run_id, saga=SAGA, status=status, steps=STEPS, **fields)


def committed() -> Expected:
    run = Expected("r1-committed")
    run.start(1000.5)
    for index in range(3):
        run.succeed(index, 1000.5)
    run.add(SagaCommitted, saga=SAGA, duration=60.0, context=context("r1-committed", 2, 1000.5, done=2))
    return run


def rolled_back() -> Expected:
    run = Expected("r2-rolled-back")
    run.start()
    run.succeed(0)
    run.add(StepStarted, index=1, step="reserve_seat")
    run.add(StepFailed, index=1, step="reserve_seat", duration=0.5, kind=FailureKind.ERROR, error=REFUSED)
    run.fail_undo(0, attempt=1, will_retry=True)
    run.undo(0, attempt=2)
    report = run.report(
        SagaStatus.ROLLED_BACK,
        succeeded=("Pay",),
        failed_step="reserve_seat",
        failure_kind=FailureKind.ERROR,
        cause=REFUSED,
        compensated=("Pay",),
    )
    run.add(SagaRolledBackEvent, saga=SAGA, duration=90.0, report=report)
    return run


def stuck() -> Expected:
    run = Expected("r3-stuck")
    run.start(2000.0)
    run.succeed(0, 2000.0)
    run.succeed(1, 2000.0)
    run.add(StepStarted, index=2, step="BookHotel")
    run.add(StepTimedOut, index=2, step="BookHotel", duration=0.5, budget=0.5, error=TIMED_OUT)
    run.undo(2)
    run.fail_undo(1, attempt=1, will_retry=False)
    run.undo(0)
    report = run.report(
        SagaStatus.STUCK,
        succeeded=("Pay", "reserve_seat"),
        failed_step="BookHotel",
        failure_kind=FailureKind.TIMEOUT,
        cause=TIMED_OUT,
        compensated=("BookHotel", "Pay"),
        compensation_failures=(CompensationFailure("reserve_seat", 1, DECLINED),),
    )
    run.add(SagaStuck, saga=SAGA, duration=120.0, report=report)
    return run


def recovered() -> Expected:
    run = Expected("r4-recovered")
    run.start()
    run.succeed(0)
    run.add(StepStarted, index=1, step="reserve_seat")
    run.add(
        StepFailed, index=1, step="reserve_seat", duration=2.0, kind=FailureKind.CANCELLED, error=CANCELLED
    )
    run.add(StepFailed, index=1, step="reserve_seat", duration=0.0, kind=FailureKind.INTERRUPTED, error=CRASH)
    run.undo(0)
    report = run.report(
        SagaStatus.ROLLED_BACK,
        succeeded=("Pay",),
        failed_step="reserve_seat",
        failure_kind=FailureKind.CANCELLED,
        cause=CANCELLED,
        compensated=("Pay",),
    )
    run.add(SagaRolledBackEvent, saga=SAGA, duration=30.0, report=report)
    return run


def unfinished() -> Expected:
    run = Expected("r5-unfinished")
    run.start()
    run.succeed(0)
    run.succeed(1)
    run.add(StepStarted, index=2, step="BookHotel")
    return run


RUNS = (committed(), rolled_back(), stuck(), recovered(), unfinished())


# -- the tests -----------------------------------------------------------------------------------------


def test_the_listing_shows_every_run_with_its_status_and_recoveries(golden: Path) -> None:
    listed = [(run.run_id, run.saga, run.status, run.events, run.recoveries) for run in read_runs(golden)]
    assert listed == [
        ("r1-committed", SAGA, SagaStatus.COMMITTED, 8, 0),
        ("r2-rolled-back", SAGA, SagaStatus.ROLLED_BACK, 10, 0),
        ("r3-stuck", SAGA, SagaStatus.STUCK, 14, 0),
        ("r4-recovered", SAGA, SagaStatus.ROLLED_BACK, 9, 1),
        ("r5-unfinished", SAGA, SagaStatus.RUNNING, 6, 0),
    ]


def test_every_run_row_reads_as_step_records_of_each_locator_kind(golden: Path) -> None:
    # Schema 1 left a step's index to its place and kept no options: they read as None, and
    # recovery takes them from the rebuilt step.
    steps = (
        StepRecord(
            0,
            "Pay",
            StepLocator(LocatorKind.NAME, "payments", {}),
            ("card-1",),
            {"amount": 120},
            None,
            None,
            False,
        ),
        StepRecord(
            1,
            "reserve_seat",
            StepLocator(LocatorKind.OBJECT, "tests.golden.schema_1_steps:reserve_seat", {}),
            ("12A",),
            {},
            None,
            None,
            False,
        ),
        StepRecord(
            2,
            "BookHotel",
            StepLocator(
                LocatorKind.CLASS, "tests.golden.schema_1_steps:BookHotel", {"city": "Oslo", "nights": 2}
            ),
            (),
            {},
            None,
            None,
            True,
        ),
    )
    assert [read_run(golden, run.run_id).steps for run in RUNS] == [steps] * len(RUNS)


@pytest.mark.parametrize("expected", RUNS, ids=[run.run_id for run in RUNS])
def test_every_event_decodes_whole(golden: Path, expected: Expected) -> None:
    run = read_run(golden, expected.run_id)
    assert (run.run_id, run.saga) == (expected.run_id, SAGA)
    assert [shown(event) for event in run.events] == expected.events


def test_the_unfinished_run_is_planned_from_its_schema_1_records(golden: Path) -> None:
    plan = plan_recovery(read_run(golden, "r5-unfinished"))
    owed = [(step.name, seen(snapshot)) for step, snapshot in plan.owed]
    assert owed == [
        # In flight and in doubt: undone with the context it was given, stamped with its own key.
        ("BookHotel", context("r5-unfinished", 2, done=1)),
        ("reserve_seat", context("r5-unfinished", 1, done=1)),
        ("Pay", context("r5-unfinished", 0, done=0)),
    ]
    assert (plan.steps, plan.succeeded, plan.interrupted, plan.failed) == (
        STEPS,
        ("Pay", "reserve_seat"),
        "BookHotel",
        "BookHotel",
    )
    assert (plan.kind, plan.cause, plan.compensated, plan.given_up) == (
        FailureKind.INTERRUPTED,
        CRASH,
        (),
        (),
    )


@pytest.mark.anyio
async def test_the_unfinished_run_is_recovered_with_steps_of_every_locator_kind(golden: Path) -> None:
    journal = SqliteJournal(golden, steps={"payments": Pay(PaymentClient())}, allow_modules=["tests.golden"])
    async with journal:
        (run,) = await WorkflowEngine(journal=journal).recover()
    report = SagaReport(
        run_id="r5-unfinished",
        saga=SAGA,
        status=SagaStatus.ROLLED_BACK,
        steps=STEPS,
        succeeded=("Pay", "reserve_seat"),
        failed_step="BookHotel",
        failure_kind=FailureKind.INTERRUPTED,
        cause=CRASH,
        compensated=("BookHotel", "reserve_seat", "Pay"),
    )
    assert run.report == report
    untimed = [
        (name, _untimed(fields)) for name, fields in map(shown, read_run(golden, "r5-unfinished").events)
    ]
    assert untimed[:6] == [(name, _untimed(fields)) for name, fields in unfinished().events]
    assert untimed[6:] == [
        ("StepFailed", {"index": 2, "step": "BookHotel", "kind": FailureKind.INTERRUPTED, "error": CRASH}),
        ("CompensationStarted", {"index": 2, "step": "BookHotel", "attempt": 1}),
        ("CompensationSucceeded", {"index": 2, "step": "BookHotel", "attempt": 1, "nothing_to_undo": False}),
        ("CompensationStarted", {"index": 1, "step": "reserve_seat", "attempt": 1}),
        (
            "CompensationSucceeded",
            {"index": 1, "step": "reserve_seat", "attempt": 1, "nothing_to_undo": False},
        ),
        ("CompensationStarted", {"index": 0, "step": "Pay", "attempt": 1}),
        ("CompensationSucceeded", {"index": 0, "step": "Pay", "attempt": 1, "nothing_to_undo": False}),
        ("SagaRolledBackEvent", {"saga": SAGA, "report": report}),
    ]
    assert [run.status for run in read_runs(golden)][-1] is SagaStatus.ROLLED_BACK


def _untimed(fields: dict[str, Any]) -> dict[str, Any]:
    """An event's fields without the clock's readings (recovery runs on this test's clock)."""
    return {
        name: value for name, value in fields.items() if name not in ("run_id", "seq", "time", "duration")
    }
