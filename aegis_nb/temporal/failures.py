"""What a failure means for a saga on Temporal: its step's error, a timeout, a cancellation, a lost worker.

The workflow (`workflow.py`) gets a step's failure as an `ActivityError` whose cause is what the
activity reported (`activities.py`: type name, scrubbed message, details) or what Temporal decided
(a timeout, a cancellation); these helpers turn either into the `ErrorInfo` and `FailureKind` the
engine would have recorded. Deterministic: they read only their arguments and the workflow's state.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutError,
    TimeoutType,
)

from aegis_nb.kernel.errors import ToolTimeoutError
from aegis_nb.kernel.report import ErrorInfo, FailureKind


class StepError(Exception):
    """A step's failure as the workflow knows it: the error it reported, and how to treat it.

    `info.refused` says the step's tool did not act (a refusing `ToolError`); `lost` says an attempt's worker
    was lost, so the step may have acted whatever its last attempt said.
    """

    def __init__(
        self,
        info: ErrorInfo,
        kind: FailureKind,
        *,
        budget: float | None = None,
        lost: bool = False,
    ) -> None:
        super().__init__(str(info))
        self.info = info
        self.kind = kind
        self.budget = budget  # for a timeout: the time the step was given (None: its duration)
        self.lost = lost


def describe(exc: BaseException) -> StepError:
    """How the forward phase failed, as a `StepError` whatever raised."""
    if isinstance(exc, StepError):
        return exc
    if isinstance(exc, ToolTimeoutError):
        return StepError(ErrorInfo.from_exception(exc), FailureKind.TIMEOUT, budget=exc.budget)
    if isinstance(exc, asyncio.CancelledError | CancelledError):
        return StepError(cancelled(), FailureKind.CANCELLED)
    return StepError(ErrorInfo.from_exception(exc), FailureKind.ERROR)


def cancelled() -> ErrorInfo:
    """The workflow's cancellation as the cause of a failure, with its reason if one was given."""
    reason = workflow.cancellation_reason()
    return ErrorInfo("CancelledError", f"the workflow was cancelled{': ' + reason if reason else ''}")


def step_error(exc: ActivityError, name: str, budget: float, *, attempts: int | None) -> StepError:
    """What an activity's failure means for the saga: the step's own error, a timeout or a cancellation.

    `budget` is the time the workflow gave the call; `attempts` is how many of it Temporal runs
    when workers are lost (for the message).
    """
    cause = exc.cause
    if isinstance(cause, CancelledError):
        return StepError(cancelled(), FailureKind.CANCELLED)
    if isinstance(cause, TimeoutError) and cause.type in _LOST:
        # Every attempt's worker stopped answering: the attempts may have acted, none said so.
        info = ErrorInfo(
            "WorkerLost",
            f"step {name!r}: its worker stopped answering, {attempts} attempts in a row",
        )
        return StepError(info, FailureKind.ERROR, lost=True)
    if isinstance(cause, TimeoutError):  # the server's backstop: the worker never answered in time
        info = ErrorInfo.from_exception(ToolTimeoutError(name, budget))
        return StepError(info, FailureKind.TIMEOUT, budget=budget)
    if isinstance(cause, ApplicationError):
        return _reported(cause, name, budget)
    return StepError(ErrorInfo.from_exception(cause or exc), FailureKind.ERROR)


def _reported(cause: ApplicationError, name: str, budget: float) -> StepError:
    """The error the step raised, as the activity reported it (`activities._reported`)."""
    details: dict[str, Any] = {}
    if cause.details and isinstance(cause.details[0], dict):
        details = cause.details[0]
    # The exact message, when the one shown had to be made encodable.
    message = details.get("message")
    info = ErrorInfo(
        cause.type or "ApplicationError",
        message if isinstance(message, str) else cause.message,
        refused=bool(details.get("tool_error")),
    )
    # An attempt after the first means an earlier one's worker was lost, maybe after acting.
    lost = int(details.get("attempt", 1)) > 1
    if not details.get("timeout"):
        return StepError(info, FailureKind.ERROR, lost=lost)
    if details.get("at_limit"):
        # Cut at the limit this workflow set: the budget is the one it gave, from the step's
        # start (the activity could only measure from its own, later start), as in the engine.
        info = ErrorInfo.from_exception(ToolTimeoutError(name, budget))
        return StepError(info, FailureKind.TIMEOUT, budget=budget, lost=lost)
    # A tool's own timeout inside the step, with that tool's budget.
    step_budget = details.get("budget")
    return StepError(
        info,
        FailureKind.TIMEOUT,
        budget=None if step_budget is None else float(step_budget),
        lost=lost,
    )


_LOST = (TimeoutType.HEARTBEAT, TimeoutType.START_TO_CLOSE)
"""Timeouts of one attempt (its worker died or stopped heartbeating), which Temporal retries: one of
these as the final cause means the retries ran out."""
