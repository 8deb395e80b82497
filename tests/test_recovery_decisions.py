"""What recovery decides to undo, and with which step objects, against a real SQLite journal.

Two decisions must match the live run: an in-doubt step whose tool refused (a `ToolError`, or a
subclass) is not undone, since the tool said it did not act; and a step is compensated with the object
that ran it or one holding the same state, never with another registered step that merely shares its
class and name. Recovering beside live runs never undoes a live or committed run, and two recoveries
at once undo each crashed run exactly once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from aegis_nb import AegisContext, RetryPolicy, WorkflowEngine
from aegis_nb.kernel.errors import ToolError
from aegis_nb.kernel.report import (
    CompensationFailure,
    ErrorInfo,
    FailureKind,
    SagaReport,
    SagaStatus,
)
from aegis_nb.saga.durable import (
    SqliteJournal,
    StepNotRecoverable,
    plan_recovery,
    read_run,
    read_runs,
)
from aegis_nb.saga.durable.codec import RecordError, decode_event
from aegis_nb.saga.durable.eventtext import encode_event
from aegis_nb.saga.events import SagaCommitted, SagaRolledBackEvent, StepFailed
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.testing import outline
from tests.durable_support import Act, Crash, CrashingJournal, World

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(attempts=2, initial_delay=0.0)
RUN = "run1"


class CardDeclined(ToolError):
    """A subclass of ToolError: still the tool's own answer that it did not act."""


class Charge:
    """An in-doubt step whose execute raises `error`; its undos are counted in `world`."""

    def __init__(self, world: World, error: Exception) -> None:
        self.world = world
        self.error = error
        self.in_doubt = True

    async def execute(self, ctx: AegisContext) -> AegisContext:
        raise self.error

    async def compensate(self, ctx: AegisContext) -> None:
        assert ctx.idempotency_key is not None
        self.world.undo(ctx.idempotency_key)


# -- bug 1: an in-doubt step refused by its tool is not undone after a crash either ---------------


async def crash_then_recover(path: Path, error: Exception) -> tuple[World, tuple[str, ...]]:
    """Book succeeds, Charge fails with `error`, the process dies at the first compensation start.

    Returns the world and what recovery undid.
    """
    world = World()
    steps = [Act(world, "Book"), Charge(world, error)]
    # Events: 0 SagaStarted, 1-2 Book, 3 StepStarted Charge, 4 StepFailed Charge, crash at 5: the
    # first CompensationStarted (Charge's if the live run owes it, else Book's).
    journal = CrashingJournal(SqliteJournal(path, steps=steps), 5)
    with pytest.raises(Crash):
        await WorkflowEngine(journal=journal, compensation_retry=FAST).run_saga(steps, run_id=RUN)
    assert world.undo_calls == {}
    async with SqliteJournal(path, steps=steps) as restarted:
        (run,) = await WorkflowEngine(journal=restarted, compensation_retry=FAST).recover()
    assert run.report.status is SagaStatus.ROLLED_BACK
    return world, run.report.compensated


@pytest.mark.parametrize(
    "error", [ToolError("charge_card", "Card Declined!"), CardDeclined("charge_card", "Card Declined!")]
)
async def test_recovery_does_not_undo_an_in_doubt_step_its_tool_refused(
    tmp_path: Path, error: ToolError
) -> None:
    world, compensated = await crash_then_recover(tmp_path / "j.db", error)
    assert compensated == ("Book",)
    assert world.undo_calls == {f"{RUN}/0": 1}  # Charge (RUN/1) was never undone


async def test_recovery_still_undoes_an_in_doubt_step_that_failed_any_other_way(tmp_path: Path) -> None:
    world, compensated = await crash_then_recover(tmp_path / "j.db", RuntimeError("connection reset"))
    assert compensated == ("Charge", "Book")
    assert world.undo_calls == {f"{RUN}/0": 1, f"{RUN}/1": 1}


