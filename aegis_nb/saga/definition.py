"""What a step is, and the checked, normalized form (`StepSpec`) the engine runs.

A step is any object with ``async execute(ctx, *args, **kwargs)`` and ``async compensate(ctx, *args,
**kwargs)``. Optional attributes tune it: ``name`` (display name), ``timeout`` (seconds, on top of the
context deadline), ``compensation_retry`` (a `RetryPolicy`) and ``in_doubt`` (compensate this step
even when its own execute failed, timed out or was cancelled, because the effect may have happened;
not after a refusing `ToolError`, which is the tool's own answer that it did not act).

Sync ``def`` methods are rejected rather than run in a thread: a thread cannot be cancelled at the
deadline, so the timeout guarantee would be a lie. A step's arguments must bind to both its
``execute`` and its ``compensate`` (the engine passes each the same ones): a missing or unexpected
argument is a `SagaDefinitionError` before the first step runs, not a `TypeError` mid-saga whose
compensation fails the same way. A step whose methods only pass ``*args, **kwargs`` on names the
function that receives them with ``forwards_to(method)`` (see `argument_receiver`).
"""

from __future__ import annotations

import enum
import functools
import inspect
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain, count, repeat
from operator import attrgetter
from types import FunctionType, MappingProxyType
from typing import Any, Protocol, runtime_checkable

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError
from aegis_nb.saga.parallel import StepGroup
from aegis_nb.saga.retry import RetryPolicy


