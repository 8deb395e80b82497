"""The one error tree of aegis_nb. Every error we raise is an `AegisError`::

    AegisError
     ├── ToolTimeoutError          (also TimeoutError) a step or tool ran past its context deadline
     ├── SagaDefinitionError       (also TypeError)    a saga or step is malformed; nothing ran
     ├── StepResultError           (also TypeError)    execute() returned neither a context nor None
     ├── ToolError                                     an MCP tool call came back with is_error
     └── SagaFailed                                    a saga did not commit; carries a SagaReport
          ├── SagaRolledBack                           every completed step was compensated
          └── SagaCompensationFailed                   some compensation still failed: see report

`SagaFailed` errors chain the forward failure as ``__cause__``. Retrying a saga is only safe after
`SagaRolledBack`; `SagaCompensationFailed` says which steps were left standing and need a person.
"""

from __future__ import annotations

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


class ToolError(AegisError):
    """An MCP tool answered with ``is_error``: `message` is its text, `structured` its structured content.

    The error reads as the tool's own words (a saga report then says "Card Declined!"); `tool` names
    the tool. A workflow served by `AegisMCP` that rolled back arrives this way, its report as
    `structured`. Tools served by `AegisMCP` may raise it to refuse a call in their own words, and
    a `ToolPairStep` raises it when it refuses to call its tool: either way, nothing was done.
    """

    def __init__(self, tool: str, message: str, structured: dict[str, object] | None = None) -> None:
        self.tool = tool
        self.message = message
        self.structured = structured
        super().__init__(message)


class SagaFailed(AegisError):
    """A saga did not commit. `report` says what failed and what was undone."""

    def __init__(self, report: SagaReport) -> None:
        self.report = report
        super().__init__(f"saga {report.saga!r}: {report.summary()}")


class SagaRolledBack(SagaFailed):
    """The saga failed and every completed step was compensated: the world is as it was."""


class SagaCompensationFailed(SagaFailed):
    """The saga failed and at least one compensation failed after its retries: steps were left standing."""
