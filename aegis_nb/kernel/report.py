"""What a saga run did, as plain immutable values: statuses and the failure report.

The report travels with the saga errors, the MCP result and the journal, so it holds only step
names and scrubbed error text, never contexts or exception objects. A step is named by its display
name, which the engine makes unique within a run (``Reserve``, ``Reserve#2``); its position is
``report.steps.index(name)``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from aegis_nb.kernel import phrases
from aegis_nb.kernel.errors import is_refusal
from aegis_nb.kernel.printable import printable_line
from aegis_nb.kernel.scrubbing import exception_text, scrub
from aegis_nb.kernel.text import counted


class SagaStatus(enum.Enum):
    """Where a run stands; the last three are final."""

    RUNNING = "running"
    COMPENSATING = "compensating"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    STUCK = "stuck"

    @property
    def is_final(self) -> bool:
        return self in (SagaStatus.COMMITTED, SagaStatus.ROLLED_BACK, SagaStatus.STUCK)


class FailureKind(enum.Enum):
    """Why the forward phase stopped."""

    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    REQUESTED = "requested"
    """The saga's own code asked for the rollback (`Saga.rollback(reason)`); nothing failed."""


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An exception reduced to its type name and (secret-scrubbed) message.

    `refused` says the exception was a refusing `ToolError` (`is_refusal`): the tool's own answer
    that it did not act, so a failed in-doubt step owes no compensation, live or after a crash. It is kept
    as a flag because recovery reads the journal, where only the type's name would otherwise remain,
    and a name cannot tell a subclass. It is not part of `SagaReport.to_json` (the MCP shape).
    """

    type: str
    message: str
    refused: bool = field(default=False, kw_only=True)

    @classmethod
    def from_exception(cls, exc: BaseException, secrets: Iterable[str] = ()) -> ErrorInfo:
        return cls(type(exc).__name__, scrub(exception_text(exc), secrets), refused=is_refusal(exc))

    def __str__(self) -> str:
        """The message (else the type) as one printable line: it may be an untrusted tool's words,
        escape sequences included. The fields keep the original text."""
        return printable_line(self.message) or printable_line(self.type)


@dataclass(frozen=True, slots=True)
class CompensationFailure:
    """A step whose compensation still failed after every retry: it was left standing."""

    step: str
    attempts: int
    error: ErrorInfo


@dataclass(frozen=True, slots=True)
class SagaReport:
    """The outcome of one run: what failed, why, what was undone and what could not be."""

    run_id: str
    saga: str
    status: SagaStatus
    steps: tuple[str, ...]
    succeeded: tuple[str, ...] = ()
    failed_step: str | None = None
    failure_kind: FailureKind | None = None
    cause: ErrorInfo | None = None
    compensated: tuple[str, ...] = ()
    compensation_failures: tuple[CompensationFailure, ...] = ()
    found_nothing: tuple[str, ...] = ()
    """The compensated steps whose undo found nothing to undo (their step had not acted): listed
    apart in `summary`, which must not say they were rolled back. Not in `to_json` (the MCP shape)."""

    @property
    def left_standing(self) -> tuple[str, ...]:
        """Steps whose effects could not be undone."""
        return tuple(failure.step for failure in self.compensation_failures)

    def summary(self, *, at_most: int | None = None) -> str:
        """One line a person can act on, e.g. ``Card Declined! — rolled back: ReserveHotel, BookFlight``.

        `at_most` shortens it for a picture: longer step lists as ``1000 steps: A, B … Z``, and
        the compensation failures past that many as ``; and 3 more``.
        """
        # Names and error text are untrusted (an upstream tool's message): shown, never obeyed.
        if self.status is SagaStatus.COMMITTED:
            # What stands: a step that failed and was retried (``charge_card#2``) is not committed.
            return f"{phrases.COMMITTED}: {phrases.listed(self.succeeded, at_most)}"
        reason = str(self.cause) if self.cause is not None else phrases.FAILED
        undone = self._undone(at_most)
        if not self.compensation_failures:
            return f"{reason} — {undone}"
        shown = self.compensation_failures[:at_most]
        standing = "; ".join(
            f"{printable_line(f.step)} ({f.error}, after {counted(f.attempts, 'attempt')})" for f in shown
        )
        if len(shown) < len(self.compensation_failures):
            standing += f"; and {len(self.compensation_failures) - len(shown)} more"
        return f"{reason} — {phrases.COULD_NOT_UNDO}: {standing} — {undone}"

    def _undone(self, at_most: int | None) -> str:
        """``rolled back: A, B`` and, apart, the steps whose undo found nothing to undo."""
        nothing = set(self.found_nothing)
        undone = phrases.listed([s for s in self.compensated if s not in nothing], at_most)
        found = phrases.listed([s for s in self.compensated if s in nothing], at_most)
        if undone and found:
            return f"{phrases.ROLLED_BACK}: {undone}; {phrases.NOTHING_TO_UNDO}: {found}"
        if found:
            return f"{phrases.ROLLED_BACK}, {phrases.NOTHING_TO_UNDO}: {found}"
        return f"{phrases.ROLLED_BACK}: {undone or phrases.NOTHING_TO_UNDO}"

    def to_json(self) -> dict[str, object]:
        """The report as JSON data (for MCP structured content and journals).

        Steps appear as ``{"index": position, "name": name}``, for clients that want the position
        without looking it up in ``steps``.
        """
        positions = {name: index for index, name in enumerate(self.steps)}

        def ref(step: str | None) -> dict[str, object] | None:
            return None if step is None else {"index": positions.get(step), "name": step}

        def err(info: ErrorInfo | None) -> dict[str, str] | None:
            return None if info is None else {"type": info.type, "message": info.message}

        return {
            "run_id": self.run_id,
            "saga": self.saga,
            "status": self.status.value,
            "steps": list(self.steps),
            "succeeded": [ref(s) for s in self.succeeded],
            "failed_step": ref(self.failed_step),
            "failure_kind": None if self.failure_kind is None else self.failure_kind.value,
            "cause": err(self.cause),
            "compensated": [ref(s) for s in self.compensated],
            "compensation_failures": [
                {"step": ref(f.step), "attempts": f.attempts, "error": err(f.error)}
                for f in self.compensation_failures
            ],
        }
