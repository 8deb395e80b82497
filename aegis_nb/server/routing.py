"""Which request a saga event belongs to: the observer of the MCP request running in this task.

Engine sinks are called in the task that runs the saga, so a context variable set around a request
reaches exactly that request's events (and those of tasks it spawns, which copy the context).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token

from aegis_nb.saga.engine import saga_name
from aegis_nb.saga.events import SagaEvent

Observer = Callable[[SagaEvent], None]

_observer: ContextVar[Observer | None] = ContextVar("aegis_request_observer", default=None)


def current_observer() -> Observer | None:
    """The observer of the request running in this task, if any."""
    return _observer.get()


class Observing:
    """Routes this task's saga events to `observer` and names its runs `workflow`, while entered.

    A class rather than a generator-based context manager: it is entered on every workflow call,
    and a generator costs twice as much to enter and leave.
    """

    __slots__ = ("_name_token", "_observer", "_token", "_workflow")
    _token: Token[Observer | None]
    _name_token: Token[str]

    def __init__(self, observer: Observer, workflow: str) -> None:
        self._observer = observer
        self._workflow = workflow

    def __enter__(self) -> None:
        self._token = _observer.set(self._observer)
        self._name_token = saga_name.set(self._workflow)

    def __exit__(self, *exc_info: object) -> None:
        saga_name.reset(self._name_token)
        _observer.reset(self._token)


def route_event(event: SagaEvent) -> None:
    """Engine sink: deliver `event` to the current request's observer. Never raises."""
    observer = _observer.get()
    if observer is not None:
        observer(event)
