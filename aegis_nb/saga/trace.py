"""One readable line per event, for terminals, logs and `make demo`.

Names and error text are the user's or an upstream tool's, and may hold newlines (a validation
error, a traceback), lone surrogates (undecodable bytes from ``os.fsdecode``) or escape sequences
that would drive the terminal: `_flat` puts them on one printable line (`printable_line`).

A member of a parallel group is marked with its place, ``[parallel 2.1]``: the group that starts at
step 2 (steps numbered from 1, as in the diagrams), member 1. Members' events interleave, so each
line says whose it is. A dynamic saga names no steps when it starts; a rollback its code asked for
(`Saga.rollback(reason)`) ends ``rolled back (requested) in 50.0 ms: <reason> — rolled back: …``.
"""

from __future__ import annotations

import math

from aegis_nb.kernel import phrases
from aegis_nb.kernel.printable import printable_line
from aegis_nb.kernel.report import FailureKind
from aegis_nb.saga.events import (
    CompensationFailed,
    CompensationStarted,
    CompensationSucceeded,
    SagaCommitted,
    SagaEvent,
    SagaRolledBackEvent,
    SagaStarted,
    SagaStuck,
    StepEvent,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StepTimedOut,
)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _flat(text: object) -> str:
    """`text` on one printable line."""
    return printable_line(str(text))


def _saga(name: str) -> str:
    """``saga trip``; a saga left with the default name, ``saga``, is not called ``saga saga``."""
    return "saga" if name == "saga" else f"saga {_flat(name)}"


def _step(event: StepEvent) -> str:
    """The step's name, after its place in its parallel group if it is a member."""
    name = _flat(event.step)
    if event.group is None:
        return name
    return f"[parallel {event.group + 1}.{event.index - event.group + 1}] {name}"


def describe(event: SagaEvent) -> str:
    """A one-line, secret-free description of `event`, in the words of `phrases`."""
    match event:
        case SagaStarted():
            limit = phrases.NO_DEADLINE if event.deadline == math.inf else phrases.DEADLINE_SET
            # A dynamic saga's steps are added as it runs: none is known yet.
            steps = " -> ".join(map(_flat, event.steps)) or "steps added as it runs"
            return f"{_saga(event.saga)} {phrases.STARTED}: {steps} ({limit})"
        case StepStarted():
            return f"  -> {_step(event)}.{phrases.EXECUTE}"
        case StepSucceeded():
            return f"  <- {_step(event)} {phrases.OK} ({_ms(event.duration)})"
        case StepFailed():
            error = _flat(event.error)
            return f"  x  {_step(event)} {event.kind.value}: {error} ({_ms(event.duration)})"
        case StepTimedOut():
            took, budget = _ms(event.duration), _ms(event.budget)
            return f"  x  {_step(event)} {phrases.TIMED_OUT} after {took} ({phrases.BUDGET} {budget})"
        case CompensationStarted():
            again = f" (attempt {event.attempt})" if event.attempt > 1 else ""
            return f"  <~ {_step(event)}.{phrases.COMPENSATE}{again}"
        case CompensationSucceeded():
            undone = phrases.NOTHING_TO_UNDO if event.nothing_to_undo else phrases.UNDONE
            return f"  ~> {_step(event)} {undone} ({_ms(event.duration)})"
        case CompensationFailed():
            then = phrases.WILL_RETRY if event.will_retry else phrases.GIVING_UP
            failed = phrases.COMPENSATION_FAILED
            return f"  !! {_step(event)} {failed}: {_flat(event.error)} ({then})"
        case SagaCommitted():
            return f"{_saga(event.saga)} {phrases.COMMITTED} in {_ms(event.duration)}"
        case SagaRolledBackEvent():
            # A rollback the saga's code asked for is marked so; its reason leads the summary.
            asked = event.report.failure_kind is FailureKind.REQUESTED
            how = f" ({FailureKind.REQUESTED.value})" if asked else ""
            summary = _flat(event.report.summary())
            return f"{_saga(event.saga)} {phrases.ROLLED_BACK}{how} in {_ms(event.duration)}: {summary}"
        case SagaStuck():
            summary = _flat(event.report.summary())
            return f"{_saga(event.saga)} {phrases.STUCK.upper()} after {_ms(event.duration)}: {summary}"
    raise TypeError(f"not a saga event: {event!r}")  # pragma: no cover
