"""aegis_nb: sagas for MCP agents, notebook first.

Steps execute and compensate; the `WorkflowEngine` undoes completed steps newest first when a later
one fails or runs past its deadline. Importing this package does no work and pulls in neither the
MCP SDK nor Jupyter nor ``sqlite3``: `AegisMCP`, the views and the durable journal (`SqliteJournal`,
the journal errors) are loaded on first use.
"""

import warnings
from typing import TYPE_CHECKING, Any

from aegis_nb.kernel import (
    AegisContext,
    AegisError,
    CompensationFailure,
    ErrorInfo,
    FailureKind,
    SagaCompensationFailed,
    SagaDefinitionError,
    SagaFailed,
    SagaReport,
    SagaRolledBack,
    SagaStatus,
    Secret,
    ServerUnreachable,
    StepResultError,
    ToolError,
    ToolExecutor,
    ToolTimeoutError,
)
from aegis_nb.kernel.undo import NOTHING_TO_UNDO
from aegis_nb.saga import (
    RENAMED,
    CompensationFailed,
    CompensationOrder,
    CompensationStarted,
    CompensationSucceeded,
    FunctionStep,
    InMemoryJournal,
    Journal,
    RetryPolicy,
    Saga,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaRun,
    SagaStarted,
    SagaStuck,
    Sink,
    Step,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
    WorkflowEngine,
    describe,
    parallel,
    step,
)

if TYPE_CHECKING:
    from aegis_nb.mock import FaultPlan, Latency, Ledger, ToolFaults, TravelAgency
    from aegis_nb.notebook import LiveView, ReplayView, SagaDiagram
    from aegis_nb.saga.durable import (
        JournalCorrupt,
        JournalError,
        JournalInUse,
        JournalTooNew,
        JournalTooOld,
        JournalUnavailable,
        JournalUntrusted,
        RecoveryIncomplete,
        SqliteJournal,
        StepNotRecoverable,
        read_events,
        read_runs,
    )
    from aegis_nb.saga.events import SagaRolledBackEvent as SagaCompensated  # noqa: F401  (RENAMED)
    from aegis_nb.server import TIMEOUT_META_KEY, AegisMCP, ToolPairStep, ToolSession, WorkflowResult, connect

__version__ = "0.1.0"

_LAZY = {
    "JournalCorrupt": "aegis_nb.saga.durable",
    "JournalError": "aegis_nb.saga.durable",
    "JournalInUse": "aegis_nb.saga.durable",
    "JournalTooNew": "aegis_nb.saga.durable",
    "JournalTooOld": "aegis_nb.saga.durable",
    "JournalUnavailable": "aegis_nb.saga.durable",
    "JournalUntrusted": "aegis_nb.saga.durable",
    "RecoveryIncomplete": "aegis_nb.saga.durable",
    "SqliteJournal": "aegis_nb.saga.durable",
    "StepNotRecoverable": "aegis_nb.saga.durable",
    "read_events": "aegis_nb.saga.durable",
    "read_runs": "aegis_nb.saga.durable",
    "AegisMCP": "aegis_nb.server",
    "TIMEOUT_META_KEY": "aegis_nb.server",
    "ToolPairStep": "aegis_nb.server",
    "ToolSession": "aegis_nb.server",
    "WorkflowResult": "aegis_nb.server",
    "connect": "aegis_nb.server",
    "FaultPlan": "aegis_nb.mock",
    "Latency": "aegis_nb.mock",
    "Ledger": "aegis_nb.mock",
    "ToolFaults": "aegis_nb.mock",
    "TravelAgency": "aegis_nb.mock",
    "LiveView": "aegis_nb.notebook",
    "ReplayView": "aegis_nb.notebook",
    "SagaDiagram": "aegis_nb.notebook",
}


def __getattr__(name: str) -> Any:
    """Load a part when one of its names is first asked for: the durable journal (it opens ``sqlite3``),
    and the parts that need extras (server and mock tools: `mcp`; views: `notebook`). A name renamed
    since 0.1.0 (`aegis_nb.saga.RENAMED`) is given under its new name, with a `DeprecationWarning`."""
    if name in RENAMED:
        new = RENAMED[name]
        warnings.warn(f"{name} is renamed {new}; the old name will go", DeprecationWarning, stacklevel=2)
        return globals()[new]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aegis_nb' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext aegis_nb``: register the magics and the notebook display of runs."""
    from aegis_nb.kernel.extras import needs_extra

    # The magics need IPython and ipywidgets, and mcp for their mock tools: one extra names them all.
    with needs_extra("notebook", "%load_ext aegis_nb (the saga magics)"):
        from aegis_nb.notebook.extension import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext aegis_nb``: stop blocking on the saga magics and drawing runs."""
    from aegis_nb.notebook.extension import unload_ipython_extension as unload

    unload(ipython)


__all__ = [
    "NOTHING_TO_UNDO",
    "TIMEOUT_META_KEY",
    "AegisContext",
    "AegisError",
    "AegisMCP",
    "CompensationFailed",
    "CompensationFailure",
    "CompensationOrder",
    "CompensationStarted",
    "CompensationSucceeded",
    "ErrorInfo",
    "FailureKind",
    "FaultPlan",
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
    "Latency",
    "Ledger",
    "LiveView",
    "RecoveryIncomplete",
    "ReplayView",
    "RetryPolicy",
    "Saga",
    "SagaCommitted",
    "SagaCompensationFailed",
    "SagaDefinitionError",
    "SagaDiagram",
    "SagaEvent",
    "SagaFailed",
    "SagaReport",
    "SagaRolledBack",
    "SagaRolledBackEvent",
    "SagaRun",
    "SagaStarted",
    "SagaStatus",
    "SagaStuck",
    "Secret",
    "ServerUnreachable",
    "Sink",
    "SqliteJournal",
    "Step",
    "StepFailed",
    "StepNotRecoverable",
    "StepResultError",
    "StepStarted",
    "StepSucceeded",
    "StepTimedOut",
    "ToolError",
    "ToolExecutor",
    "ToolFaults",
    "ToolPairStep",
    "ToolSession",
    "ToolTimeoutError",
    "TravelAgency",
    "WorkflowEngine",
    "WorkflowResult",
    "__version__",
    "connect",
    "describe",
    "parallel",
    "read_events",
    "read_runs",
    "step",
]
