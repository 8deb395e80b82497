"""Saga layer: steps, the engine, events, sinks, journals. Depends on the kernel only."""

from aegis_nb.saga.definition import SagaEntry, Step, StepSpec, normalize_saga
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
