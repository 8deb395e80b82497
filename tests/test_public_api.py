"""The public API is curated: `aegis_nb.__all__` is pinned, and importing does no heavy work."""

from __future__ import annotations

import subprocess
import sys

import aegis_nb

PUBLIC_API = [
    "TIMEOUT_META_KEY",
    "AegisContext",
    "AegisError",
    "AegisMCP",
    "CompensationFailed",
    "CompensationFailure",
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
    "SagaCommitted",
    "SagaCompensated",
    "SagaCompensationFailed",
    "SagaDefinitionError",
    "SagaDiagram",
    "SagaEvent",
    "SagaFailed",
    "SagaReport",
    "SagaRolledBack",
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
    "read_events",
    "read_runs",
    "step",
]


def test_public_api_is_pinned() -> None:
    assert sorted(aegis_nb.__all__) == sorted(PUBLIC_API)
    for name in aegis_nb.__all__:
        assert getattr(aegis_nb, name) is not None, name


def test_importing_aegis_nb_loads_neither_mcp_nor_jupyter() -> None:
    code = (
        "import sys, aegis_nb; "
        "heavy = ('mcp', 'ipywidgets', 'IPython', 'graphviz', 'temporalio'); "
        "heavy = [m for m in heavy if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_aegismcp_alias_exposes_the_documented_names() -> None:
    from aegismcp.kernel.context import AegisContext
    from aegismcp.kernel.errors import SagaRolledBack, ToolTimeoutError
    from aegismcp.server.app import AegisMCP

    assert AegisContext is aegis_nb.AegisContext
    assert AegisMCP is aegis_nb.AegisMCP
    assert (SagaRolledBack, ToolTimeoutError) == (aegis_nb.SagaRolledBack, aegis_nb.ToolTimeoutError)


def test_importing_aegis_nb_prints_nothing_starts_no_thread_and_configures_no_logging() -> None:
    code = (
        "import logging, sys, threading\n"
        "import aegis_nb, aegismcp\n"
        "loggers = [l for l in logging.Logger.manager.loggerDict.values() if isinstance(l, logging.Logger)]\n"
        "configured = [l.name for l in loggers if l.handlers or l.level]\n"
        "root = logging.getLogger()\n"
        "print(threading.active_count(), root.handlers, root.level == logging.WARNING, configured)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (result.stdout, result.stderr) == ("1 [] True []\n", "")
