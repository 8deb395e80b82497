"""How a journal names a step so that a new process can rebuild it, and rebuilding it.

A step is found again in one of three ways, tried in this order when a run starts:

- **by name**: the journal was given the step (``SqliteJournal(path, steps=[BookFlight(agency)])``);
  recovery uses that registered object. This is the way for steps holding clients or connections.
- **by object**: a module-level object, such as an ``@step`` function step; recovery imports it.
- **by class**: an instance of a module-level class whose attributes are JSON values accepted as
  keyword arguments by its constructor (``BookFlight()``, ``ReserveHotel(latency=0.2)``, dataclasses);
  recovery calls ``cls(**attributes)``.

Anything else is refused when the run starts, with a message saying which of these to use: finding
out after the crash would be too late.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import sys
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType, ModuleType
from typing import Any

from aegis_nb.kernel.records import record
from aegis_nb.saga.definition import StepSpec, step_name
from aegis_nb.saga.durable.codec import RecordError, json_problem
from aegis_nb.saga.durable.errors import StepNotRecoverable
from aegis_nb.saga.functional import FunctionStep

_HOW_TO = (
    "make it a module-level class whose attributes are JSON constructor arguments, a module-level "
    "@step function, or register it with the journal: SqliteJournal(path, steps=[...])"
)


class LocatorKind(enum.Enum):
    """How a step is found again after a crash."""

    NAME = "name"
    OBJECT = "object"
    CLASS = "class"


@record
class StepLocator:
    """A step's identity as the journal stores it: `target` is a registered name or ``module:qualname``."""

    kind: LocatorKind
    target: str
    state: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"by": self.kind.value, "target": self.target}
        if self.kind is LocatorKind.CLASS:
            data["state"] = dict(self.state)
        return data

    @classmethod
    def from_json(cls, data: object) -> StepLocator:
        if not isinstance(data, dict):
            raise RecordError(f"a step locator must be a JSON object, got {data!r}")
        try:
            kind = LocatorKind(data.get("by"))
        except ValueError:
            raise RecordError(f"unknown step locator kind {data.get('by')!r}") from None
        target, state = data.get("target"), data.get("state", {})
        if not isinstance(target, str) or not isinstance(state, dict):
            raise RecordError(f"malformed step locator {data!r}")
        return cls(kind, target, MappingProxyType(state))

    def __str__(self) -> str:
        return f"{self.kind.value} {self.target}"


class StepResolver:
    """Locates steps when runs start and rebuilds them at recovery; holds the registered steps.

    `main_module` is where ``__main__:X`` steps are looked up when this process's ``__main__`` is
    not the script that ran them (``aegis-nb recover ... module:app`` passes the app's module).
    Steps given as a list go by their names, so two different objects of one name are refused
    (`ValueError`): only one could be found again, and the other's entries would run it.
    """

    def __init__(
        self,
        steps: Iterable[object] | Mapping[str, object] = (),
        *,
        main_module: str | None = None,
    ) -> None:
        self._registry: Mapping[str, object] = MappingProxyType(
            dict(steps) if isinstance(steps, Mapping) else _by_name(steps)
        )
        self._registered_ids = {id(step): name for name, step in self._registry.items()}
        self.main_module = main_module
        # Per-journal caches (the locator of a class or module-level object does not change).
        self._classes: dict[type, str] = {}
        self._objects: dict[int, tuple[object, str]] = {}
        self._signatures: dict[tuple[type, frozenset[str]], bool] = {}
        self._slots: dict[type, tuple[str, ...]] = {}

    @property
    def registry(self) -> Mapping[str, object]:
        """The registered steps by name."""
        return self._registry

    def locate(self, step: object) -> StepLocator | str:
        """The locator recovery will use for `step`, or why there is none (a sentence to show)."""
        name = self._registered_ids.get(id(step))
        if name is None:
            candidate = self._registry.get(step_name(step))
            if candidate is not None and type(candidate) is type(step):
                name = step_name(step)
        if name is not None:
            return StepLocator(LocatorKind.NAME, name, MappingProxyType({}))
        if isinstance(step, FunctionStep):
            return self._locate_object(step)
        return self._locate_instance(step)

    def rebuild(self, locator: StepLocator) -> object:
        """The step `locator` names, in this process; `LookupError` saying why when it cannot."""
        if locator.kind is LocatorKind.NAME:
            try:
                return self._registry[locator.target]
            except KeyError:
                raise LookupError(
                    f"no step named {locator.target!r} is registered with this journal "
                    f"(registered: {sorted(self._registry) or 'none'})"
                ) from None
        obj = self._import(locator.target)
        if locator.kind is LocatorKind.OBJECT:
            return obj
        if not isinstance(obj, type):
            raise LookupError(f"{locator.target} is no longer a class")
        try:
            return obj(**locator.state)
        except Exception as exc:
            raise LookupError(f"{locator.target}(**{dict(locator.state)!r}) raised {exc!r}") from exc

    # -- locating --------------------------------------------------------------------------------

    def _locate_object(self, step: FunctionStep) -> StepLocator | str:
        cached = self._objects.get(id(step))
        if cached is not None and cached[0] is step:
            return StepLocator(LocatorKind.OBJECT, cached[1], MappingProxyType({}))
        fn = step._execute  # the decorated function names the module the step lives in
        module_name = getattr(fn, "__module__", None)
        module = sys.modules.get(module_name) if isinstance(module_name, str) else None
        if module is None:
            return f"its function's module {module_name!r} is not imported; {_HOW_TO}"
        attr = _attribute_holding(module, step, getattr(fn, "__qualname__", ""))
        if attr is None:
            return f"it is not a module-level name of {module.__name__}; {_HOW_TO}"
        ref = f"{module.__name__}:{attr}"
        self._objects[id(step)] = (step, ref)
        return StepLocator(LocatorKind.OBJECT, ref, MappingProxyType({}))

    def _locate_instance(self, step: object) -> StepLocator | str:
        cls = type(step)
        ref = self._classes.get(cls)
        if ref is None:
            qualname = cls.__qualname__
            if "<locals>" in qualname:
                return f"its class {qualname} is defined inside a function; {_HOW_TO}"
            ref = f"{cls.__module__}:{qualname}"
            try:
                found = self._import(ref)
            except LookupError as exc:
                return f"{exc}; {_HOW_TO}"
            if found is not cls:
                return f"{ref} names another object than its class; {_HOW_TO}"
            self._classes[cls] = ref
        slots = self._slots.get(cls)
        if slots is None:
            slots = self._slots[cls] = _slot_names(cls)
        if any(hasattr(step, name) for name in slots):
            return f"its class {ref} keeps state in __slots__; {_HOW_TO}"
        state = dict(getattr(step, "__dict__", _NO_STATE))
        problem = json_problem(state, "attribute") if state else None
        if problem:
            return f"{problem}; {_HOW_TO}"
        key = (cls, frozenset(state))
        binds = self._signatures.get(key)
        if binds is None:
            binds = self._signatures[key] = _binds(cls, state)
        if not binds:
            return (
                f"{ref}(**{sorted(state)}) does not match its constructor, so it cannot be rebuilt "
                f"from its attributes; {_HOW_TO}"
            )
        return StepLocator(LocatorKind.CLASS, ref, MappingProxyType(dict(state)))

    def _import(self, ref: str) -> object:
        module_name, _, qualname = ref.partition(":")
        module = _import_module(module_name)
        obj: object = module
        try:
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            if module_name == "__main__" and self.main_module:
                return self._import(f"{self.main_module}:{qualname}")
            raise LookupError(f"{ref} cannot be found: {module_name} has no {qualname}") from None
        return obj


