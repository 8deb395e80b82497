"""Writes ``journal-schema-1.db``: every kind of record a schema-1 journal holds, as 0.1.0 wrote them.

Run once, on the code of the last schema-1 release (commit b994940), and committed: the file must not
change when the code does, since it stands for journals already on users' disks::

    git worktree add /tmp/schema-1 b994940
    cp -r tests/golden /tmp/schema-1/tests/
    cd /tmp/schema-1 && python -m tests.golden.write_first_release_journal tests/golden/journal-schema-1.db

Five runs of one three-step saga whose steps are found by name (``payments``), by object
(``reserve_seat``) and by class (``BookHotel``), with arguments: one committed; one rolled back after a
refusal, a compensation retried; one stuck after a timeout, with the in-doubt step compensated; one
cancelled, then left unfinished by a crash and recovered (an ``interrupted`` failure); one left
unfinished mid-step. Contexts hold secrets in nested places, deadlines and none. Times are made up
(round numbers), so the reading test can state every value.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from aegis_nb import (
    CompensationFailed,
    CompensationFailure,
    CompensationStarted,
    CompensationSucceeded,
    ErrorInfo,
    FailureKind,
    SagaCommitted,
    SagaCompensated,
    SagaEvent,
    SagaReport,
    SagaStarted,
    SagaStatus,
    SagaStuck,
    SqliteJournal,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)
from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.definition import normalize_saga
from aegis_nb.saga.durable.codec import context_from_json
from tests.golden.schema_1_steps import BookHotel, Pay, PaymentClient, reserve_seat

SAGA = "trip"
STEPS = ("Pay", "reserve_seat", "BookHotel")
PAY = Pay(PaymentClient())
ENTRIES = [(PAY, ("card-1",), {"amount": 120}), (reserve_seat, ("12A",), {}), BookHotel("Oslo", 2)]

TRAVELLER = {
    "traveller": "Ada",
    "card": "***",
    "cards": ["***", "visa"],
    "profile": {"pin": "***", "tier": "gold"},
}
SECRETS = [["card"], ["cards", 0], ["profile", "pin"]]

REFUSED = ErrorInfo("ToolError", "seat 12A is taken", refused=True)
DECLINED = ErrorInfo("RuntimeError", "payments service unavailable")
TIMED_OUT = ErrorInfo("ToolTimeoutError", "step 'BookHotel' ran past its deadline (0.5 s)")
CANCELLED = ErrorInfo("CancelledError", "cancelled")
CRASH = ErrorInfo("ProcessCrashed", "the process running the saga stopped before the run finished")


def context(run_id: str | None, step: int | None, deadline: float | None, **added: Any) -> AegisContext:
    """A context as the engine stamps them, built from JSON so no private constructor is needed."""
    data = {
        "metadata": {**TRAVELLER, **added},
        "secrets": SECRETS,
        "deadline": deadline,
        "run_id": run_id,
        "step": step,
    }
    return context_from_json(data)


class Run:
    """Appends one run's events with consecutive sequence numbers and times 10 s apart."""

    def __init__(self, journal: SqliteJournal, run_id: str) -> None:
        self.journal, self.run_id, self.seq = journal, run_id, 0

    async def open(self) -> None:
        await self.journal.open_run(self.run_id, SAGA, normalize_saga(ENTRIES))

    def header(self) -> dict[str, Any]:
        fields = {"run_id": self.run_id, "seq": self.seq, "time": 100.0 + 10 * self.seq}
        self.seq += 1
        return fields

    async def add(self, event: SagaEvent) -> None:
        await self.journal.append(event)

    async def start(self, deadline: float | None) -> None:
        initial = context(None, None, deadline)
        await self.add(
            SagaStarted(
                **self.header(),
                saga=SAGA,
                steps=STEPS,
                deadline=math.inf if deadline is None else deadline,
                context=initial,
            )
        )

    async def succeed(self, index: int, deadline: float | None) -> None:
        await self.add(StepStarted(**self.header(), index=index, step=STEPS[index]))
        snapshot = context(self.run_id, index, deadline, done=index)
        await self.add(
            StepSucceeded(**self.header(), index=index, step=STEPS[index], duration=1.5, context=snapshot)
        )

    async def undo(self, index: int, attempt: int = 1) -> None:
        await self.add(CompensationStarted(**self.header(), index=index, step=STEPS[index], attempt=attempt))
        await self.add(
            CompensationSucceeded(
                **self.header(), index=index, step=STEPS[index], attempt=attempt, duration=0.25
            )
        )

    async def fail_undo(self, index: int, attempt: int, will_retry: bool) -> None:
        await self.add(CompensationStarted(**self.header(), index=index, step=STEPS[index], attempt=attempt))
        await self.add(
            CompensationFailed(
                **self.header(),
                index=index,
                step=STEPS[index],
                attempt=attempt,
                duration=0.75,
                error=DECLINED,
                will_retry=will_retry,
            )
        )

    def report(self, status: SagaStatus, **fields: Any) -> SagaReport:
        return SagaReport(run_id=self.run_id, saga=SAGA, status=status, steps=STEPS, **fields)