@runtime_checkable
class Step(Protocol):
    """The shape the engine needs; no base class required."""

    async def execute(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> AegisContext | None: ...

    async def compensate(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> object: ...


SagaEntry = Step | tuple[Step, Sequence[Any], Mapping[str, Any]]
"""One entry of a saga list: a bare step or ``(step, args, kwargs)``."""


@dataclass(frozen=True, slots=True)
class StepSpec:
    """A checked saga entry, as the engine runs it: its place, its unique name, the live step object,
    its arguments and its resolved options (`retry` None: the engine's policy); `group` places a
    parallel group's member in it.

    Live: `step` is the object itself, so a spec never leaves the process. What crosses into a
    journal or a Temporal history is a `StepRecord` (``saga.durable.steprecord``), which names the
    step by its locator instead.
    """

    index: int
    name: str
    step: Any
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    timeout: float | None
    retry: RetryPolicy | None
    in_doubt: bool
    group: StepGroup | None = None


def step_name(step: object) -> str:
    """The display name of a step: its ``name`` attribute, else its class name."""
    name = getattr(step, "name", None)
    if isinstance(name, str) and name:
        return name
    return _default_name(step)


def _default_name(step: object) -> str:
    """The name of a step without one: its class's, or its own if it is a class."""
    return step.__name__ if isinstance(step, type) else type(step).__name__


def normalize_saga(entries: object) -> tuple[StepSpec, ...]:
    """Check every entry and resolve its options; raise `SagaDefinitionError` naming the culprit."""
    if type(entries) is not list and (isinstance(entries, str | bytes) or not isinstance(entries, Sequence)):
        raise SagaDefinitionError(
            f"a saga is a list of steps or (step, args, kwargs) tuples, got {type(entries).__name__}"
        )
    if not entries:
        raise SagaDefinitionError("the saga has no steps: there is nothing to run or undo")
    # Validation runs on every run, so each class is checked once per saga (sagas often repeat a
    # class many times), and the common saga, bare steps of classes with async methods and no
    # tuning attributes, is built in a few passes that run at C speed rather than entry by entry.
    if isinstance(entries[0], tuple):  # (step, args, kwargs) entries: checked one by one
        return _normalize_entries(entries, {})
    types = set(map(type, entries))
    if any(issubclass(cls, tuple) for cls in types):
        return _normalize_entries(entries, {})
    classes = {cls: _classify(cls) for cls in types}
    if all(kind is _StepClass.PLAIN for kind in classes.values()) and not _set_on_instances(
        entries, _OVERRIDABLE
    ):
        for cls in classes:  # bare steps get no arguments: each class checked once, from the cache
            mismatch = _class_mismatch(cls, 0, ())
            if mismatch is not None:
                index = next(i for i, entry in enumerate(entries) if type(entry) is cls)
                raise SagaDefinitionError(f"{_where(index, cls.__name__)}: {mismatch}")
        return _plain_specs(entries)
    return _normalize_entries(entries, classes)


def _plain_specs(steps: Sequence[Any]) -> tuple[StepSpec, ...]:
    """Specs of bare steps whose classes were checked and whose options are all defaults."""
    names = list(map(_class_name, map(type, steps)))
    _make_unique(names)
    options = repeat(_NO_ARGS), repeat(_NO_KWARGS), repeat(None), repeat(None), repeat(False)
    return tuple(map(StepSpec, count(), names, steps, *options))


def _normalize_entries(entries: Sequence[Any], classes: dict[type, _StepClass]) -> tuple[StepSpec, ...]:
    """Any saga: ``(step, args, kwargs)`` entries, tuned steps, steps that fail their checks.

    One pass that calls out only for what an entry needs: a workflow normalizes its few steps on
    every call, amid a server's other work, where each extra helper and lookup costs several
    times what it does in a tight loop.
    """
    specs: list[StepSpec] = []
    names: list[str] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, tuple):
            step, args, kwargs = _split_entry(index, entry)
        else:
            step, args, kwargs = entry, _NO_ARGS, _NO_KWARGS
        cls: type = type(step)
        kind = classes.get(cls)
        if kind is None:
            kind = classes[cls] = _classify(cls)
        own = getattr(step, "__dict__", _NO_STATE)
        # A checked class's methods are trusted unless the instance replaces them.
        checked = kind is not _StepClass.UNCHECKED and "execute" not in own and "compensate" not in own
        try:  # free in 3.11 unless something raises
            if checked and kind is _StepClass.PLAIN:
                # The class sets no option, so only the instance's own attributes can.
                if _TUNING.isdisjoint(own):
                    mismatch = _class_mismatch(cls, len(args), tuple(kwargs))
                    if mismatch is not None:
                        raise SagaDefinitionError(f"{_where(index, cls.__name__)}: {mismatch}")
                    spec = StepSpec(index, cls.__name__, step, args, kwargs, None, None, False)
                else:
                    spec = _resolve(index, step, args, kwargs, own.get, methods_checked=True)
            else:
                spec = _resolve(index, step, args, kwargs, partial(getattr, step), methods_checked=checked)
        except SagaDefinitionError:
            raise
        except Exception as exc:  # a property or __getattr__ that raises: say which entry, chain why
            raise SagaDefinitionError(
                f"{_where(index, _default_name(step))}: reading the step's attributes raised "
                f"{type(exc).__name__} (see the cause above)"
            ) from exc
        specs.append(spec)
        names.append(spec.name)
    if len(set(names)) != len(names):
        _make_unique(names)
        # Built again rather than `dataclasses.replace`d, which costs several times a constructor.
        specs = [
            StepSpec(s.index, name, s.step, s.args, s.kwargs, s.timeout, s.retry, s.in_doubt)
            for s, name in zip(specs, names, strict=True)
        ]
    return tuple(specs)


def _set_on_instances(steps: Sequence[Any], attributes: frozenset[str]) -> bool:
    """Whether any of `steps` sets one of `attributes` on itself (shadowing its class)."""
    states = map(getattr, steps, repeat("__dict__"), repeat(()))
    return not attributes.isdisjoint(chain.from_iterable(states))


def _make_unique(names: list[str]) -> None:
    """Give repeated names a ``#n`` suffix in place, so every step, lifeline and report entry is unambiguous.

    Reports name steps by these names, so they must come out unique even when a step is already
    called something like ``Reserve#2``: such a number is skipped.
    """
    distinct = set(names)
    if len(distinct) == len(names):  # the usual case, and a set is far cheaper than a Counter
        return
    if len(distinct) == 1:  # a batch of one step class: number them all in one pass
        (name,) = distinct
        names[:] = [f"{name}#{number}" for number in range(1, len(names) + 1)]
        return
    repeated = {name for name, times in Counter(names).items() if times > 1}
    taken = set(distinct)
    numbers = dict.fromkeys(repeated, 0)
    for position, name in enumerate(names):
        if name in repeated:
            numbers[name] += 1
            while f"{name}#{numbers[name]}" in taken:
                numbers[name] += 1
            names[position] = f"{name}#{numbers[name]}"
            taken.add(names[position])


_class_name = attrgetter("__name__")
_is_str = str.__instancecheck__
_NO_ARGS: tuple[Any, ...] = ()
_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})
_NO_STATE: Mapping[str, Any] = MappingProxyType({})

_TUNING = frozenset(("name", "timeout", "compensation_retry", "in_doubt", "is_complete"))
_METHODS = frozenset(("execute", "compensate"))
_OVERRIDABLE = _METHODS | _TUNING
# A class that forwards its arguments elsewhere is read per instance too: its receivers are.
_TUNING_OR_DYNAMIC = _TUNING | {"__getattr__", "forwards_to"}


