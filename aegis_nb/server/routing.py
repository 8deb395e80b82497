"""Which request a saga event belongs to: the observer of the MCP request that started the run.

A workflow call runs its sagas in the request's own task, so context variables set around the call
reach exactly that request's runs (and those of tasks it spawns, which copy the context): the
engine adds the observer to each run's sinks when the run starts (`run_observers`) and names the
run after the workflow (`saga_name`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import Token

from aegis_nb.saga.engine import run_observers, saga_name
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.recorder import Sink

Observer = Callable[[SagaEvent], None]


class Observing:
    """Hands the runs started in this task to `observer` and names them `workflow`, while entered.

    A class rather than a generator-based context manager: it is entered on every workflow call,
    and a generator costs twice as much to enter and leave.
    """

    __slots__ = ("_name_token", "_observer", "_token", "_workflow")
    _token: Token[tuple[Sink, ...]]
    _name_token: Token[str]

    def __init__(self, observer: Observer, workflow: str) -> None:
        self._observer = observer
        self._workflow = workflow

    def __enter__(self) -> None:
        self._token = run_observers.set((self._observer,))
        self._name_token = saga_name.set(self._workflow)

    def __exit__(self, *exc_info: object) -> None:
        saga_name.reset(self._name_token)
        run_observers.reset(self._token)
