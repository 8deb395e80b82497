"""Frozen, JSON-compatible metadata values and the `Secret` wrapper.

Metadata must survive journals and the MCP wire without pickle, so every value is checked once on the
way in and stored frozen: dicts become `FrozenDict`, lists become tuples. `Secret` marks a value that may
travel between steps but must never be shown or written.
"""

from __future__ import annotations

import math
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from typing import Any, Final, NoReturn, TypeAlias

import immutables

JSONValue: TypeAlias = Any
"""A JSON-compatible value: None, bool, int, float, str, lists and str-keyed dicts of those."""

REDACTED: Final = "***"


class Secret:
    """A metadata value passed along but never shown: reprs, events, errors and journals see ``***``."""

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str) -> None:
        if hasattr(self, "_value"):  # a second __init__ would swap the value in place
            raise AttributeError("Secret is immutable (tried to call __init__ again)")
        if not isinstance(value, str):
            raise TypeError(f"Secret wraps a str, got {type(value).__name__}")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        """The hidden value, for the code that really needs it (and nowhere else)."""
        return self._value

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Secret is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("Secret is immutable")

    # Immutable, so a copy is the value itself; without these, copy would go through __reduce__.
    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled")


class FrozenDict(Mapping[str, Any]):
    """A read-only, hashable str-keyed mapping; values are frozen JSON values."""

    __slots__ = ("_data", "_hash", "_map", "_order", "_secrets")
    # A small mapping is a dict. A large one that merges derive from is persistent (`_map`, with
    # `_order` numbering its keys as they came), so a merge costs its updates, not a copy of the
    # whole; its dict (`_data`) is built the first time something walks it.
    _data: dict[str, Any] | None
    _map: immutables.Map[str, Any] | None
    _order: immutables.Map[int, str] | None
    _hash: int | None
    _secrets: tuple[str, ...] | None  # what `secret_values` finds inside, once known

    def __init__(self, data: Mapping[str, Any] = {}) -> None:
        if hasattr(self, "_data"):  # a second __init__ would swap the contents in place
            raise AttributeError("FrozenDict is immutable (tried to call __init__ again)")
        object.__setattr__(self, "_data", freeze_mapping(data))
        object.__setattr__(self, "_hash", None)
        object.__setattr__(self, "_map", None)
        object.__setattr__(self, "_order", None)
        object.__setattr__(self, "_secrets", None)

    @staticmethod
    def _trusted(data: dict[str, Any]) -> FrozenDict:
        """Wrap a dict whose values are already frozen (no copy, no checks)."""
        frozen: FrozenDict = object.__new__(FrozenDict)
        # object's own __setattr__: FrozenDict's refuses every assignment.
        object.__setattr__(frozen, "_data", data)
        object.__setattr__(frozen, "_hash", None)
        object.__setattr__(frozen, "_map", None)
        object.__setattr__(frozen, "_order", None)
        object.__setattr__(frozen, "_secrets", None)
        return frozen

    @staticmethod
    def _persistent(found: immutables.Map[str, Any], order: immutables.Map[int, str]) -> FrozenDict:
        """Wrap a persistent mapping of frozen values and the order of its keys."""
        frozen: FrozenDict = object.__new__(FrozenDict)
        object.__setattr__(frozen, "_data", None)
        object.__setattr__(frozen, "_hash", None)
        object.__setattr__(frozen, "_map", found)
        object.__setattr__(frozen, "_order", order)
        object.__setattr__(frozen, "_secrets", None)
        return frozen

    def _plain(self) -> dict[str, Any]:
        """The contents as a dict in insertion order, built once for a persistent mapping."""
        data = self._data
        if data is None:
            found, order = self._map, self._order
            assert found is not None
            assert order is not None
            data = {key: found[key] for key in map(order.__getitem__, range(len(order)))}
            object.__setattr__(self, "_data", data)
        return data

    def merged(self, updates: Mapping[str, Any]) -> FrozenDict:
        """A new mapping: this one with `updates` checked, frozen and merged in (they win)."""
        fresh = freeze_mapping(updates)
        found, order = self._map, self._order
        if found is None and len(self) + len(fresh) < _PERSISTENT_FROM:
            data = dict(self._plain())
            data.update(fresh)
            merged = FrozenDict._trusted(data)
        else:
            if found is None or order is None:
                plain = self._plain()
                found, order = immutables.Map(plain), immutables.Map(enumerate(plain))
            added = [key for key in fresh if key not in found]
            order = order.update({len(order) + i: key for i, key in enumerate(added)})
            merged = FrozenDict._persistent(found.update(fresh), order)
        # Its secrets from this one's and the updates' alone, so a run whose contexts grow a key a
        # step finds them in time linear in the run. An update that replaces a key (which keeps its
        # place) leaves them to be found by a scan, when asked.
        if not any(key in self for key in fresh):  # over the updates only: this may be large
            kept, new = self._held_secrets(), _secrets_in(fresh.values())
            # The parent's own tuple when nothing is added, so a run's readers can skip it as seen.
            object.__setattr__(merged, "_secrets", kept + new if new else kept)
        return merged

    def _held_secrets(self) -> tuple[str, ...]:
        """`secret_values` of this mapping, in order and repeats kept; found once, then kept."""
        if self._secrets is None:
            object.__setattr__(self, "_secrets", _secrets_in(self._plain().values()))
        assert self._secrets is not None
        return self._secrets

    def __getitem__(self, key: str) -> Any:
        return self._data[key] if self._map is None else self._map[key]  # type: ignore[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._plain())

    def __len__(self) -> int:
        return len(self._data) if self._map is None else len(self._map)  # type: ignore[arg-type]

    def __contains__(self, key: object) -> bool:
        return key in (self._data if self._map is None else self._map)  # type: ignore[operator]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default) if self._map is None else self._map.get(key, default)  # type: ignore[union-attr]

    # The dict's own views (read-only) instead of Mapping's generic ones: journals walk metadata
    # on every step, and these are several times faster.
    def keys(self) -> KeysView[str]:
        return self._plain().keys()

    def items(self) -> ItemsView[str, Any]:
        return self._plain().items()

    def values(self) -> ValuesView[Any]:
        return self._plain().values()

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("FrozenDict is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("FrozenDict is immutable")

    # Immutable, so a copy is the value itself; without these, copy would go through __reduce__.
    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __reduce__(self) -> NoReturn:
        """Refused, like `AegisContext` and `Secret`: metadata leaves the process only as JSON.

        Pickling would otherwise work or fail depending on whether a `Secret` sits somewhere inside.
        """
        raise TypeError("FrozenDict is not pickled; journals store thaw()'s JSON instead")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenDict):
            return self._plain() == other._plain()
        if isinstance(other, Mapping):
            # Compared frozen, as this side is: a list must match the tuple it is stored as.
            if len(other) != len(self):
                return False
            try:
                return self._plain() == freeze_mapping(other)
            except TypeError:  # not JSON-compatible, so unlike any FrozenDict
                return False
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(frozenset(self._plain().items())))
        assert self._hash is not None
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenDict({self._plain()!r})"


