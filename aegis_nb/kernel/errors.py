"""The one error tree of aegis_nb, drawn whole here (the other modules that define errors point here).

What a saga, a tool, a server or a journal does to a caller is an `AegisError`; each also subclasses
the builtin a caller would catch it as (``except TimeoutError`` still catches a step's timeout)::

    AegisError
     ├── ToolTimeoutError          (also TimeoutError) a step or tool ran past its context deadline
     ├── SagaDefinitionError       (also TypeError)    a saga or step is malformed; nothing ran
     │    └── StepNotRecoverable   (saga.durable)      a step a durable journal could not rebuild:
     │                                                 refused at the run's start, or at recovery
     ├── StepResultError           (also TypeError)    execute() returned neither a context nor None
     ├── ToolError                                     an MCP tool call came back with is_error;
     │                                                 `refused`: the tool said it did not act
     ├── ServerUnreachable         (also ConnectionError) an MCP or Temporal server could not be reached
     ├── InvalidRequestMeta        (also ValueError, server.deadline) a request's ``_meta`` is unusable
     ├── UnsafeServing             (also ValueError, server.http_security) HTTP off loopback with
     │                                                 no allowed hosts: refused before serving
     ├── MissingExtra              (also ModuleNotFoundError, kernel.extras) a part needs an extra:
     │    │                                            the message gives the pip line
     │    └── ExtraTooOld          (kernel.extras)     installed, but too old a release (mcp < 2.3)
     ├── HandleRefused             (server.saga_handles) a saga handle that opens no saga; says
     │                                                 nothing of why (unknown, guessed, foreign)
     ├── NotOpen                   (server.saga_handles) a step, commit or rollback asked of an
     │                                                 agent saga that has ended
     ├── SagaLimitReached          (server.saga_handles) saga_begin refused: the caller, or the
     │                                                 server, has as many sagas open as allowed
     ├── UndoNotBound              (server.saga_handles) an undo's argument did not resolve from
     │                                                 the call: never called, the step orphaned
     ├── PolicyError               (also ValueError, gateway.policy) a gateway policy that cannot
     │                                                 be used; names the file, line and key
     ├── UpstreamLost              (also ConnectionError, gateway.upstream) an upstream stopped
     │                                                 answering mid-call; it may have acted
     ├── JournalError              (saga.durable)      the journal cannot be used; names the file
     │    ├── JournalUnavailable                       cannot be created, opened or written
     │    ├── JournalUntrusted                         others could write it (mode, owner, folder)
     │    ├── JournalInUse                             another process holds it
     │    ├── JournalCorrupt                           not a journal, damaged, or a record that
     │    │                                            does not decode
     │    ├── JournalTooNew                            written by a newer schema than this reads
     │    ├── JournalTooOld                            written by an older file layout than this reads
     │    └── RecoveryIncomplete   (saga.durable.recovery) some unfinished runs could not be
     │                                                 recovered; they stay for a person
     ├── SagaFailed                                    a saga did not commit; carries a SagaReport
     │    ├── SagaRolledBack                           every completed step was compensated
     │    ├── SagaCompensationFailed                   some compensation still failed: see report
     │    └── SagaCancelled        (temporal.client)   the Temporal workflow was cancelled from
     │                                                 outside; `report` says what was rolled back
     ├── FaultPlanError            (also ValueError, mock.faults) a fault plan names an unknown tool
     │                                                 or option, or has an impossible value
     ├── LedgerError               (mock.ledger)       the mock agency refused a ledger operation
     └── InjectedFailure           (notebook.injection) the failure a rehearsal put in a step's place

Not `AegisError`s, on purpose:

- A bad argument to one of our functions or constructors (a negative timeout, a sink that is not
  callable, a metadata value that is not JSON, a `Secret` around a non-str, a `RetryPolicy` of no
  attempts, pickling a context) raises a plain `ValueError` or `TypeError` at the call, as the
  standard library does: it is a bug in the calling code, reported where it was written, and nothing
  ran. A saga handed to the engine is checked as a whole before any step runs and reported as a
  `SagaDefinitionError` naming the step, since a notebook user fixes it there.
- `ScrubbedError` (kernel.scrubbing) is never raised: it stands in as a saga error's ``__cause__``
  for an error whose text or chain held a secret (see `scrubbed_cause`).
- The cancellation of the caller is the event loop's own (`asyncio.CancelledError`, trio's
  `Cancelled`): the engine rolls back, then lets it propagate unchanged.

`SagaFailed` errors chain the forward failure as ``__cause__``. Retrying a saga is only safe after
`SagaRolledBack`; `SagaCompensationFailed` says which steps were left standing and need a person.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Only a type here: report imports this module (for `is_refusal`), so this one must not import
    # it back at run time.
    from aegis_nb.kernel.report import SagaReport


class AegisError(Exception):
    """Root of every aegis_nb error."""


class ToolTimeoutError(AegisError, TimeoutError):
    """A step or tool call ran past its context deadline."""

    def __init__(self, step: str | None, budget: float | None, detail: str = "") -> None:
        self.step = step
        self.budget = budget
        who = f"step {step!r}" if step else "tool call"
        if budget is None:
            text = f"{who} ran past its deadline"
        elif budget <= 0:
            text = f"{who} had no time left: the deadline passed {-budget * 1000:.1f} ms before it started"
        else:
            text = f"{who} exceeded its deadline (budget {budget * 1000:.1f} ms)"
        super().__init__(f"{text}{detail}")


class SagaDefinitionError(AegisError, TypeError):
    """The saga or one of its steps is malformed; raised before any step runs."""


class StepResultError(AegisError, TypeError):
    """A step's execute() returned something other than an AegisContext or None."""


