"""Which request a saga event belongs to: the observer of the MCP request running in this task.

Engine sinks are called in the task that runs the saga, so a context variable set around a request
reaches exactly that request's events (and those of tasks it spawns, which copy the context).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from aegis_nb.saga.engine import saga_name
from aegis_nb.saga.events import SagaEvent

Observer = Callable[[SagaEvent], None]

_observer: ContextVar[Observer | None] = ContextVar("aegis_request_observer", default=None)


def current_observer() -> Observer | None:
    """The observer of the request running in this task, if any."""
    return _observer.get()


@contextmanager
def observing(observer: Observer, workflow: str) -> Iterator[None]:
    """Route this task's saga events to `observer`, and name its runs after `workflow`."""
    token = _observer.set(observer)
    name_token = saga_name.set(workflow)
    try:
        yield
    finally:
        saga_name.reset(name_token)
        _observer.reset(token)


def route_event(event: SagaEvent) -> None:
    """Engine sink: deliver `event` to the current request's observer. Never raises."""
    observer = _observer.get()
    if observer is not None:
        observer(event)
