"""Going away (issue 17): `record` is now just ``@dataclass(frozen=True, slots=True)``.

Kept only while the last modules that import it move to the dataclass decorator itself; nothing
here generates code or switches classes any more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    """``@dataclass(frozen=True, slots=True)``."""
    return dataclasses.dataclass(frozen=True, slots=True)(cls)


def builder(cls: type[T]) -> Callable[..., T]:
    """The class itself: its constructor."""
    return cls
