"""`record`: a frozen, slotted dataclass, plus a constructor for hot paths about 3x faster.

Events and step references are built on the engine's hot path (two events per step, and the
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
    # Adds no slots, so the layouts match and the final __class__ assignment is allowed. Both
    # hooks must be object's own for CPython to use its fast generic attribute setting again.
    plain = {"__slots__": (), "__setattr__": object.__setattr__, "__delattr__": object.__delattr__}
    twin = type(f"{cls.__name__}Builder", (cls,), plain)
    source = (
        f"def build({', '.join(names)}):\n"
        "    self = new(twin)\n"
        + "".join(f"    self.{name} = {name}\n" for name in names)
        + "    self.__class__ = cls\n"
        "    return self\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, {"new": object.__new__, "twin": twin, "cls": cls}, namespace)
    build: Callable[..., T] = namespace["build"]
    build.__qualname__ = f"{cls.__qualname__}.build"
    build.__doc__ = f"Create a {cls.__name__} from its fields in order (the fast path)."
    return build
