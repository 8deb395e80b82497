"""What an agent saga's handle shows its holder: immutable values, words only at the wire (``to_json``).

`SagaTicket` is what ``saga_begin`` answers; `SagaState` what ``saga_status``, ``saga_commit`` and
``saga_rollback`` answer, built of one `StepView` per step; `Phase`, `StepState` and `EndReason` are
the closed vocabularies they use (aegis_nb.server.saga_handles keeps the registry that makes them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from aegis_nb.kernel.context import AegisContext


class Phase(enum.Enum):
    """Where an agent saga is: open, or how it ended."""

    OPEN = "open"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    STUCK = "stuck"


class StepState(enum.Enum):
    """What one step of an agent saga stands at now."""

    RUNNING = "running"
    LIVE = "live"
    """It acted, and stands (until a rollback undoes it, or a commit keeps it)."""
    FAILED = "failed"
    """Its call failed and it owes nothing (or the saga ended with nothing to undo for it)."""
    UNDONE = "undone"
    ORPHANED = "orphaned"
    """Its undo could not be called: a value the undo needs did not resolve from the call."""
    STUCK = "stuck"
    """Its undo was called and failed, every retry: its effect is left standing."""


class EndReason(enum.Enum):
    """Why a saga was rolled back other than by the agent's own ``saga_rollback``."""

    IDLE = "idle past its TTL"
    DEADLINE = "past its deadline"
    STEP_FAILED = "a step failed and the saga rolls back on error"
    STOPPED = "the server stopped"


@dataclass(frozen=True, slots=True)
class StepView:
    """One step as status reports it: flat index, name, state, and why, when it is not live."""

    index: int
    name: str
    state: StepState
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"index": self.index, "name": self.name, "state": self.state.value}
        if self.detail is not None:
            found["detail"] = self.detail
        return found


@dataclass(frozen=True, slots=True)
class SagaState:
    """A saga as its handle's holder may see it; times are seconds from when it was taken."""

    run_id: str
    name: str
    phase: Phase
    steps: tuple[StepView, ...]
    ttl: float
    idle_left: float | None
    deadline_left: float | None
    reason: str | None = None
    summary: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.phase.value,
            "run_id": self.run_id,
            "name": self.name,
            "steps": [s.to_json() for s in self.steps],
            "ttl_seconds": self.ttl,
            "idle_seconds_left": self.idle_left,
            "deadline_seconds_left": self.deadline_left,
            "reason": self.reason,
            "summary": self.summary,
        }

    def ended_as(self) -> str:
        """How it ended, in one line: the phase, why, and the rollback's summary when there is one."""
        said = self.phase.value
        if self.reason is not None:
            said += f" ({self.reason})"
        if self.summary is not None:
            said += f": {self.summary}"
        return said


@dataclass(frozen=True, slots=True)
class SagaTicket:
    """What `begin` gives the agent: the handle, the TTL and the deadline (seconds from now)."""

    handle: str
    run_id: str
    ttl: float
    deadline_left: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "saga": self.handle,
            "run_id": self.run_id,
            "ttl_seconds": self.ttl,
            "deadline_seconds_left": self.deadline_left,
        }


@dataclass(frozen=True, slots=True)
class StepDone:
    """A step that ran: its flat index (its idempotency key is ``run_id/index``) and the new context."""

    index: int
    context: AegisContext