async def write(path: Path) -> None:
    async with SqliteJournal(path, steps={"payments": PAY}) as journal:
        committed = Run(journal, "r1-committed")
        await committed.open()
        await committed.start(deadline=1000.5)
        for index in range(3):
            await committed.succeed(index, deadline=1000.5)
        final = context("r1-committed", 2, 1000.5, done=2)
        await committed.add(SagaCommitted(**committed.header(), saga=SAGA, duration=60.0, context=final))
        journal.close_run(committed.run_id)

        refused = Run(journal, "r2-rolled-back")
        await refused.open()
        await refused.start(deadline=None)
        await refused.succeed(0, deadline=None)
        await refused.add(StepStarted(**refused.header(), index=1, step="reserve_seat"))
        await refused.add(
            StepFailed(
                **refused.header(),
                index=1,
                step="reserve_seat",
                duration=0.5,
                kind=FailureKind.ERROR,
                error=REFUSED,
            )
        )
        await refused.fail_undo(0, attempt=1, will_retry=True)
        await refused.undo(0, attempt=2)
        report = refused.report(
            SagaStatus.ROLLED_BACK,
            succeeded=("Pay",),
            failed_step="reserve_seat",
            failure_kind=FailureKind.ERROR,
            cause=REFUSED,
            compensated=("Pay",),
        )
        await refused.add(SagaCompensated(**refused.header(), saga=SAGA, duration=90.0, report=report))
        journal.close_run(refused.run_id)

        stuck = Run(journal, "r3-stuck")
        await stuck.open()
        await stuck.start(deadline=2000.0)
        await stuck.succeed(0, deadline=2000.0)
        await stuck.succeed(1, deadline=2000.0)
        await stuck.add(StepStarted(**stuck.header(), index=2, step="BookHotel"))
        await stuck.add(
            StepTimedOut(
                **stuck.header(), index=2, step="BookHotel", duration=0.5, budget=0.5, error=TIMED_OUT
            )
        )
        await stuck.undo(2)
        await stuck.fail_undo(1, attempt=1, will_retry=False)
        await stuck.undo(0)
        report = stuck.report(
            SagaStatus.STUCK,
            succeeded=("Pay", "reserve_seat"),
            failed_step="BookHotel",
            failure_kind=FailureKind.TIMEOUT,
            cause=TIMED_OUT,
            compensated=("BookHotel", "Pay"),
            compensation_failures=(CompensationFailure("reserve_seat", 1, DECLINED),),
        )
        await stuck.add(SagaStuck(**stuck.header(), saga=SAGA, duration=120.0, report=report))
        journal.close_run(stuck.run_id)

        recovered = Run(journal, "r4-recovered")
        await recovered.open()
        await recovered.start(deadline=None)
        await recovered.succeed(0, deadline=None)
        await recovered.add(StepStarted(**recovered.header(), index=1, step="reserve_seat"))
        await recovered.add(
            StepFailed(
                **recovered.header(),
                index=1,
                step="reserve_seat",
                duration=2.0,
                kind=FailureKind.CANCELLED,
                error=CANCELLED,
            )
        )
        journal.close_run(recovered.run_id)  # the process died here, before its rollback
        await journal.mark_recovering(recovered.run_id)
        await recovered.add(
            StepFailed(
                **recovered.header(),
                index=1,
                step="reserve_seat",
                duration=0.0,
                kind=FailureKind.INTERRUPTED,
                error=CRASH,
            )
        )
        await recovered.undo(0)
        report = recovered.report(
            SagaStatus.ROLLED_BACK,
            succeeded=("Pay",),
            failed_step="reserve_seat",
            failure_kind=FailureKind.CANCELLED,
            cause=CANCELLED,
            compensated=("Pay",),
        )
        await recovered.add(SagaCompensated(**recovered.header(), saga=SAGA, duration=30.0, report=report))
        journal.close_run(recovered.run_id)

        unfinished = Run(journal, "r5-unfinished")
        await unfinished.open()
        await unfinished.start(deadline=None)
        await unfinished.succeed(0, deadline=None)
        await unfinished.succeed(1, deadline=None)
        await unfinished.add(StepStarted(**unfinished.header(), index=2, step="BookHotel"))
        journal.close_run(unfinished.run_id)  # then the process died


def main(target: str) -> None:
    """Write the journal in a private folder (journals refuse shared ones), then copy it out whole."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "journal.db"
        anyio.run(write, path)
        Path(target).write_bytes(path.read_bytes())


if __name__ == "__main__":
    main(sys.argv[1])