def one_object_per_registered_name(
    saga: str,
    specs: Sequence[StepSpec],
    locators: Sequence[StepLocator],
    *,
    rebuilder: str = "recovery",
    registration: str = "SqliteJournal(path, steps={keys})",
) -> None:
    """Refuse a run in which two different objects would both be rebuilt as one registered step.

    A step is found by name when it is registered, or is of the registered step's class and name
    (a fresh instance holding a new client, say). Whoever rebuilds it (`rebuilder`: recovery, a
    Temporal worker) uses the registered object, which is right for one of them at most: the other
    (the Hilton beside the registered Ritz) would be acted on or undone at the wrong place.
    `registration` shows where to register each under a key of its own (``{keys}``: an example).
    """
    first_by_name: dict[str, StepSpec] = {}
    for spec, locator in zip(specs, locators, strict=True):
        if locator.kind is not LocatorKind.NAME:
            continue
        first = first_by_name.setdefault(locator.target, spec)
        if first.step is not spec.step:
            keys = f"{{{locator.target!r}: ..., 'another key': ...}}"
            raise StepNotRecoverable(
                f"saga {saga!r}: steps {first.name!r} and {spec.name!r} are two objects that {rebuilder} "
                f"would both rebuild as the step registered as {locator.target!r}; register each "
                f"under a key of its own: {registration.replace('{keys}', keys)}"
            )


def _by_name(steps: Iterable[object]) -> dict[str, object]:
    """Steps registered in a list, by name; the same object twice is fine, two of one name are not."""
    registry: dict[str, object] = {}
    for step in steps:
        name = step_name(step)
        if registry.setdefault(name, step) is not step:
            raise ValueError(
                f"two different steps are registered under the name {name!r}: a listed step is found "
                f"again by its name, so only one of them could be; register them under keys of their "
                f"own instead: steps={{{name!r}: ..., 'another key': ...}}"
            )
    return registry


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise LookupError(f"module {name!r} cannot be imported ({exc!r})") from exc


def _attribute_holding(module: ModuleType, obj: object, qualname: str) -> str | None:
    if "." not in qualname and getattr(module, qualname, None) is obj:
        return qualname
    for name, value in vars(module).items():
        if value is obj:
            return name
    return None


def _slot_names(cls: type) -> tuple[str, ...]:
    """The __slots__ of `cls` and its bases: state there is invisible to recovery, which reads __dict__."""
    return tuple(
        name
        for klass in cls.__mro__
        for name in getattr(klass, "__slots__", ())
        if name not in ("__dict__", "__weakref__")
    )


_NO_STATE: Mapping[str, Any] = MappingProxyType({})


def _binds(cls: type, state: dict[str, Any]) -> bool:
    try:
        inspect.signature(cls).bind(**state)
    except (TypeError, ValueError):
        return False
    return True
