"""``%aegis_saga --background``: the run as a task the cell returns at once, and the user awaits later."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from aegis_nb.saga.outcome import SagaRun


class BackgroundRun:
    """A saga running on the kernel's loop. ``run = await job`` waits for its `SagaRun`.

    Its repr says what it is without task addresses, so a saved notebook reads the same every time.
    """

    __slots__ = ("name", "task")

    def __init__(self, name: str, task: asyncio.Task[SagaRun]) -> None:
        self.name = name
        self.task = task

    def done(self) -> bool:
        return self.task.done()

    def cancel(self) -> bool:
        """Interrupt the saga: completed steps are still compensated before it ends."""
        return self.task.cancel()

    def result(self) -> SagaRun:
        """The finished run (raises `asyncio.InvalidStateError` while it still runs)."""
        return self.task.result()

    def __await__(self) -> Generator[Any, None, SagaRun]:
        return self.task.__await__()

    def __repr__(self) -> str:
        if not self.task.done():
            return f"<saga {self.name} running in the background: `await` this for its SagaRun>"
        if self.task.cancelled():
            return f"<saga {self.name}: cancelled>"
        error = self.task.exception()
        if error is not None:
            return f"<saga {self.name}: raised {type(error).__name__}: {error}>"
        return f"<saga {self.name} finished: {self.task.result()!r}>"
