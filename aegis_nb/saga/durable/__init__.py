"""Durable sagas: the SQLite journal, crash recovery, and reading runs back for listing and replay.

``WorkflowEngine(journal=SqliteJournal("runs.db"))`` makes every run write-ahead logged;
``await engine.recover()`` (or ``AegisMCP(..., journal="runs.db")``, which recovers on start-up)
rolls back what a crash left half done. A run starts only if recovery could rebuild its steps:

- module-level classes whose attributes are JSON constructor arguments (``BookFlight()``,
  ``ReserveHotel(nights=3)``) and module-level ``@step`` functions are found by import path;
- steps holding clients or connections are registered: ``SqliteJournal(path, steps=[...])``;
- saga arguments must be JSON data, and secrets travel in the context, where they are redacted.

Both shapes of saga are journaled: a list's steps are checked when it starts, a dynamic saga's
(``async with engine.saga(ctx) as saga``) each as it is added, before it runs; parallel groups too.
``aegis-nb runs --prune BEFORE`` (`prune_runs`) deletes finished runs older than a date.

Mark a step ``in_doubt = True`` when its effect may land before its outcome is recorded (a booking
whose answer never came): recovery then undoes it by its idempotency key even if it was in flight.
Part of the saga layer: it imports the kernel and the standard library only (``sqlite3``).
"""

from aegis_nb.saga.durable.codec import SCHEMA_VERSION
from aegis_nb.saga.durable.errors import (
    JournalCorrupt,
    JournalError,
    JournalInUse,
    JournalTooNew,
    JournalTooOld,
    JournalUnavailable,
    JournalUntrusted,
    StepNotRecoverable,
)
from aegis_nb.saga.durable.journal import SqliteJournal
from aegis_nb.saga.durable.locator import LocatorKind, StepLocator, StepResolver
from aegis_nb.saga.durable.recovery import (
    RecoverableJournal,
    RecoveryIncomplete,
    RecoveryPlan,
    plan_recovery,
    recover_unfinished,
)
from aegis_nb.saga.durable.runs import JournaledRun, read_events, read_run, read_runs
from aegis_nb.saga.durable.startup import durable_engine, durable_lifespan
from aegis_nb.saga.durable.steprecord import StepRecord
from aegis_nb.saga.durable.store import Pruned, RunInfo, prune_runs

__all__ = [
    "SCHEMA_VERSION",
    "JournalCorrupt",
    "JournalError",
    "JournalInUse",
    "JournalTooNew",
    "JournalTooOld",
    "JournalUnavailable",
    "JournalUntrusted",
    "JournaledRun",
    "LocatorKind",
    "Pruned",
    "RecoverableJournal",
    "RecoveryIncomplete",
    "RecoveryPlan",
    "RunInfo",
    "SqliteJournal",
    "StepLocator",
    "StepNotRecoverable",
    "StepRecord",
    "StepResolver",
    "durable_engine",
    "durable_lifespan",
    "plan_recovery",
    "prune_runs",
    "read_events",
    "read_run",
    "read_runs",
    "recover_unfinished",
]
