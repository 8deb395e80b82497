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

Rebuilding trusts nothing the journal says: a locator is text anyone who can edit the file controls,
and ``import(module).qualname(**state)`` on it would be pickle's REDUCE (``subprocess:Popen``). So a
locator resolves only to a registered step, to a module-level object that already is a step, or to
a class that is a step class (async ``execute`` and ``compensate``, checked on the class before it
is called) called with its JSON state bound to its signature, and only from modules the app allows:
those of its registered steps, of the steps this resolver located when runs started, its
`main_module`, and the `allow_modules` it declares (a prefix: ``"myapp"`` allows ``myapp.steps``).
A module not allowed is refused before it is imported, since importing alone runs its code. Every
refusal is a `StepNotRecoverable` naming the locator, and nothing of it has run.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any, Final

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


@dataclass(frozen=True, slots=True)
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

    `allow_modules` names the modules (and their submodules) whose step classes and objects may be
    rebuilt besides the allowed ones the module docstring lists; a fresh process that recovers
    steps it has not located (``aegis-nb recover``, start-up recovery) needs them. None allows
    every module, still only to steps: for the Temporal worker, which does not declare its modules.
    """

    def __init__(
        self,
        steps: Iterable[object] | Mapping[str, object] = (),
        *,
        main_module: str | None = None,
        allow_modules: Iterable[str] | None = (),
    ) -> None:
        self._registry: Mapping[str, object] = MappingProxyType(
            dict(steps) if isinstance(steps, Mapping) else _by_name(steps)
        )
        self._registered_ids = {id(step): name for name, step in self._registry.items()}
        self.main_module = main_module
        self.allow_modules: tuple[str, ...] | None = (
            None if allow_modules is None else _module_names(allow_modules)
        )
        # Modules of the app's own steps: registered ones (rebuilt by name, but their siblings may
        # not be registered), the app's module, and (added by `locate`) those of located steps.
        self._trusted = {m for m in map(_module_of, self._registry.values()) if m is not None}
        if main_module:
            self._trusted.add(main_module)
        # Per-journal caches (the locator of a class or module-level object does not change).
        self._classes: dict[type, str] = {}
        self._objects: dict[int, tuple[object, str]] = {}
        self._signatures: dict[tuple[type, frozenset[str]], bool] = {}
        self._slots: dict[type, tuple[str, ...]] = {}

    @property
    def registry(self) -> Mapping[str, object]:
        """The registered steps by name."""
        return self._registry

    def trust(self, module: str) -> None:
        """Count `module` as the app's own (an `AegisMCP` workflow's module, say): its steps may be
        rebuilt by a recovery that has not run them yet."""
        self._trusted.add(module)

    def register(self, step: object) -> None:
        """Register `step` under its name after the journal was made (an `AegisMCP` compensable tool's
        step, made with its tool); a different object of that name is refused (`ValueError`)."""
        name = step_name(step)
        held = self._registry.get(name)
        if held is not None and held is not step:
            raise ValueError(f"a different step named {name!r} is already registered with this journal")
        self._registry = MappingProxyType({**self._registry, name: step})
        self._registered_ids[id(step)] = name

    def may_import(self, module: str) -> bool:
        """Whether a locator may name `module` (see the class docstring); decided without importing it."""
        if self.allow_modules is None or module in self._trusted:
            return True
        return any(module == allowed or module.startswith(allowed + ".") for allowed in self.allow_modules)

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
        """The step `locator` names, in this process; `StepNotRecoverable` saying why when it cannot.

        Checked in this order, each before anything of the locator runs: the name's form, the
        module (before importing it), what the name holds (a step, or a step class), and that the
        state binds to the class's signature; only then is the class called.
        """
        if locator.kind is LocatorKind.NAME:
            try:
                return self._registry[locator.target]
            except KeyError:
                raise _refused(
                    locator,
                    f"no step named {locator.target!r} is registered with this journal "
                    f"(registered: {sorted(self._registry) or 'none'})",
                ) from None
        obj = self._find(locator)
        if locator.kind is LocatorKind.OBJECT:
            if not _is_step_object(obj):
                raise _refused(locator, f"it names {_kind_of(obj)}, not a step; {_NOTHING_RAN}")
            return obj
        if not isinstance(obj, type):
            raise _refused(locator, f"it names {_kind_of(obj)}, not a class; {_NOTHING_RAN}")
        if not _is_step_class(obj):
            raise _refused(
                locator,
                f"{obj.__qualname__} is not a step class (no async execute and compensate); {_NOTHING_RAN}",
            )
        state = dict(locator.state)
        if not _binds(obj, state):
            raise _refused(
                locator,
                f"its state {sorted(state)} does not match the constructor of {obj.__qualname__}; "
                f"{_NOTHING_RAN}",
            )
        try:
            return obj(**state)
        except Exception as exc:
            raise _refused(locator, f"{obj.__qualname__}(**{state!r}) raised {exc!r}") from exc

    # -- locating --------------------------------------------------------------------------------

    def _locate_object(self, step: FunctionStep) -> StepLocator | str:
        cached = self._objects.get(id(step))
        if cached is not None and cached[0] is step:
            return StepLocator(LocatorKind.OBJECT, cached[1], MappingProxyType({}))
        fn = step.forwards_to("execute")  # the decorated function names the module the step lives in
        module_name = getattr(fn, "__module__", None)
        module = sys.modules.get(module_name) if isinstance(module_name, str) else None
        if module is None:
            return f"its function's module {module_name!r} is not imported; {_HOW_TO}"
        attr = _attribute_holding(module, step, getattr(fn, "__qualname__", ""))
        if attr is None:
            return f"it is not a module-level name of {module.__name__}; {_HOW_TO}"
        ref = f"{module.__name__}:{attr}"
        self._objects[id(step)] = (step, ref)
        self._trusted.add(module.__name__)
        return StepLocator(LocatorKind.OBJECT, ref, MappingProxyType({}))

    def _locate_instance(self, step: object) -> StepLocator | str:
        cls = type(step)
        ref = self._classes.get(cls)
        if ref is None:
            qualname = cls.__qualname__
            if "<locals>" in qualname:
                return f"its class {qualname} is defined inside a function; {_HOW_TO}"
            ref = f"{cls.__module__}:{qualname}"
            # Looked up where it was imported: the step exists, so its module has been imported.
            module = sys.modules.get(cls.__module__)
            if module is None:
                return f"{ref} cannot be found: its module {cls.__module__!r} is not imported; {_HOW_TO}"
            if _walk(module, qualname) is not cls:
                return f"{ref} names another object than its class; {_HOW_TO}"
            self._classes[cls] = ref
            self._trusted.add(cls.__module__)
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

    # -- rebuilding ------------------------------------------------------------------------------

    def _find(self, locator: StepLocator) -> object:
        """What a class or object locator names, from an allowed module, imported only if allowed."""
        module_name, _, qualname = locator.target.partition(":")
        if not _is_dotted_name(module_name) or not _is_dotted_name(qualname, private=False):
            raise _refused(locator, f"{locator.target!r} is not a module:name reference; {_NOTHING_RAN}")
        if locator.kind is LocatorKind.OBJECT and "." in qualname:
            raise _refused(locator, f"a step object is a module-level name, not {qualname!r}; {_NOTHING_RAN}")
        # ``__main__`` is this process's script, which need not be the one that ran the step: the
        # app's module stands in for it (as it does for ``python -m app`` against ``import app``).
        names = [module_name]
        if module_name == "__main__" and self.main_module and self.main_module != module_name:
            names.append(self.main_module)
        allowed = [name for name in names if self.may_import(name)]
        if not allowed:
            raise _refused(
                locator,
                f"module {module_name!r} is not one this journal rebuilds steps from "
                f"(allowed: {self._allowed_text()}); {_NOTHING_RAN}. If the step is the app's, "
                f"register it or allow its module: SqliteJournal(path, allow_modules=[{module_name!r}])",
            )
        for name in allowed:
            module = _import_module(locator, name)
            found = _walk(module, qualname)
            if found is _MISSING:
                continue
            # The class as the name says, not one reached through another module's import of it.
            defined_at = (getattr(found, "__module__", None), getattr(found, "__qualname__", None))
            if isinstance(found, type) and defined_at != (module.__name__, qualname):
                raise _refused(
                    locator,
                    f"{name}:{qualname} is {found.__module__}:{found.__qualname__}, defined "
                    f"elsewhere; {_NOTHING_RAN}",
                )
            return found
        raise _refused(locator, f"{' nor '.join(allowed)} has no {qualname}")

    def _allowed_text(self) -> str:
        return ", ".join(sorted(self._trusted.union(self.allow_modules or ()))) or "none"


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


def _import_module(locator: StepLocator, name: str) -> ModuleType:
    """The allowed module `name`, imported if it is not yet (an app's module: its code is trusted)."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise _refused(locator, f"module {name!r} cannot be imported ({exc!r})") from exc


_MISSING: Final = object()


def _walk(module: ModuleType, qualname: str) -> object:
    """The object at `qualname` in `module`, or `_MISSING`; read statically, so that no module
    ``__getattr__``, property or descriptor runs on a name the journal chose."""
    obj: object = module
    for part in qualname.split("."):
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            return _MISSING
    return obj


def _is_dotted_name(text: str, *, private: bool = True) -> bool:
    """Identifiers joined by dots; with `private` False, none a dunder (``__class__``, ``__globals__``)."""
    parts = text.split(".")
    return all(p.isidentifier() and (private or not p.startswith("__")) for p in parts)


def _module_names(names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(names, str):
        raise TypeError(f"allow_modules takes module names, got the string {names!r}: write ({names!r},)")
    names = tuple(names)
    for name in names:
        if not isinstance(name, str) or not _is_dotted_name(name):
            raise ValueError(f"allow_modules: {name!r} is not a dotted module name")
    return names


def _module_of(step: object) -> str | None:
    """The module a registered step comes from: its function's for a function step, else its class's."""
    owner = step.forwards_to("execute") if isinstance(step, FunctionStep) else type(step)
    module = getattr(owner, "__module__", None)
    return module if isinstance(module, str) else None


def _is_coroutine_function(fn: object) -> bool:
    fn = getattr(fn, "__func__", fn)  # a staticmethod or classmethod as the class holds it
    return inspect.iscoroutinefunction(fn)


def _is_step_class(cls: type) -> bool:
    """Whether `cls` defines async execute and compensate: looked at statically, nothing is called."""
    methods = (inspect.getattr_static(cls, name, None) for name in ("execute", "compensate"))
    return all(_is_coroutine_function(method) for method in methods)


def _is_step_object(obj: object) -> bool:
    """A function step, or an instance whose class is a step class (looked at without calling it)."""
    return isinstance(obj, FunctionStep) or (not isinstance(obj, type) and _is_step_class(type(obj)))


def _kind_of(obj: object) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, ModuleType):
        return f"the module {obj.__name__}"
    return f"a {type(obj).__module__}.{type(obj).__qualname__}"


_NOTHING_RAN = "nothing of it was run"


def _refused(locator: StepLocator, why: str) -> StepNotRecoverable:
    return StepNotRecoverable(why, locator=str(locator))


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