def _resolve(
    index: int,
    step: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    option: Callable[[str, Any], Any],
    *,
    methods_checked: bool,
) -> StepSpec:
    """Check one step (its methods too, unless its class was checked) and read its options.

    `option(attribute, default)` reads an option: the instance's own dict when its class defines
    none, else ``getattr`` on the step.
    """
    name = option("name", None)
    if not (isinstance(name, str) and name):
        # A class used as a step (classmethods) is unchecked: its own name, not its metaclass's.
        name = type(step).__name__ if methods_checked else _default_name(step)
    if not methods_checked:
        _check_method(step, "execute", _where(index, name))
        _check_method(step, "compensate", _where(index, name))
    if option("is_complete", True) is False:
        raise SagaDefinitionError(
            f"{_where(index, name)}: the step has no compensation; attach one with "
            f"@{name}.compensation, or declare it @step(read_only=True) if it changes nothing"
        )
    mismatch = _step_mismatch(step, len(args), tuple(kwargs))
    if mismatch is not None:
        raise SagaDefinitionError(f"{_where(index, name)}: {mismatch}")
    # Read once per step per run: the usual values pass without building the error's wording.
    timeout = option("timeout", None)
    if timeout is not None:
        timeout = _option_timeout(timeout, index, name)
    retry = option("compensation_retry", None)
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise SagaDefinitionError(
            f"{_where(index, name)}: compensation_retry must be a RetryPolicy, got {type(retry).__name__}"
        )
    in_doubt = option("in_doubt", False)
    if in_doubt is not False and in_doubt is not True:
        raise SagaDefinitionError(f"{_where(index, name)}: in_doubt must be a bool, got {in_doubt!r}")
    return StepSpec(index, name, step, args, kwargs, timeout, retry, in_doubt)


def _where(index: int, name: str) -> str:
    """How errors name a saga entry."""
    return f"saga entry {index} ({name})"


def _split_entry(index: int, entry: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...], Mapping[str, Any]]:
    if len(entry) != 3:
        raise SagaDefinitionError(
            f"saga entry {index}: expected (step, args, kwargs), got a tuple of {len(entry)} item(s)"
        )
    step, args, kwargs = entry
    # Exact types first: the abstract-class checks cost more than the rest of a plain entry.
    if type(args) not in (tuple, list) and (
        isinstance(args, str | bytes | Mapping) or not isinstance(args, Sequence)
    ):
        raise SagaDefinitionError(
            f"saga entry {index} ({step_name(step)}): args must be a tuple or list, got {type(args).__name__}"
        )
    if type(kwargs) is not dict and not isinstance(kwargs, Mapping):
        raise SagaDefinitionError(
            f"saga entry {index} ({step_name(step)}): kwargs must be a mapping, got {type(kwargs).__name__}"
        )
    if kwargs and not all(map(_is_str, kwargs)):
        raise SagaDefinitionError(f"saga entry {index} ({step_name(step)}): kwargs keys must be str")
    return step, tuple(args), dict(kwargs)


class _StepClass(enum.Enum):
    """What checking a step class once tells about its instances."""

    PLAIN = "async methods, no tuning attributes"
    TUNED = "async methods, tuning attributes to read per instance"
    UNCHECKED = "missing or sync methods: check each instance, which raises"


def _classify(cls: type) -> _StepClass:
    if not (_is_async(getattr(cls, "execute", None)) and _is_async(getattr(cls, "compensate", None))):
        return _StepClass.UNCHECKED
    # Where an instance would find an option: its class's MRO (object defines none of them), or
    # a __getattr__ that makes one up. Reading the dicts avoids hasattr's exception per miss.
    for klass in cls.__mro__[:-1]:
        if not _TUNING_OR_DYNAMIC.isdisjoint(vars(klass)):
            return _StepClass.TUNED
    return _StepClass.PLAIN


def _check_method(step: object, method: str, where: str) -> None:
    fn = getattr(step, method, None)
    if fn is None:
        raise SagaDefinitionError(f"{where}: a step needs async {method}(ctx, ...) and has no {method}")
    if isinstance(step, type) and isinstance(inspect.getattr_static(step, method, None), FunctionType):
        # The class itself, not an instance: its execute would take the context as `self`, and
        # fail only when its turn comes, after the steps before it have acted.
        raise SagaDefinitionError(
            f"{where}: {step.__name__} is a step class; pass an instance, {step.__name__}(...)"
        )
    if not _is_async(fn):
        if not callable(fn):
            raise SagaDefinitionError(f"{where}: {method} is not callable")
        raise SagaDefinitionError(
            f"{where}: {method} must be `async def` (a sync function cannot be cancelled at its deadline)"
        )


def _is_async(fn: object) -> bool:
    # Fast path for plain methods and functions (validation runs once per step per saga).
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is not None and code.co_flags & inspect.CO_COROUTINE:
        return True
    return inspect.iscoroutinefunction(fn)


def _option_timeout(timeout: object, index: int, name: str) -> float:
    try:
        if (
            not isinstance(timeout, bool)
            and isinstance(timeout, int | float)
            and timeout > 0
            and math.isfinite(timeout)
        ):
            return float(timeout)
    except OverflowError:  # an int too large for a float is no more finite than inf
        pass
    raise SagaDefinitionError(
        f"{_where(index, name)}: timeout must be a positive number of seconds, got {timeout!r}"
    )


# -- do the saga's arguments fit the step? ---------------------------------------------------------


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
    return _step_mismatch(step, len(args), tuple(kwargs))


def _step_mismatch(step: object, nargs: int, keys: tuple[str, ...]) -> str | None:
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
def _class_mismatch(cls: type, nargs: int, keys: tuple[str, ...]) -> str | None:
    """`_step_mismatch` for any instance of a checked class that overrides none of its methods.

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
