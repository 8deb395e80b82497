"""`record`: a frozen, slotted dataclass, plus a constructor for hot paths about 3x faster.

Events and contexts are built on the engine's hot path (two events per step, and the
engine's whole budget is about a microsecond per step). A frozen dataclass cannot set its own fields
cheaply: its ``__init__`` goes through ``object.__setattr__`` per field. `builder(cls)` instead fills
an instance of a mutable twin (a subclass that adds no slots and restores plain attribute setting)
and then re-classes it: CPython allows ``__class__`` assignment between types of identical layout.
The result is an ordinary instance of `cls`; immutability, eq, repr, hashing, ``match`` and
`dataclasses.fields` are all the dataclass's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")

_BUILDER = "_record_builder"
_TWIN = "_record_twin"


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    """Decorate `cls` as ``@dataclass(frozen=True, slots=True)`` and attach its fast `builder`."""
    cls = dataclasses.dataclass(frozen=True, slots=True)(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING for f in fields
    ):
        raise TypeError(f"{cls.__name__}: record fields cannot have defaults")
    setattr(cls, _BUILDER, staticmethod(twin_builder(cls, [f.name for f in fields])))
    return cls


def builder(cls: type[T]) -> Callable[..., T]:
    """The positional constructor of a `record` class: ``builder(C)(*fields) == C(*fields)``."""
    made: Callable[..., T] = cls.__dict__[_BUILDER].__func__
    return made


def twin_builder(cls: type[T], names: list[str]) -> Callable[..., T]:
    """``build(*values)``: an instance of the immutable slotted class `cls` with `names` set in order.

    For any class that forbids setting attributes (a frozen dataclass, `AegisContext`).
    """
    lines = [f"def build({', '.join(names)}):", "    self = twin()"]
    lines += [f"    self.{name} = {name}" for name in names]
    return _compile(cls, "build", lines, f"Create a {cls.__name__} from its fields in order (the fast path).")


def twin_copier(cls: type[T], names: list[str], replaced: list[str]) -> Callable[..., T]:
    """``copy(instance, *values)``: a copy of `instance` with the fields `replaced` set to `values`.

    `names` lists every field of `cls`; assigned to `cls` it is a method as fast as `build`.
    """
    lines = [f"def copy(old, {', '.join(replaced)}):", "    self = twin()"]
    lines += [f"    self.{name} = {name if name in replaced else f'old.{name}'}" for name in names]
    return _compile(cls, "copy", lines, f"A copy with {', '.join(replaced)} replaced (the fast path).")


def _compile(cls: type[T], function: str, lines: list[str], doc: str) -> Callable[..., T]:
    """Finish `lines`, which fill ``self``, an instance of `cls`'s mutable twin, into a function."""
    source = "\n".join([*lines, "    self.__class__ = cls", "    return self", ""])
    namespace: dict[str, Any] = {}
    exec(source, {"twin": _twin(cls), "cls": cls}, namespace)
    made: Callable[..., T] = namespace[function]
    made.__qualname__ = f"{cls.__qualname__}.{function}"
    made.__doc__ = doc
    return made


def _twin(cls: type) -> type:
    """A subclass of `cls` whose instances can be filled in, then re-classed as `cls`."""
    twin = cls.__dict__.get(_TWIN)
    if twin is None:
        # Adds no slots, so the layouts match and the final __class__ assignment is allowed. Both
        # hooks must be object's own for CPython to use its fast generic attribute setting again,
        # and object's own __init__ makes calling the twin cheaper than object.__new__(twin).
        plain = {
            "__slots__": (),
            "__init__": object.__init__,
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
        }
        twin = type(f"{cls.__name__}Builder", (cls,), plain)
        type.__setattr__(cls, _TWIN, twin)
    return twin
