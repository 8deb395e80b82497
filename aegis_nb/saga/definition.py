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
import inspect
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import chain, count, repeat
from operator import attrgetter
from types import FunctionType, MappingProxyType
from typing import Any, Protocol, runtime_checkable

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError
from aegis_nb.saga.binding import class_mismatch, step_mismatch
from aegis_nb.saga.parallel import ParallelGroup, StepGroup
from aegis_nb.saga.retry import RetryPolicy


@runtime_checkable
class Step(Protocol):
    """The shape the engine needs; no base class required."""

    async def execute(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> AegisContext | None: ...

    async def compensate(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> object: ...


SagaEntry = Step | tuple[Step, Sequence[Any], Mapping[str, Any]] | ParallelGroup
"""One entry of a saga list: a bare step, ``(step, args, kwargs)`` or a `parallel(...)` group."""


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


def group_start(spec: StepSpec) -> int | None:
    """What a step's events say of its group (`StepEvent.group`): its first index, or None."""
    return None if spec.group is None else spec.group.start


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
    types = set(map(type, entries))
    if ParallelGroup in types:  # first: a list that opens with a tuple may hold groups too
        return _normalize_grouped(entries)
    if isinstance(entries[0], tuple):  # (step, args, kwargs) entries: checked one by one
        return _normalize_entries(entries, {})
    if any(issubclass(cls, tuple) for cls in types):
        return _normalize_entries(entries, {})
    classes = {cls: _classify(cls) for cls in types}
    if all(kind is _StepClass.PLAIN for kind in classes.values()) and not _set_on_instances(
        entries, _OVERRIDABLE
    ):
        for cls in classes:  # bare steps get no arguments: each class checked once, from the cache
            mismatch = class_mismatch(cls, 0, ())
            if mismatch is not None:
                index = next(i for i, entry in enumerate(entries) if type(entry) is cls)
                raise SagaDefinitionError(f"{_where(index, cls.__name__)}: {mismatch}")
        return _plain_specs(entries)
    return _normalize_entries(entries, classes)


def normalize_entry(entry: object, first_index: int, classes: dict[type, _StepClass]) -> tuple[StepSpec, ...]:
    """Check one saga entry, a step, ``(step, args, kwargs)`` or a parallel group, placed at
    `first_index`: what a dynamic saga runs next. `classes` caches class checks across calls.

    Names are as the step gives them; making them unique within the run is the caller's job.
    """
    if isinstance(entry, ParallelGroup):
        return _group_specs(entry, first_index, classes)
    if isinstance(entry, list):
        raise SagaDefinitionError("a step, a (step, args, kwargs) tuple or a parallel group, got a list")
    return _normalize_entries([entry], classes, first_index, unique=False)


def _normalize_grouped(entries: Sequence[Any]) -> tuple[StepSpec, ...]:
    """A saga with parallel groups: each entry checked in turn, every name unique in the whole saga."""
    classes: dict[type, _StepClass] = {}
    specs: list[StepSpec] = []
    for entry in entries:
        specs += normalize_entry(entry, len(specs), classes)
    names = [spec.name for spec in specs]
    _make_unique(names)
    return tuple(replace(spec, name=name) for spec, name in zip(specs, names, strict=True))


def _group_specs(group: ParallelGroup, start: int, classes: dict[type, _StepClass]) -> tuple[StepSpec, ...]:
    """The members of `group`, checked, at consecutive indexes from `start`, each placed in it."""
    members = _normalize_entries(group.members, classes, start, unique=False)
    placed = StepGroup(start, len(members), group.compensation)
    return tuple(replace(member, group=placed) for member in members)


def _plain_specs(steps: Sequence[Any]) -> tuple[StepSpec, ...]:
    """Specs of bare steps whose classes were checked and whose options are all defaults."""
    names = list(map(_class_name, map(type, steps)))
    _make_unique(names)
    options = repeat(_NO_ARGS), repeat(_NO_KWARGS), repeat(None), repeat(None), repeat(False)
    return tuple(map(StepSpec, count(), names, steps, *options))


def _normalize_entries(
    entries: Sequence[Any], classes: dict[type, _StepClass], first_index: int = 0, *, unique: bool = True
) -> tuple[StepSpec, ...]:
    """Any saga: ``(step, args, kwargs)`` entries, tuned steps, steps that fail their checks.

    One pass that calls out only for what an entry needs: a workflow normalizes its few steps on
    every call, amid a server's other work, where each extra helper and lookup costs several
    times what it does in a tight loop.
    """
    specs: list[StepSpec] = []
    names: list[str] = []
    for index, entry in enumerate(entries, first_index):
        if isinstance(entry, ParallelGroup):
            raise SagaDefinitionError(
                f"{_where(index, 'parallel')}: a parallel group inside a parallel group; groups do not nest"
            )
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
                    mismatch = class_mismatch(cls, len(args), tuple(kwargs))
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
    if unique and len(set(names)) != len(names):
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
    mismatch = step_mismatch(step, len(args), tuple(kwargs))
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
