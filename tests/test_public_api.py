"""The public API is curated: `aegis_nb.__all__` is pinned; importing defines names and does nothing else."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import aegis_nb

PUBLIC_API = [
    "NOTHING_TO_UNDO",
    "TIMEOUT_META_KEY",
    "AegisContext",
    "AegisError",
    "AegisMCP",
    "CompensationFailed",
    "CompensationOrder",
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
    "Saga",
    "SagaCommitted",
    "SagaRolledBackEvent",
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
    "parallel",
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


def test_importing_aegis_nb_loads_no_durable_journal_until_one_is_asked_for() -> None:
    # DESIGN: nothing happens at import. The durable journal (and sqlite3) load on first use, through
    # the packages' module __getattr__; then each durable name is the durable package's own.
    code = textwrap.dedent(
        """
        import sys, aegis_nb, aegis_nb.saga
        loaded = lambda: [m for m in ("sqlite3", "aegis_nb.saga.durable") if m in sys.modules]
        print(loaded())
        aegis_nb.SqliteJournal
        print(loaded())
        from aegis_nb.saga import durable
        top = [n for n in aegis_nb.__all__ if n in durable.__all__]
        print([n for n in top if getattr(aegis_nb, n) is getattr(durable, n)])
        saga = aegis_nb.saga
        print(sorted(n for n in saga.DURABLE_NAMES if getattr(saga, n) is getattr(durable, n)))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    top = [
        "JournalCorrupt",
        "JournalError",
        "JournalInUse",
        "JournalTooNew",
        "JournalTooOld",
        "JournalUnavailable",
        "JournalUntrusted",
        "RecoveryIncomplete",
        "SqliteJournal",
        "StepNotRecoverable",
        "read_events",
        "read_runs",
    ]
    expected = [
        "[]",
        "['sqlite3', 'aegis_nb.saga.durable']",
        str(top),
        str(sorted([*top, "RunInfo", "read_run"])),
    ]
    assert (result.stdout.splitlines(), result.stderr) == (expected, "")


def test_the_0_1_0_name_of_the_rolled_back_event_still_imports_with_a_warning() -> None:
    # Users' sinks written for 0.1.0 match on `SagaCompensated`; journals need no alias (the decoder
    # reads the old name: tests/test_journals_of_the_first_release_still_open.py).
    import aegis_nb.saga

    message = "SagaCompensated is renamed SagaRolledBackEvent; the old name will go"
    for module in (aegis_nb, aegis_nb.saga):
        with pytest.warns(DeprecationWarning, match=f"^{message}$") as warned:
            old = module.SagaCompensated
        assert (old, [str(w.message) for w in warned]) == (aegis_nb.SagaRolledBackEvent, [message])
    assert "SagaCompensated" not in aegis_nb.__all__


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
