"""Do a saga's arguments fit its step? Checked before the first step runs, from signatures alone.

The engine passes a step's ``execute`` and its ``compensate`` the same arguments; a missing or
unexpected one is a `SagaDefinitionError` before anything runs, not a `TypeError` mid-saga whose
compensation fails the same way. Binding needs only the arguments' number and names, so answers are
cached by those.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from types import FunctionType
from typing import Any


def argument_receiver(step: object, method: str) -> Callable[..., object] | None:
    """What receives ``step.<method>``'s saga arguments (ctx first): the method, or what it forwards to.

    A step whose method only passes ``*args, **kwargs`` on (a `FunctionStep`, a wrapper that injects
    faults) defines ``forwards_to(method)`` returning the real receiver, so its arguments can be
    checked before the saga runs; it returns None where nothing receives them (a read-only step's
    missing compensation). Looked up on the class, so a ``__getattr__`` cannot make one up.
    """
    forwards_to = getattr(type(step), "forwards_to", None)
    if forwards_to is not None and not isinstance(step, type):
        receiver: Callable[..., object] | None = forwards_to(step, method)
        return receiver
    return getattr(step, method, None)


def arguments_mismatch(step: object, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """Why `args` and `kwargs` do not bind to `step`'s execute or compensate (after ctx), or None."""
    return step_mismatch(step, len(args), tuple(kwargs))


def step_mismatch(step: object, nargs: int, keys: tuple[str, ...]) -> str | None:
    """How `nargs` positional arguments and keywords `keys` fail to bind to `step`'s methods, or None."""
    for method in _METHOD_ORDER:
        receiver = argument_receiver(step, method)
        if receiver is None:
            continue
        if inspect.ismethod(receiver):  # keyed by its function: a bound method is new on every read
            mismatch = _receiver_mismatch(method, receiver.__func__, True, nargs, keys)
        else:
            try:
                mismatch = _receiver_mismatch(method, receiver, False, nargs, keys)
            except TypeError:  # an unhashable callable object: checked without the cache
                mismatch = _receiver_mismatch.__wrapped__(method, receiver, False, nargs, keys)
        if mismatch is not None:
            return mismatch
    return None


@functools.lru_cache(maxsize=1024)
def class_mismatch(cls: type, nargs: int, keys: tuple[str, ...]) -> str | None:
    """`step_mismatch` for any instance of a checked class that overrides none of its methods.

    Cached by class and argument shape: a saga checks each of its classes on every run, and the
    engine's budget is a few microseconds per step (bench/engine.py). A class whose methods are
    replaced after its first saga keeps its first answer; a redefined class is a new class.
    """
    for method in _METHOD_ORDER:
        raw = inspect.getattr_static(cls, method, None)
        if isinstance(raw, staticmethod):
            mismatch = _receiver_mismatch(method, raw.__func__, False, nargs, keys)
        elif isinstance(raw, classmethod | FunctionType):  # the class or the instance takes the first
            function = raw.__func__ if isinstance(raw, classmethod) else raw
            mismatch = _receiver_mismatch(method, function, True, nargs, keys)
        else:  # some other descriptor: nothing here can tell what it binds to, the call will
            continue
        if mismatch is not None:
            return mismatch
    return None


@functools.lru_cache(maxsize=1024)
def _receiver_mismatch(
    method: str, receiver: Callable[..., object], bound: bool, nargs: int, keys: tuple[str, ...]
) -> str | None:
    """Why ``receiver(ctx, <nargs positional>, **<keys>)`` cannot bind (after `bound`'s self), or None.

    Binding needs only the arguments' number and names, never their values, so it is cached by
    those; a receiver without a signature (a builtin) is left to its call.
    """
    try:
        signature = inspect.signature(receiver)
    except (TypeError, ValueError):
        return None
    placeholders = (None,) * (1 + bound + nargs)
    try:
        signature.bind(*placeholders, **dict.fromkeys(keys))
    except TypeError as exc:
        shown = _plain_signature(signature, bound)
        given = _describe_arguments(nargs, keys)
        return f"{method}{shown} does not fit the arguments the saga gives it ({given}): {exc}"
    return None


_METHOD_ORDER = ("execute", "compensate")


def _plain_signature(signature: inspect.Signature, bound: bool) -> str:
    """`signature` as a reader writes it: no annotations, no ``self``."""
    parameters = list(signature.parameters.values())
    if bound and parameters and parameters[0].kind is not inspect.Parameter.VAR_POSITIONAL:
        parameters = parameters[1:]
    plain = [parameter.replace(annotation=inspect.Parameter.empty) for parameter in parameters]
    return str(signature.replace(parameters=plain, return_annotation=inspect.Signature.empty))


def _describe_arguments(nargs: int, keys: tuple[str, ...]) -> str:
    """The saga's arguments by number and name only: their values may be secrets."""
    parts = []
    if nargs:
        parts.append(f"{nargs} positional argument{'s' if nargs != 1 else ''}")
    if keys:
        parts.append(f"keyword{'s' if len(keys) != 1 else ''} {', '.join(keys)}")
    return f"{' and '.join(parts)} after the context" if parts else "none besides the context"
