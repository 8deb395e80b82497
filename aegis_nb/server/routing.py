"""Which request a saga event belongs to: the observer of the MCP request that started the run.

A workflow call runs its sagas in the request's own task, so context variables set around the call
reach exactly that request's runs (and those of tasks it spawns, which copy the context): the
engine adds the observer to each run's sinks when the run starts (`run_observers`) and names the
run after the workflow (`saga_name`).

Every request an `AegisMCP` serves starts from a clean slate, plain tools included: the SDK runs
an in-process server's request handler in the *sender's* context, so a tool called from another
server's workflow step would otherwise inherit that workflow's observer and name, and its own
sagas would be reported (as progress, run id and steps) to the caller's client.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import Token
from typing import Any

from aegis_nb.saga.engine import run_observers, saga_name
from aegis_nb.saga.events import SagaEvent
from aegis_nb.saga.sinks import Sink

Observer = Callable[[SagaEvent], None]


class Observing:
    """Hands the runs started in this task to `observer` (None: to no one) and names them `name`.

    A class rather than a generator-based context manager: it is entered on every tool and workflow
    call, and a generator costs twice as much to enter and leave.
    """

    __slots__ = ("_name", "_name_token", "_observers", "_token")
    _token: Token[tuple[Sink, ...]]
    _name_token: Token[str]

    def __init__(self, observer: Observer | None, name: str) -> None:
        self._observers: tuple[Sink, ...] = () if observer is None else (observer,)
        self._name = name

    def __enter__(self) -> None:
        self._token = run_observers.set(self._observers)
        self._name_token = saga_name.set(self._name)

    def __exit__(self, *exc_info: object) -> None:
        saga_name.reset(self._name_token)
        run_observers.reset(self._token)


def in_a_clean_slate(fn: Callable[..., Any], tool_name: str) -> Callable[..., Any]:
    """A sync tool that, in its worker thread (a copy of the caller's context), runs its sagas for no
    request and names them after itself, as async tools do (see above).

    `functools.wraps` keeps what the SDK reads: the signature, the annotations (resolved in `fn`'s
    own module), the name and the docstring.
    """

    @functools.wraps(fn)
    def run_tool(*args: Any, **kwargs: Any) -> Any:
        with Observing(None, tool_name):
            return fn(*args, **kwargs)

    return run_tool
