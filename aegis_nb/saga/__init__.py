"""Saga layer: steps, the engine, events, sinks, journals. Depends on the kernel only.

The durable journal's names (`SqliteJournal`, the journal errors, `read_runs`, ...) are loaded from
`aegis_nb.saga.durable` on first use, so importing the saga layer opens no ``sqlite3``.
"""

from typing import TYPE_CHECKING, Any

from aegis_nb.saga.definition import SagaEntry, Step, StepSpec, normalize_saga
from aegis_nb.saga.engine import WorkflowEngine, run_observers, saga_name
from aegis_nb.saga.events import (
    EVENT_TYPES,
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    EventBase,
    SagaCommitted,
    SagaCompensated,
    SagaEvent,
    SagaStarted,
    SagaStuck,
    StepEvent,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)
from aegis_nb.saga.functional import FunctionStep, step
from aegis_nb.saga.history import fold_report
from aegis_nb.saga.journal import InMemoryJournal, Journal
from aegis_nb.saga.outcome import SagaRun
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.saga.sinks import Sink
from aegis_nb.saga.trace import describe

if TYPE_CHECKING:
    from aegis_nb.saga.durable import (
        JournalCorrupt,
        JournalError,
        JournalInUse,
        JournalTooNew,
        JournalTooOld,
        JournalUnavailable,
        JournalUntrusted,
        RecoveryIncomplete,
        RunInfo,
        SqliteJournal,
        StepNotRecoverable,
        read_events,
        read_run,
        read_runs,
    )

DURABLE_NAMES = frozenset(
    {
        "JournalCorrupt",
        "JournalError",
        "JournalInUse",
        "JournalTooNew",
        "JournalTooOld",
        "JournalUnavailable",
        "JournalUntrusted",
        "RecoveryIncomplete",
        "RunInfo",
        "SqliteJournal",
        "StepNotRecoverable",
        "read_events",
        "read_run",
        "read_runs",
    }
)
"""The names this package gives from `aegis_nb.saga.durable`, imported when one is first asked for."""


def __getattr__(name: str) -> Any:
    """Load the durable journal (and ``sqlite3``) when one of its names is first asked for."""
    if name not in DURABLE_NAMES:
        raise AttributeError(f"module 'aegis_nb.saga' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module("aegis_nb.saga.durable"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *DURABLE_NAMES})


__all__ = [
    "EVENT_TYPES",
    "CompensationFailed",
    "CompensationStarted",
    "CompensationSucceeded",
    "EventBase",
    "FunctionStep",
    "InMemoryJournal",
    "Journal",
    "JournalCorrupt",
    "JournalError",
    "JournalInUse",
    "JournalTooNew",
    "JournalTooOld",
    "JournalUnavailable",
    "JournalUntrusted",
    "RecoveryIncomplete",
    "RetryPolicy",
    "RunInfo",
    "SagaCommitted",
    "SagaCompensated",
    "SagaEntry",
    "SagaEvent",
    "SagaRun",
    "SagaStarted",
    "SagaStuck",
    "Sink",
    "SqliteJournal",
    "Step",
    "StepEvent",
    "StepFailed",
    "StepNotRecoverable",
    "StepSpec",
    "StepStarted",
    "StepSucceeded",
    "StepTimedOut",
    "WorkflowEngine",
    "describe",
    "fold_report",
    "normalize_saga",
    "read_events",
    "read_run",
    "read_runs",
    "run_observers",
    "saga_name",
    "step",
]
