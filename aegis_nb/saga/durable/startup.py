"""Recover on start-up: a server's lifespan wrapped so unfinished runs are rolled back before it serves.

`durable_lifespan` is what ``AegisMCP(..., journal=...)`` uses; it needs nothing from the server but
its lifespan hook, so it lives here, next to recovery. The server's own lifespan is entered first
(steps may need the sessions it opens to compensate), then recovery runs, then requests are served.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from aegis_nb.saga.durable.journal import SqliteJournal
from aegis_nb.saga.durable.recovery import RecoveryIncomplete
from aegis_nb.saga.engine import WorkflowEngine
from aegis_nb.saga.journal import Journal

logger = logging.getLogger("aegis_nb.saga.durable")

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


def durable_engine(
    engine: WorkflowEngine | None, journal: str | os.PathLike[str] | Journal
) -> WorkflowEngine:
    """`engine` (a new one if None) journaling to `journal`: a `Journal`, or a path for a `SqliteJournal`.

    A journal made from a path rebuilds, at start-up, only the steps this process has run; an app
    whose module-level steps must be recovered after a restart passes its own journal instead:
    ``SqliteJournal(path, steps=[...], allow_modules=["myapp"])`` (see `StepResolver`).
    """
    if isinstance(journal, str | os.PathLike):
        journal = SqliteJournal(journal)
    if engine is None:
        return WorkflowEngine(journal=journal)
    if engine.journal is not None and engine.journal is not journal:
        raise TypeError(f"the engine already journals to {engine.journal!r}; pass the journal once")
    engine.journal = journal
    return engine


def durable_lifespan(engine: WorkflowEngine, inner: Lifespan | None = None) -> Lifespan:
    """A lifespan that enters `inner`, recovers `engine`'s unfinished runs, serves, then closes the journal.

    Runs whose steps cannot be rebuilt, or that name code the journal does not allow, are logged and
    left unfinished, nothing of theirs run (``aegis-nb runs`` shows them); a journal that cannot be
    used at all (others could write it, say) stops the start-up.
    """

    @asynccontextmanager
    async def lifespan(server: Any) -> AsyncIterator[Any]:
        async with AsyncExitStack() as stack:
            state = await stack.enter_async_context(inner(server)) if inner is not None else {}
            journal = engine.journal
            if isinstance(journal, SqliteJournal):
                await journal.open()
                stack.push_async_callback(journal.aclose)
            try:
                recovered = await engine.recover()
            except RecoveryIncomplete as exc:
                logger.error("start-up recovery left runs unfinished: %s", exc)
                recovered = exc.runs
            if recovered:
                logger.warning("start-up recovery rolled back %d unfinished run(s)", len(recovered))
            yield state

    return lifespan
