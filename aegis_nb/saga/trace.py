"""One readable line per event, for terminals, logs and `make demo`."""

from __future__ import annotations

import math

from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    SagaCommitted,
    SagaCompensated,
    SagaEvent,
    SagaStarted,
    SagaStuck,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def describe(event: SagaEvent) -> str:
    """A one-line, secret-free description of `event`."""
    match event:
        case SagaStarted():
            limit = "no deadline" if event.deadline == math.inf else "deadline set"
            return f"saga {event.saga} started: {' -> '.join(event.steps)} ({limit})"
        case StepStarted():
            return f"  -> {event.step}.execute()"
        case StepSucceeded():
            return f"  <- {event.step} ok ({_ms(event.duration)})"
        case StepFailed():
            return f"  x  {event.step} {event.kind.value}: {event.error} ({_ms(event.duration)})"
        case StepTimedOut():
            return f"  x  {event.step} timed out after {_ms(event.duration)} (budget {_ms(event.budget)})"
        case CompensationStarted():
            again = f" (attempt {event.attempt})" if event.attempt > 1 else ""
            return f"  <~ {event.step}.compensate(){again}"
        case CompensationSucceeded():
            return f"  ~> {event.step} undone ({_ms(event.duration)})"
        case CompensationFailed():
            then = "will retry" if event.will_retry else "giving up"
            return f"  !! {event.step} compensation failed: {event.error} ({then})"
        case SagaCommitted():
            return f"saga {event.saga} committed in {_ms(event.duration)}"
        case SagaCompensated():
            return f"saga {event.saga} rolled back in {_ms(event.duration)}: {event.report.summary()}"
        case SagaStuck():
            return f"saga {event.saga} STUCK after {_ms(event.duration)}: {event.report.summary()}"
    raise TypeError(f"not a saga event: {event!r}")  # pragma: no cover
