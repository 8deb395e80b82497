"""Saga events as MCP progress notifications, and the per-request observer that routes them.

Engine sinks are synchronous and must not block, while progress notifications are awaited sends.
A `RequestObserver` records the request's events; a task of the request sends them on through
``ctx.report_progress``. Progress counts events (so it only grows,
as MCP requires, through compensation too); the message says what happens ("step 2 of 3:
executing ReserveHotel", "compensating BookFlight"), as one printable line: a client may show it
in a terminal, and names and errors may hold an upstream tool's escape sequences.

All of that only when the client sent a progress token (`progress_sender`): a request without
one just records its events, with no task and no per-event work.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext

from aegis_nb.kernel import phrases
from aegis_nb.kernel.printable import printable_line
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

logger = logging.getLogger("aegis_nb.server")

ReportProgress = Callable[[float, float | None, str | None], Awaitable[None]]
"""``ctx.report_progress(progress, total, message)`` of the MCP SDK's request context."""


def progress_sender(request: ServerRequestContext[Any, Any] | None) -> ReportProgress | None:
    """The request's progress sender, or None when the client sent no progress token (or no request).

    Over JSON-RPC (stdio, HTTP) the token is in the request's ``_meta``. The SDK's in-process
    dispatcher keeps the client's progress callback in its dispatch context instead, so that
    context is asked. A context of unknown make counts as wanting progress: the slower path, whose
    sends the SDK drops when there is no token.
    """
    if request is None:
        return None
    meta = request.meta
    session = request.session
    if meta is not None and meta.get("progress_token") is not None:
        return session.report_progress
    if _sends_no_progress(getattr(session, "_request_outbound", None)):
        return None
    return session.report_progress


# Where each of the SDK's dispatch contexts keeps what progress needs (None: the client wants none):
# the in-process one the callback, the JSON-RPC and the 2026 HTTP ones the token. Wrappers hold
# the real context as ``_inner``.
_PROGRESS_ATTRIBUTES = ("_on_progress", "_progress_token", "progress_token")


def _sends_no_progress(dispatch: object) -> bool:
    """True only when `dispatch` is an SDK dispatch context we know and it holds no progress target."""
    for _ in range(4):  # a wrapper or two, never a cycle
        if dispatch is None:
            return False
        for attribute in _PROGRESS_ATTRIBUTES:
            if hasattr(dispatch, attribute):
                return getattr(dispatch, attribute) is None
        dispatch = getattr(dispatch, "_inner", None)
    return False


def progress_message(event: SagaEvent, total_steps: int) -> str:
    """The human-readable progress line for one event, in the words of `phrases`, with no control
    character (`printable_line`)."""
    return printable_line(_words(event, total_steps))


def _words(event: SagaEvent, total_steps: int) -> str:
    if isinstance(event, StepEvent):
        # A dynamic saga has no plan (`total_steps` 0): its steps are counted as they come. A
        # group's members interleave, each event naming its own step; the mark says why.
        where = f"step {event.index + 1}" + (f" of {total_steps}" if total_steps else "")
        if event.group is not None:
            where += " (in parallel)"
        match event:
            case StepStarted():
                return f"{where}: {phrases.EXECUTING} {event.step}"
            case StepSucceeded():
                return f"{where}: {event.step} {phrases.DONE}"
            case StepFailed():
                return f"{where}: {event.step} {phrases.FAILED}: {event.error}"
            case StepTimedOut():
                return f"{where}: {event.step} {phrases.TIMED_OUT}"
            case CompensationStarted():
                again = f" (attempt {event.attempt})" if event.attempt > 1 else ""
                return f"{phrases.COMPENSATING} {event.step}{again}"
            case CompensationSucceeded():
                return f"{event.step} {phrases.NOTHING_TO_UNDO if event.nothing_to_undo else phrases.UNDONE}"
            case CompensationFailed():
                then = phrases.WILL_RETRY if event.will_retry else phrases.GIVING_UP
                return f"{phrases.COMPENSATING} {event.step} {phrases.FAILED}: {event.error} ({then})"
    match event:
        case SagaStarted():
            plan = f": {' -> '.join(event.steps)}" if event.steps else ""  # none known ahead: dynamic
            return f"{event.saga} {phrases.STARTED}{plan}"
        case SagaCommitted():
            return f"{event.saga} {phrases.COMMITTED}"
        case SagaRolledBackEvent():
            return f"{event.saga} {phrases.ROLLED_BACK}: {event.report.summary()}"
        case SagaStuck():
            return f"{event.saga} {phrases.STUCK.upper()}: {event.report.summary()}"
    raise TypeError(f"not a saga event: {event!r}")  # pragma: no cover


class RequestObserver:
    """Collects one request's saga events and hands them, in order, to a progress-sending task.

    The sink only appends and sets an event, so a burst of saga events wakes the sender once; the
    engine's hot path pays a list append per event, not a channel hand-off.
    """

    def __init__(self) -> None:
        self.events: list[SagaEvent] = []
        self._totals: dict[str, int] = {}
        self._wake = anyio.Event()
        self._closed = False

    def __call__(self, event: SagaEvent) -> None:
        self.events.append(event)
        if isinstance(event, SagaStarted):
            self._totals[event.run_id] = len(event.steps)
        self._wake.set()

    def close(self) -> None:
        """No more events: the progress task sends what is left, then ends."""
        self._closed = True
        self._wake.set()

    async def forward_progress(self, report: ReportProgress) -> None:
        """Send one progress notification per event until `close()`; a failed send stops forwarding."""
        sent = 0
        while True:
            await self._wake.wait()
            # A fresh event before draining: whatever arrives while we send wakes the next round.
            self._wake = anyio.Event()
            while sent < len(self.events):
                event = self.events[sent]
                sent += 1
                try:
                    await report(
                        float(sent), None, progress_message(event, self._totals.get(event.run_id, 0))
                    )
                except Exception:
                    logger.warning("progress notification failed; no more progress for this call")
                    return
            if self._closed:
                return
