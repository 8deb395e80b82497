"""`AegisContext`: the immutable baggage a saga threads from step to step.

A context holds JSON-compatible metadata, an absolute deadline on the event loop's clock
(`anyio.current_time()`) and, while a saga runs, the run id and step position that make up the
step's idempotency key. Every change returns a new context; the old one stays as it was, which is
what lets each compensation see exactly the state its own step produced.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

import anyio

from aegis_nb.kernel.values import FrozenDict, JSONValue, frozen_secrets, thaw


class AegisContext:
    """Immutable metadata plus a deadline that can only be shortened."""

    __slots__ = ("_deadline", "_metadata", "_run_id", "_step_index")
    _metadata: FrozenDict
    _deadline: float
    _run_id: str | None
    _step_index: int | None

    def __init__(self, metadata: Mapping[str, Any] | None = None, *, deadline: float = math.inf) -> None:
        """`deadline` is on the loop clock.

        An int too large for a float is no deadline (``inf``); one too small is long past (``-inf``).
        """
        if hasattr(self, "_deadline"):  # a second __init__ would lengthen the deadline in place
            raise AttributeError(
                "AegisContext is immutable; use with_metadata() (tried to call __init__ again)"
            )
        # The default (what most callers pass) skips the checks.
        seconds = math.inf if deadline is math.inf else _number(deadline)
        if seconds is None:
            raise TypeError(f"deadline must be a number on the loop clock, got {deadline!r}")
        # `is None`, not falsiness: [] or "" must be rejected as any other non-mapping is.
        frozen = _EMPTY if metadata is None else _EMPTY.merged(metadata)
        object.__setattr__(self, "_metadata", frozen)
        object.__setattr__(self, "_deadline", seconds)
        object.__setattr__(self, "_run_id", None)
        object.__setattr__(self, "_step_index", None)

    @classmethod
    def from_parts(
        cls,
        metadata: Mapping[str, Any],
        *,
        deadline: float,
        run_id: str | None,
        step_index: int | None,
    ) -> AegisContext:
        """A context rebuilt from the parts a journal or a Temporal payload holds.

        Metadata already a `FrozenDict` is taken as it is (it is frozen by construction); any other
        mapping is checked and frozen as the constructor does.
        """
        if (seconds := _number(deadline)) is None:
            raise TypeError(f"deadline must be a number on the loop clock, got {deadline!r}")
        if run_id is not None and not isinstance(run_id, str):
            raise TypeError(f"run_id must be a str or None, got {run_id!r}")
        if step_index is not None and (isinstance(step_index, bool) or not isinstance(step_index, int)):
            raise TypeError(f"step_index must be an int or None, got {step_index!r}")
        frozen = metadata if type(metadata) is FrozenDict else FrozenDict(metadata)
        return _context(frozen, seconds, run_id, step_index)

    # -- reading -------------------------------------------------------------------------------

    @property
    def metadata(self) -> FrozenDict:
        """Read-only metadata; nested dicts and lists are frozen too."""
        return self._metadata

    @property
    def deadline(self) -> float:
        """Absolute deadline on `anyio.current_time()`'s clock; ``inf`` when there is none."""
        return self._deadline

    @property
    def run_id(self) -> str | None:
        """The saga run this context belongs to, set by the engine."""
        return self._run_id

    @property
    def step_index(self) -> int | None:
        """Position (0-based) of the step this context was handed to, set by the engine."""
        return self._step_index

    @property
    def idempotency_key(self) -> str | None:
        """``run_id/position``: the same in execute, compensate and recovery, so retries are safe."""
        if self._run_id is None or self._step_index is None:
            return None
        return f"{self._run_id}/{self._step_index}"

    def remaining(self) -> float:
        """Seconds left before the deadline (negative once past; ``inf`` without a deadline)."""
        if self._deadline == math.inf:
            return math.inf
        return self._deadline - anyio.current_time()

    def to_json(self) -> dict[str, JSONValue]:
        """Metadata as plain JSON data, secrets shown as ``***``."""
        return thaw(self._metadata)  # type: ignore[no-any-return]

    def secret_values(self) -> tuple[str, ...]:
        """The revealed secrets in this context, so error text can be scrubbed of them."""
        return frozen_secrets(self._metadata)

    # -- deriving ------------------------------------------------------------------------------

    def with_metadata(self, updates: Mapping[str, Any]) -> AegisContext:
        """A new context with `updates` merged into the metadata; this one is left untouched."""
        merged = self._metadata.merged(updates)
        return _context(merged, self._deadline, self._run_id, self._step_index)

    def with_deadline(self, deadline: float) -> AegisContext:
        """A new context whose deadline is the earlier of the current one and `deadline`.

        An int too large for a float is later than any deadline, so it changes nothing.
        """
        if (number := _number(deadline)) is None:
            raise TypeError(f"deadline must be a number on the loop clock, got {deadline!r}")
        if number >= self._deadline:
            return self
        return _context(self._metadata, number, self._run_id, self._step_index)

    def with_timeout(self, seconds: float) -> AegisContext:
        """A new context due `seconds` from now, unless the current deadline is earlier.

        An int too large for a float is an endless timeout, so it changes nothing.
        """
        if (number := _number(seconds)) is None:
            raise TypeError(f"timeout must be a number of seconds, got {seconds!r}")
        if number < 0:
            raise ValueError(f"timeout must not be negative, got {seconds!r}")
        return self.with_deadline(anyio.current_time() + number)

    # The engine's two derivations. Public so that every module that runs steps (the engine,
    # recovery, the Temporal activities) says what it does by name; a step has no need of them.

    def for_step(self, run_id: str, index: int) -> AegisContext:
        """This context stamped for position `index` of run `run_id`, which make its idempotency key."""
        return _context(self._metadata, self._deadline, run_id, index)

    def with_budget(self, deadline: float) -> AegisContext:
        """This context with its deadline replaced by `deadline`, later or earlier.

        Unlike `with_deadline`, which only shortens, this may lengthen: a compensation gets a budget
        of its own, since it runs when the forward deadline may already be spent. A step gains
        nothing by calling it: the engine caps the context a step returns at the step's deadline.
        """
        # The engine's budgets are floats and skip the checks (one per compensation); NaN is the one
        # float that is no deadline.
        is_float = type(deadline) is float and not math.isnan(deadline)
        if (seconds := deadline if is_float else _number(deadline)) is None:
            raise TypeError(f"deadline must be a number on the loop clock, got {deadline!r}")
        return _context(self._metadata, seconds, self._run_id, self._step_index)

    # -- value behaviour -----------------------------------------------------------------------

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"AegisContext is immutable; use with_metadata() (tried to set {name!r})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("AegisContext is immutable")

    # Immutable, so a copy is the context itself; without these, copy would go through __reduce__.
    def __copy__(self) -> AegisContext:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> AegisContext:
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AegisContext):
            return NotImplemented
        return (
            self._metadata == other._metadata
            and self._deadline == other._deadline
            and self._run_id == other._run_id
            and self._step_index == other._step_index
        )

    def __hash__(self) -> int:
        return hash((self._metadata, self._deadline, self._run_id, self._step_index))

    def __repr__(self) -> str:
        parts = [f"metadata={self.to_json()!r}"]
        if self._deadline != math.inf:
            parts.append(f"deadline={self._deadline:.6f}")
        if self._run_id is not None:
            parts.append(f"idempotency_key={self.idempotency_key!r}")
        return f"AegisContext({', '.join(parts)})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("AegisContext is not pickled; journals store to_json() instead")


def _number(value: object) -> float | None:
    """`value` as a float, or None when it is no number (a bool, NaN, a str...).

    An int beyond float range becomes an infinity of its sign instead of raising OverflowError:
    a deadline later than any float clock reading is no deadline at all.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    return None if math.isnan(number) else number


_EMPTY = FrozenDict()
"""The metadata of every context built without any (immutable, so one is enough)."""


def _context(
    metadata: FrozenDict, deadline: float, run_id: str | None, step_index: int | None
) -> AegisContext:
    """A context from parts already checked, without `__init__`'s checks and freezing."""
    ctx: AegisContext = object.__new__(AegisContext)
    # object's own __setattr__: the context's refuses every assignment.
    object.__setattr__(ctx, "_metadata", metadata)
    object.__setattr__(ctx, "_deadline", deadline)
    object.__setattr__(ctx, "_run_id", run_id)
    object.__setattr__(ctx, "_step_index", step_index)
    return ctx
