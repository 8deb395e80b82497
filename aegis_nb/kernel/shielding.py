"""Shielding: await work that a cancellation must not cut off, asyncio's native one included.

`anyio.CancelScope(shield=True)` stops only anyio's cancellation. On asyncio a native `Task.cancel()`
(`asyncio.timeout`, `wait_for`, a cancelled `asyncio.TaskGroup`) goes through it, so work that must
finish (a rollback, a journal write the engine will act on) runs through `run_shielded`, which stops
both and raises the held cancellation once the work is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar, cast

import anyio
import sniffio

T = TypeVar("T")


async def run_shielded(work: Coroutine[Any, Any, T]) -> T:
    """Await `work` shielded from cancellation, a native asyncio `Task.cancel()` included.

    On asyncio, `Task.cancel()` throws CancelledError into whatever the task awaits, anyio shield
    or not. So there `work` runs in a task of its own (in a copy of this context, like any task):
    a CancelledError that lands on this task is held until `work` is done, then raised unchanged.
    `Task.cancelling()` is left as `cancel()` set it, so `asyncio.timeout` and anyio scopes further
    out still recognise their cancellation. An exception from `work` wins over a held cancellation,
    as one raised in a ``finally`` would. Elsewhere the anyio shield is all it takes.
    """
    if sniffio.current_async_library() != "asyncio":
        with anyio.CancelScope(shield=True):
            return await work
    handoff = Handoff()
    task = asyncio.get_running_loop().create_task(_settle(work, handoff))
    # Keeps an anyio scope outside from re-delivering its cancellation on every loop turn meanwhile.
    with anyio.CancelScope(shield=True):
        cancelled = await outlast(task, handoff=handoff)
    result, error = task.result()
    del task
    try:
        if error is not None:
            raise error
        if cancelled is not None:
            raise cancelled
    finally:
        del error, cancelled  # their tracebacks hold this frame: no cycle through it
    return cast(T, result)


class Handoff:
    """Lets a task wake whoever `outlast`s it as its very last act.

    A task's done callbacks run a loop turn after it ends, behind timers that came due meanwhile
    (a live view's final redraw of the run, say), which would then run before the waiter resumes.
    """

    __slots__ = ("_waiter",)

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        """Called by the task as it ends: its waiter resumes on the next loop turn, first."""
        if self._waiter is not None:
            _wake(self._waiter, None)


async def outlast(
    task: asyncio.Future[Any],
    on_cancel: Callable[[], object] | None = None,
    *,
    handoff: Handoff | None = None,
) -> asyncio.CancelledError | None:
    """Wait until `task` is done, whatever native cancellations land on this task meanwhile.

    Returns the first of them (None if none came), for the caller to raise when it sees fit, and
    calls `on_cancel` at each, to pass it on in a gentler form (cancelling an anyio scope, say).
    A task given `handoff` may wake this waiter itself as it ends (`Handoff.wake`).
    """
    loop = asyncio.get_running_loop()
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        # A future of our own to wait on: cancelling this task cancels it, not `task` (which
        # `await task` would). Lighter than asyncio.wait, which costs a third of the detour.
        done = loop.create_future()
        task.add_done_callback(partial(_wake, done))
        if handoff is not None:
            handoff._waiter = done
        try:
            await done
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
            if on_cancel is not None:
                on_cancel()
    return cancelled


def _wake(done: asyncio.Future[None], _: object) -> None:
    if not done.done():  # a waiter cancelled with its task is left as it is
        done.set_result(None)


async def _settle(work: Coroutine[Any, Any, T], handoff: Handoff) -> tuple[T | None, BaseException | None]:
    """`work`'s result or exception, to raise in the awaiting task, which it wakes as it ends.

    Raised out of a task, a KeyboardInterrupt or SystemExit would stop the event loop instead.
    """
    try:
        outcome: tuple[T | None, BaseException | None] = (await work, None)
    except BaseException as exc:
        outcome = (None, exc)
    handoff.wake()
    return outcome