class ServerUnreachable(AegisError, ConnectionError):
    """No session could be opened to an MCP server (`connect`) or a Temporal server; the message names
    the server (never its credentials) and says why."""


class ToolError(AegisError):
    """An MCP tool answered with ``is_error``: `message` is its text, `structured` its structured content.

    The error reads as the tool's own words (a saga report then says "Card Declined!"); `tool` names
    the tool. `refused` (the default) says the tool did not act, so a failed in-doubt step owes no
    compensation: tools served by `AegisMCP` raise it to refuse a call in their own words, a
    `ToolPairStep` raises it when it refuses to call its tool, and a workflow that rolled back arrives
    this way, its report as `structured`. An error that does not say so (a tool that crashed, any
    server but `AegisMCP`) arrives with ``refused=False``: the tool may have acted first. A subclass
    may set `refused` as a class attribute; ``refused=`` given to the constructor overrides it.
    """

    refused: bool = True
    """Read through the class when a subclass's ``__init__`` does not call this one."""

    def __init__(
        self,
        tool: str,
        message: str,
        structured: dict[str, object] | None = None,
        *,
        refused: bool | None = None,
    ) -> None:
        self.tool = tool
        self.message = message
        self.structured = structured
        if refused is not None:  # else the class's own (True, or what a subclass declares)
            self.refused = refused
        super().__init__(message)


def is_refusal(exc: BaseException) -> bool:
    """Whether `exc` is a tool's own answer that it did not act (a `ToolError` with `refused`).

    Asked while a failure is being reported: a `refused` that raises (a subclass's property) is no
    such answer, and must not stop the rollback.
    """
    if not isinstance(exc, ToolError):
        return False
    try:
        return bool(exc.refused)
    except Exception:
        return False


class SagaFailed(AegisError):
    """A saga did not commit. `report` says what failed and what was undone."""

    def __init__(self, report: SagaReport) -> None:
        self.report = report
        super().__init__(f"saga {report.saga!r}: {report.summary()}")


class SagaRolledBack(SagaFailed):
    """The saga failed and every completed step was compensated: the world is as it was."""


class SagaCompensationFailed(SagaFailed):
    """The saga failed and at least one compensation failed after its retries: steps were left standing."""
