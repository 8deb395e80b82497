"""Sinks: the synchronous consumers a run hands each event to (the live view, progress, captures).

`SinkSet` holds the sinks subscribed to an engine; `same_sink` tells whether two are one;
`direct_call` binds a sink's call once per run, since publishing is on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from types import BuiltinFunctionType, BuiltinMethodType, FunctionType, MethodType

from aegis_nb.saga.events import SagaEvent

Sink = Callable[[SagaEvent], object]
"""A synchronous event consumer; it must not block (hand work to a task if it has to)."""


class SinkSet:
    """A copy-on-write set of sinks, so detaching one mid-publish is safe."""

    __slots__ = ("_sinks",)

    def __init__(self, sinks: Iterable[Sink] = ()) -> None:
        self._sinks: tuple[Sink, ...] = tuple(sinks)

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The sinks subscribed now, in the order they were added."""
        return self._sinks

    def add(self, sink: Sink) -> None:
        """Subscribe `sink`; a sink that is not callable is a programming error (`TypeError`)."""
        if not callable(sink):
            raise TypeError(f"a sink must be callable, got {type(sink).__name__}")
        self._sinks = (*self._sinks, sink)

    def discard(self, sink: Sink) -> None:
        """Unsubscribe `sink` (`same_sink` decides), if it is subscribed."""
        self._sinks = tuple(s for s in self._sinks if not same_sink(s, sink))


def same_sink(a: Sink, b: Sink) -> bool:
    """Whether `a` and `b` are the same sink: the same object, or the same method of the same object.

    `obj.method` is a new bound method on every access, so identity alone would never match one;
    equality would match too much (two `EventCapture` lists holding equal events are equal).
    """
    if a is b:
        return True
    if isinstance(a, MethodType) and isinstance(b, MethodType):
        return a.__self__ is b.__self__ and a.__func__ is b.__func__
    if isinstance(a, BuiltinMethodType) and isinstance(b, BuiltinMethodType):  # `events.append`
        return a.__self__ is b.__self__ and a.__name__ == b.__name__
    return False


def direct_call(sink: Sink) -> Sink:
    """`sink`, or its class's ``__call__`` bound to it: the same call without a lookup each time.

    Calling an instance finds ``type(sink).__call__`` on every call, which costs more than a cheap
    sink's whole work (`EventCapture`'s call is ``list.append``); functions and bound methods are
    already direct.
    """
    if isinstance(sink, _DIRECT):
        return sink
    cls = type(sink)
    call = next((vars(klass)["__call__"] for klass in cls.__mro__ if "__call__" in vars(klass)), None)
    bind = getattr(call, "__get__", None)
    bound: Sink = sink if bind is None else bind(sink, cls)
    return bound


_DIRECT = (FunctionType, BuiltinFunctionType, MethodType, partial)