MetadataPath: TypeAlias = "str | tuple[MetadataPath, str | int]"
"""Where a value sits, for error messages: a name, or (parent path, key or index), written out
only when an error needs it (`render_path`), since every step's result is frozen."""


def render_path(path: MetadataPath) -> str:
    """``metadata['flight'][0]``: a `MetadataPath` as error messages show it."""
    steps: list[str] = []
    while isinstance(path, tuple):
        path, key = path
        steps.append(f"[{key!r}]" if isinstance(key, str) else f"[{key}]")
    return path + "".join(reversed(steps))


def freeze_mapping(data: Mapping[str, Any], path: MetadataPath = "metadata") -> dict[str, Any]:
    """Check and freeze every value of `data`; raise `TypeError` naming the offending key."""
    if type(data) is not dict and not isinstance(data, Mapping):
        raise TypeError(f"{render_path(path)} must be a mapping, got {type(data).__name__}")
    frozen: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise TypeError(f"{render_path(path)} keys must be str, got {type(key).__name__} key {key!r}")
        # Plain leaves inline, and a nested dict's path is a pair, not a string: freezing every
        # step's result would otherwise spend much of its time on what only errors need.
        cls = type(value)
        if cls in _FROZEN_AS_IS:
            frozen[key] = value
        elif cls is dict:  # a step's result nested under its key: the usual container
            frozen[key] = FrozenDict._trusted(freeze_mapping(value, (path, key)))
        else:
            frozen[key] = freeze(value, (path, key))
    return frozen


def freeze(value: Any, path: MetadataPath) -> Any:
    """Return an immutable copy of a JSON-compatible value, or raise `TypeError` naming `path`."""
    # Exact types first: every step's result is frozen, and the abstract Mapping check is slow.
    cls = type(value)
    if cls in _FROZEN_AS_IS:
        return value
    if cls is dict:
        return FrozenDict._trusted(freeze_mapping(value, path))
    if isinstance(value, str | bool | int | Secret | FrozenDict):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(
                f"{render_path(path)}: {value!r} is not JSON-compatible (JSON has no NaN or infinity)"
            )
        return value
    if isinstance(value, Mapping):
        return FrozenDict._trusted(freeze_mapping(value, path))
    if isinstance(value, list | tuple):
        return tuple([freeze(item, (path, i)) for i, item in enumerate(value)])
    raise TypeError(
        f"{render_path(path)}: value of type {type(value).__name__} is not JSON-compatible "
        "(use None, bool, int, float, str, list, dict with str keys, or Secret)"
    )