async def test_the_refusal_is_journaled_and_the_plan_owes_nothing_for_it(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    world = World()
    steps = [Act(world, "Book"), Charge(world, CardDeclined("charge_card", "Card Declined!"))]
    journal = CrashingJournal(SqliteJournal(path, steps=steps), 5)
    with pytest.raises(Crash):
        await WorkflowEngine(journal=journal).run_saga(steps, run_id=RUN)
    plan = plan_recovery(read_run(path, RUN))
    assert plan.failed == "Charge"
    assert plan.cause == ErrorInfo("CardDeclined", "Card Declined!", refused=True)
    assert [record.name for record, _ in plan.owed] == ["Book"]


def test_error_info_records_whether_the_tool_refused() -> None:
    assert ErrorInfo.from_exception(ToolError("t", "no")).refused
    assert ErrorInfo.from_exception(CardDeclined("t", "no")).refused
    assert not ErrorInfo.from_exception(RuntimeError("no")).refused
    assert ErrorInfo.from_exception(CardDeclined("t", "pin 1234"), ["1234"]) == ErrorInfo(
        "CardDeclined", "pin ***", refused=True
    )


def test_the_flag_survives_the_journal_but_not_the_public_report_json() -> None:
    refused = ErrorInfo("CardDeclined", "Card Declined!", refused=True)
    report = SagaReport(
        run_id=RUN,
        saga="trip",
        status=SagaStatus.STUCK,
        steps=("Book", "Charge"),
        succeeded=("Book",),
        failed_step="Charge",
        failure_kind=FailureKind.ERROR,
        cause=refused,
        compensation_failures=(CompensationFailure("Book", 2, refused),),
    )
    failed = StepFailed(RUN, 4, 1.0, 1, "Charge", 0.1, FailureKind.ERROR, refused)
    ended = SagaRolledBackEvent(RUN, 7, 2.0, "trip", 1.5, report)
    for event in (failed, ended):
        assert decode_event(encode_event(event)) == event
    assert json.loads(encode_event(failed))["error"] == {
        "type": "CardDeclined",
        "message": "Card Declined!",
        "refused": True,
    }
    # MCP clients see the report's JSON as it always was.
    public = report.to_json()
    assert public["cause"] == {"type": "CardDeclined", "message": "Card Declined!"}
    assert public["compensation_failures"] == [
        {
            "step": {"index": 0, "name": "Book"},
            "attempts": 2,
            "error": {"type": "CardDeclined", "message": "Card Declined!"},
        }
    ]


def test_an_error_journaled_without_the_flag_reads_as_not_refused() -> None:
    plain = StepFailed(RUN, 4, 1.0, 1, "Charge", 0.1, FailureKind.ERROR, ErrorInfo("E", "m"))
    text = encode_event(plain)
    assert '"refused"' not in text  # records without a refusal are written as before the flag
    decoded = decode_event(text)
    assert isinstance(decoded, StepFailed)
    assert decoded.error == ErrorInfo("E", "m", refused=False)
    malformed = text.replace('"message":"m"', '"message":"m","refused":1')
    with pytest.raises(RecordError, match="error refused must be true or false, got 1"):
        decode_event(malformed)


# -- bug 2: a step is never compensated with another registered step of the same name ------------


@dataclass
class Cancellations:
    calls: list[tuple[str, str]]


class Hotel:
    """Stands for a client or connection: the reason a step gets registered."""

    def __init__(self, name: str, log: Cancellations) -> None:
        self.name = name
        self.log = log

    async def cancel(self, key: str) -> None:
        self.log.calls.append((self.name, key))


class Reserve:
    def __init__(self, hotel: Hotel) -> None:
        self.hotel = hotel

    async def execute(self, ctx: AegisContext) -> AegisContext:
        return ctx.with_metadata({self.hotel.name: "booked"})

    async def compensate(self, ctx: AegisContext) -> None:
        assert ctx.idempotency_key is not None
        await self.hotel.cancel(ctx.idempotency_key)


class Fail:
    async def execute(self, ctx: AegisContext) -> None:
        raise RuntimeError("sold out")

    async def compensate(self, ctx: AegisContext) -> None: ...


@dataclass
class Hold:
    """Rebuildable from its attributes (``Hold(seats=...)``), so it can be located by class."""

    seats: int

    async def execute(self, ctx: AegisContext) -> None: ...

    async def compensate(self, ctx: AegisContext) -> None:
        RELEASED.append(self.seats)


RELEASED: list[int] = []


async def test_two_objects_one_registered_name_would_rebuild_are_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    log = Cancellations([])
    ritz, hilton = Reserve(Hotel("Ritz", log)), Reserve(Hotel("Hilton", log))
    async with SqliteJournal(tmp_path / "j.db", steps={"Reserve": ritz}) as journal:
        with pytest.raises(StepNotRecoverable) as caught:
            await WorkflowEngine(journal=journal).run_saga([ritz, hilton], run_id=RUN)
        assert await journal.runs() == ()
    assert str(caught.value) == (
        "saga 'saga': steps 'Reserve#1' and 'Reserve#2' are two objects that recovery would both "
        "rebuild as the step registered as 'Reserve'; register each under a key of its own: "
        "SqliteJournal(path, steps={'Reserve': ..., 'another key': ...})"
    )
    assert log.calls == []


async def test_each_registered_instance_is_compensated_with_itself(tmp_path: Path) -> None:
    path, log = tmp_path / "j.db", Cancellations([])
    ritz, hilton = Reserve(Hotel("Ritz", log)), Reserve(Hotel("Hilton", log))
    registered = {"Reserve": ritz, "Reserve at the Hilton": hilton, "Fail": Fail()}
    # Events: 0 SagaStarted, 1-2 Ritz, 3-4 Hilton, 5 StepStarted Fail, crash at 6 (its failure).
    journal = CrashingJournal(SqliteJournal(path, steps=registered), 6)
    with pytest.raises(Crash):
        await WorkflowEngine(journal=journal).run_saga([ritz, hilton, registered["Fail"]], run_id=RUN)
    async with SqliteJournal(path, steps=registered) as restarted:
        (run,) = await WorkflowEngine(journal=restarted).recover()
    assert run.report.status is SagaStatus.ROLLED_BACK
    assert log.calls == [("Hilton", f"{RUN}/1"), ("Ritz", f"{RUN}/0")]


async def test_one_object_used_twice_and_a_fresh_instance_are_still_found_by_name(tmp_path: Path) -> None:
    path, log = tmp_path / "j.db", Cancellations([])
    registered = {"Reserve": Reserve(Hotel("Ritz", log)), "Fail": Fail()}
    fresh = Reserve(Hotel("Ritz", log))  # a new client to the same hotel, as a restarted app makes
    # Events: 0 SagaStarted, 1-2 and 3-4 Reserve, 5 StepStarted Fail, crash at 6 (its failure).
    journal = CrashingJournal(SqliteJournal(path, steps=registered), 6)
    with pytest.raises(Crash):
        await WorkflowEngine(journal=journal).run_saga([fresh, fresh, registered["Fail"]], run_id=RUN)
    async with SqliteJournal(path, steps=registered) as restarted:
        (run,) = await WorkflowEngine(journal=restarted).recover()
    assert run.report.compensated == ("Reserve#2", "Reserve#1")
    assert log.calls == [("Ritz", f"{RUN}/1"), ("Ritz", f"{RUN}/0")]


# -- recovery beside live runs and beside another recovery -----------------------------------------


def statuses(path: Path) -> dict[SagaStatus, int]:
    counts: dict[SagaStatus, int] = {}
    for info in read_runs(path):
        counts[info.status] = counts.get(info.status, 0) + 1
    return counts


# Regression guard: a recovery beside live runs never undoes a live or committed run.
@pytest.mark.anyio
async def test_recovering_while_sagas_commit_never_undoes_a_live_or_committed_run(tmp_path: Path) -> None:
    # A recovery read a run as unfinished, the run then committed, and the recovery undid it: the
    # journal showed SagaCommitted followed by compensations, while the caller had its success.
    path = tmp_path / "runs.db"
    world = World()
    steps = [Act(world, "A"), Act(world, "B")]
    recovered: list[SagaRun] = []
    async with SqliteJournal(path, steps=steps) as journal:
        engine = WorkflowEngine(journal=journal, compensation_retry=FAST)

        async def recover_again_and_again() -> None:
            for _ in range(50):
                recovered.extend(await engine.recover())

        async with anyio.create_task_group() as group:
            group.start_soon(recover_again_and_again)
            for _ in range(50):
                group.start_soon(engine.execute_saga, [(s, (), {}) for s in steps], AegisContext())
    assert recovered == []
    assert statuses(path) == {SagaStatus.COMMITTED: 50}
    assert (len(world.live), world.undo_calls) == (100, {})
    for info in read_runs(path):
        events = read_run(path, info.run_id).events
        assert isinstance(events[-1], SagaCommitted)


async def crashed_runs(path: Path, world: World, steps: list[Act], count: int) -> None:
    """`count` runs whose process died after their second step succeeded (before the third began)."""
    for number in range(count):
        journal = CrashingJournal(SqliteJournal(path, steps=steps), crash_at=5)
        engine = WorkflowEngine(journal=journal, compensation_retry=FAST)
        with pytest.raises(Crash):
            await engine.run_saga([(s, (), {}) for s in steps], name="trip", run_id=f"run{number:02}")


# Regression guard: two recoveries at once undo each crashed run exactly once.
@pytest.mark.anyio
async def test_two_recoveries_at_once_undo_each_crashed_run_exactly_once(tmp_path: Path) -> None:
    # Both recoveries took every run: each step was undone twice and the second recovery's events
    # collided with the first's (UNIQUE constraint), leaving runs unfinished or the recovery failed.
    path = tmp_path / "runs.db"
    world = World()
    steps = [Act(world, "A"), Act(world, "B"), Act(world, "C")]
    await crashed_runs(path, world, steps, 40)
    results: list[tuple[str, ...]] = []
    async with SqliteJournal(path, steps=steps) as journal:
        engine = WorkflowEngine(journal=journal, compensation_retry=FAST)

        async def recover() -> None:
            results.append(tuple(run.run_id for run in await engine.recover()))

        async with anyio.create_task_group() as group:
            group.start_soon(recover)
            group.start_soon(recover)
    assert sorted(results) == [(), tuple(f"run{n:02}" for n in range(40))]
    keys = {f"run{n:02}/{i}" for n in range(40) for i in (0, 1)}
    assert (world.live, world.undo_calls, world.undos) == ({}, dict.fromkeys(keys, 1), dict.fromkeys(keys, 1))
    assert statuses(path) == {SagaStatus.ROLLED_BACK: 40}
    assert [info.recoveries for info in read_runs(path)] == [1] * 40
    assert [outline(e) for e in read_run(path, "run00").events[5:]] == [
        ("CompensationStarted", "B"),
        ("CompensationSucceeded", "B"),
        ("CompensationStarted", "A"),
        ("CompensationSucceeded", "A"),
        ("SagaRolledBackEvent",),
    ]
