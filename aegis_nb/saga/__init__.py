"""Saga layer: steps, the engine, events, sinks, journals. Depends on the kernel only.

The durable journal's names (`SqliteJournal`, the journal errors, `read_runs`, ...) are loaded from
`aegis_nb.saga.durable` on first use, so importing the saga layer opens no ``sqlite3``.
"""

import warnings
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from aegis_nb.saga.definition import SagaEntry, Step, StepSpec, normalize_saga
from aegis_nb.saga.dynamic import Saga, SagaState
from aegis_nb.saga.engine import WorkflowEngine, run_observers, saga_name
from aegis_nb.saga.events import (
    EVENT_TYPES,
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    EventBase,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
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
from aegis_nb.saga.parallel import CompensationOrder, ParallelGroup, StepGroup, parallel
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
    from aegis_nb.saga.events import SagaRolledBackEvent as SagaCompensated  # noqa: F401  (RENAMED)

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


RENAMED: Final = MappingProxyType({"SagaCompensated": "SagaRolledBackEvent"})
"""Names of 0.1.0 still given, with a `DeprecationWarning`, under their new names: users' sinks match
on the event classes. (Journals need no alias here: their decoder reads the old names itself.)"""


def __getattr__(name: str) -> Any:
    """Load the durable journal (and ``sqlite3``) when one of its names is first asked for; give a
    renamed name with a warning."""
    if name in RENAMED:
        new = RENAMED[name]
        warnings.warn(f"{name} is renamed {new}; the old name will go", DeprecationWarning, stacklevel=2)
        return globals()[new]
    if name not in DURABLE_NAMES:
        raise AttributeError(f"module 'aegis_nb.saga' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module("aegis_nb.saga.durable"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *DURABLE_NAMES})


__all__ = [
    "EVENT_TYPES",
    "CompensationFailed",
    "CompensationOrder",
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
    "ParallelGroup",
    "RecoveryIncomplete",
    "RetryPolicy",
    "RunInfo",
    "Saga",
    "SagaCommitted",
    "SagaEntry",
    "SagaEvent",
    "SagaRolledBackEvent",
    "SagaRun",
    "SagaStarted",
    "SagaState",
    "SagaStuck",
    "Sink",
    "SqliteJournal",
    "Step",
    "StepEvent",
    "StepFailed",
    "StepGroup",
    "StepNotRecoverable",
    "StepSpec",
    "StepStarted",
    "StepSucceeded",
    "StepTimedOut",
    "WorkflowEngine",
    "describe",
    "fold_report",
    "normalize_saga",
    "parallel",
    "read_events",
    "read_run",
    "read_runs",
    "run_observers",
    "saga_name",
    "step",
]