def thaw(value: Any, *, reveal: bool = False) -> JSONValue:
    """Plain JSON data from a frozen value; secrets become ``***`` unless `reveal` is set.

    Plain dicts and lists are thawed too, as they may hold frozen values (an undo's arguments, a
    plain dict, bound from a step's frozen result): what comes out is plain all the way down.
    """
    cls = type(value)
    if cls in JSON_LEAVES:
        return value
    if isinstance(value, FrozenDict):
        return _thaw_dict(value._plain(), reveal)
    if cls is tuple:  # how lists are frozen: the usual container after FrozenDict
        return [thaw(v, reveal=reveal) for v in value]
    if cls is dict:
        return _thaw_dict(value, reveal)
    if isinstance(value, Secret):
        return value.reveal() if reveal else REDACTED
    if isinstance(value, tuple | list):
        return [thaw(v, reveal=reveal) for v in value]
    if isinstance(value, Mapping):
        return {key: thaw(item, reveal=reveal) for key, item in value.items()}
    return value


def _thaw_dict(data: dict[str, Any], reveal: bool) -> dict[str, JSONValue]:
    # Every workflow result thaws the final metadata, a dict of step results: flat parts are
    # copied at C speed, and nested dicts skip thaw's type dispatch.
    thawed = dict(data)
    if JSON_LEAVES.issuperset(map(type, data.values())):
        return thawed
    for key, value in data.items():
        if type(value) is FrozenDict:
            thawed[key] = _thaw_dict(value._plain(), reveal)
        elif type(value) not in JSON_LEAVES:
            thawed[key] = thaw(value, reveal=reveal)
    return thawed


JSON_LEAVES = frozenset((str, int, float, bool, type(None)))
"""Plain JSON scalar types: they thaw to themselves and any JSON encoder sends them as they are
(subclasses take the checked path)."""

_PERSISTENT_FROM = 256
"""Mappings merged to this size or more are persistent: a dict copy below it costs about a
microsecond, and a persistent map's updates and reads cost more than a small dict's."""

_FROZEN_AS_IS = frozenset((str, int, bool, type(None)))
"""Value types frozen as they are, unchecked (a float is checked for NaN and infinity)."""


def secret_values(value: Any) -> Iterator[str]:
    """Every revealed secret string held anywhere inside `value`, for scrubbing text."""
    if isinstance(value, Secret):
        yield value.reveal()
    elif isinstance(value, FrozenDict):
        yield from value._held_secrets()
    elif isinstance(value, tuple):
        for item in value:
            yield from secret_values(item)


def frozen_secrets(mapping: FrozenDict) -> tuple[str, ...]:
    """`secret_values` of a frozen mapping as a tuple, found once per mapping and kept.

    A merge that adds no secret shares its parent's tuple (the same object), which lets a reader of
    many related mappings skip what it has already read.
    """
    return mapping._held_secrets()


def _secrets_in(values: Iterable[Any]) -> tuple[str, ...]:
    """`secret_values` of each of `values`, in turn; () at once when they are all plain leaves."""
    values = tuple(values)
    if _FROZEN_AS_IS.issuperset(map(type, values)):
        return ()
    return tuple(secret for value in values for secret in secret_values(value))


def argument_secrets(args: Iterable[Any], kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """Every revealed secret in a step's arguments, nested in lists, tuples, sets or mappings.

    Arguments are the caller's plain data, not frozen metadata: containers may repeat or hold
    themselves, and a mapping may fail to list its values. Called when an error is being reported,
    so it skips what it cannot walk rather than raise.
    """
    found: list[str] = []
    seen: set[int] = set()
    pending: list[Any] = [*args, *kwargs.values()]
    while pending:
        item = pending.pop()
        if isinstance(item, Secret):
            found.append(item.reveal())
        elif isinstance(item, Mapping | list | tuple | set | frozenset) and id(item) not in seen:
            seen.add(id(item))
            try:
                pending.extend(item.values() if isinstance(item, Mapping) else item)
            except Exception:  # a broken container cannot stop a rollback from being reported
                continue
    return tuple(found)
