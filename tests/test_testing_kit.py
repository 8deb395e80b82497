"""`aegis_nb.testing`, the kit users test their own steps with: what each piece records and when it crashes.

`CallLog` keeps every call with its context; `RecordingStep` fails, and refuses to be undone, with
the exception its class names; `CrashingJournal` lets the events before its crash point through to
the journal and raises `Crash` from then on. The kit imports the saga layer only, and loads neither
sqlite3 nor the durable journal until one is built.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import aegis_nb.testing
from aegis_nb import RetryPolicy, SagaRolledBack, SagaStatus, SqliteJournal, WorkflowEngine
from aegis_nb.saga.durable import read_run
from aegis_nb.saga.events import StepEvent
from aegis_nb.testing import (
    Call,
    CallLog,
    Crash,
    CrashingJournal,
    EventCapture,
    InjectedFailure,
    Method,
    RecordingStep,
    outline,
)
from tests.test_architecture import imports_of

pytestmark = pytest.mark.anyio


def test_the_kit_imports_the_saga_layer_only_and_loads_no_journal_at_import() -> None:
    path = Path(aegis_nb.testing.__file__)
    layers = {name.split(".")[1] for name in imports_of(path) if name.startswith("aegis_nb.")}
    assert layers <= {"kernel", "saga"}
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, aegis_nb.testing; print(sorted({'sqlite3', "
            "'aegis_nb.saga.durable'} & set(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert loaded == "[]\n"


class Declined(InjectedFailure):
    """What `Card` raises, as a subclass of RecordingStep may choose."""


class Card(RecordingStep):
    failure = Declined


async def test_the_call_log_holds_each_call_with_the_context_the_engine_passed() -> None:
    calls, events = CallLog(), EventCapture()
    saga = [
        RecordingStep(
            "flight", calls, compensation_failures=1, retry=RetryPolicy(attempts=2, initial_delay=0)
        ),
        Card("card", calls, fail="Card Declined!"),
    ]
    run = await WorkflowEngine(sinks=[events]).run_saga(saga, run_id="r")
    assert calls.trail() == [
        ("execute", "flight"),
        ("execute", "card"),
        ("compensate", "flight"),
        ("compensate", "flight"),
    ]
    first, again = calls.contexts("compensate", "flight")
    assert first.to_json() == again.to_json() == {"flight_id": "FLIGHT-0"}
    assert calls.log[0] == Call(Method.EXECUTE, "flight", calls.contexts("execute", "flight")[0])
    assert isinstance(run.error, SagaRolledBack)
    assert type(run.error.__cause__) is Declined
    assert [outline(e) for e in events if isinstance(e, StepEvent) and e.step == "flight"] == [
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationFailed", "flight"),
        ("CompensationStarted", "flight"),
        ("CompensationSucceeded", "flight"),
    ]
    assert run.report.compensation_failures == ()
    assert run.status is SagaStatus.ROLLED_BACK


async def test_a_crashing_journal_writes_the_events_before_its_crash_point_and_then_only_crashes(
    tmp_path: Path,
) -> None:
    calls, path = CallLog(), tmp_path / "runs.db"
    steps = [RecordingStep("flight", calls), RecordingStep("hotel", calls)]
    journal = CrashingJournal(SqliteJournal(path, steps=steps), 3)
    with pytest.raises(Crash):
        await WorkflowEngine(journal=journal).run_saga(steps, run_id="r")
    assert [outline(e) for e in journal.seen] == [
        ("SagaStarted",),
        ("StepStarted", "flight"),
        ("StepSucceeded", "flight"),
    ]
    assert (journal.count, journal.crashed, calls.trail()) == (4, True, [("execute", "flight")])
    with pytest.raises(Crash):
        await journal.append(journal.seen[0])
    assert [outline(e) for e in read_run(path, "r").events] == [outline(e) for e in journal.seen]
