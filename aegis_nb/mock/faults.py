"""Fault plans for the mock travel agency: latency, failures, declines and in-doubt timeouts, per tool.

A `FaultPlan` is an immutable value (tool name -> `ToolFaults`), checked when built so a typo fails
loudly instead of silently injecting nothing. The agency turns it into `FaultState` (counters and
seeded random generators) that it consumes call by call; replacing the plan resets that state, while
replacing one tool's faults resets only that tool's (`FaultState.replace_tool`).
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from aegis_nb.kernel.errors import AegisError

AGENCY_TOOLS: tuple[str, ...] = (
    "search_flights",
    "book_flight",
    "cancel_flight",
    "reserve_hotel",
    "cancel_hotel",
    "charge_card",
    "refund_card",
    "list_bookings",
)
"""The tools a fault plan may target."""


class FaultPlanError(AegisError, ValueError):
    """A fault plan names an unknown tool or option, or has an impossible value."""


class LatencyKind(enum.Enum):
    FIXED = "fixed"
    UNIFORM = "uniform"
    EXPONENTIAL = "exponential"


@dataclass(frozen=True, slots=True)
class Latency:
    """How long a call waits before it acts: fixed, or drawn from a seeded distribution."""

    kind: LatencyKind
    low: float
    high: float = 0.0
    seed: int = 0

    @classmethod
    def fixed(cls, seconds: float) -> Latency:
        return cls(LatencyKind.FIXED, _seconds(seconds, "latency"))

    @classmethod
    def uniform(cls, low: float, high: float, seed: int = 0) -> Latency:
        """Uniform between `low` and `high` seconds, reproducible from `seed`."""
        low, high = _seconds(low, "latency low"), _seconds(high, "latency high")
        if high < low:
            raise FaultPlanError(f"latency high ({high}) must not be below low ({low})")
        return cls(LatencyKind.UNIFORM, low, high, seed)

    @classmethod
    def exponential(cls, mean: float, seed: int = 0) -> Latency:
        """Exponentially distributed with the given mean (a long tail of slow calls)."""
        mean = _seconds(mean, "latency mean")
        if mean == 0:
            raise FaultPlanError("an exponential latency needs a positive mean")
        return cls(LatencyKind.EXPONENTIAL, mean, 0.0, seed)

    def sampler(self) -> random.Random:
        return random.Random(self.seed)

    def draw(self, rng: random.Random) -> float:
        if self.kind is LatencyKind.FIXED:
            return self.low
        if self.kind is LatencyKind.UNIFORM:
            return rng.uniform(self.low, self.high)
        return rng.expovariate(1.0 / self.low)

    def to_json(self) -> dict[str, Any]:
        if self.kind is LatencyKind.FIXED:
            return {"fixed": self.low}
        if self.kind is LatencyKind.UNIFORM:
            return {"uniform": [self.low, self.high], "seed": self.seed}
        return {"exponential": self.low, "seed": self.seed}

    @classmethod
    def from_json(cls, data: object, tool: str) -> Latency:
        """Seconds, or ``{"uniform": [low, high], "seed": 1}`` and the like; errors name `tool`."""
        # The constructors check the values but know no tool: every error is named here, in one place.
        try:
            return cls._parse(data)
        except FaultPlanError as exc:
            raise FaultPlanError(f"{tool}: {exc}") from None

    @classmethod
    def _parse(cls, data: object) -> Latency:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return cls.fixed(data)
        if not isinstance(data, Mapping):
            raise FaultPlanError(f"latency must be seconds or an object, got {data!r}")
        seed = data.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise FaultPlanError(f"latency seed must be an int, got {seed!r}")
        kinds = [key for key in ("fixed", "uniform", "exponential") if key in data]
        unknown = set(data) - {"fixed", "uniform", "exponential", "seed"}
        if len(kinds) != 1 or unknown:
            raise FaultPlanError(
                f"latency takes one of fixed, uniform, exponential (and a seed), got {dict(data)}"
            )
        value = data[kinds[0]]
        if kinds[0] == "fixed":
            return cls.fixed(value)
        if kinds[0] == "exponential":
            return cls.exponential(value, seed)
        if not (isinstance(value, list | tuple) and len(value) == 2):
            raise FaultPlanError(f"uniform latency is [low, high], got {value!r}")
        return cls.uniform(value[0], value[1], seed)


@dataclass(frozen=True, slots=True)
class ToolFaults:
    """What goes wrong with one tool.

    - `latency`: wait before acting (a `Latency`).
    - `fail_next`: the next N calls fail before acting. On an undo tool (cancel_*, refund_card) this
      is "a compensation that fails N times before it succeeds".
    - `fail_rate`: each call fails before acting with this probability, drawn from `seed`.
    - `declined`: charge_card only: the card is declined ("Card Declined!").
    - `hang_after_effect`: the next N calls act, then never answer (the in-doubt timeout).
    """

    latency: Latency | None = None
    fail_next: int = 0
    fail_rate: float = 0.0
    seed: int = 0
    declined: bool = False
    hang_after_effect: int = 0

    def __post_init__(self) -> None:
        for name in ("fail_next", "hang_after_effect", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or (name != "seed" and value < 0):
                raise FaultPlanError(f"{name} must be a non-negative int, got {value!r}")
        rate = self.fail_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
            raise FaultPlanError(f"fail_rate must be a probability between 0 and 1, got {rate!r}")
        if not isinstance(self.declined, bool):
            raise FaultPlanError(f"declined must be a bool, got {self.declined!r}")
        if self.latency is not None and not isinstance(self.latency, Latency):
            raise FaultPlanError(f"latency must be a Latency, got {type(self.latency).__name__}")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                data[f.name] = value.to_json() if isinstance(value, Latency) else value
        return data

    @classmethod
    def from_json(cls, data: object, tool: str) -> ToolFaults:
        if not isinstance(data, Mapping):
            raise FaultPlanError(f"{tool}: faults must be an object, got {data!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise FaultPlanError(f"{tool}: unknown fault option(s) {unknown}; known: {sorted(known)}")
        options = dict(data)
        if "latency" in options and options["latency"] is not None:
            options["latency"] = Latency.from_json(options["latency"], tool)
        try:
            return cls(**options)
        except FaultPlanError as exc:
            raise FaultPlanError(f"{tool}: {exc}") from None


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Faults per agency tool; tools not named behave perfectly. Immutable: `with_tool` makes a new one."""

    tools: Mapping[str, ToolFaults] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for tool, faults in self.tools.items():
            if tool not in AGENCY_TOOLS:
                raise FaultPlanError(f"unknown tool {tool!r} in fault plan; known: {list(AGENCY_TOOLS)}")
            if not isinstance(faults, ToolFaults):
                raise FaultPlanError(f"{tool}: expected ToolFaults, got {type(faults).__name__}")
            if faults.declined and tool != "charge_card":
                raise FaultPlanError(f"{tool}: only charge_card can decline")
        # A read-only copy: a plan changed in place would skip these checks (and the agency's
        # running state, which a replaced plan resets per tool, would not notice).
        object.__setattr__(self, "tools", MappingProxyType(dict(self.tools)))

    def __hash__(self) -> int:
        return hash(frozenset(self.tools.items()))

    # Immutable, so a copy is the plan itself (a mappingproxy could not be copied otherwise).
    def __copy__(self) -> FaultPlan:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FaultPlan:
        return self

    def for_tool(self, tool: str) -> ToolFaults:
        return self.tools.get(tool, _NO_FAULTS)

    def with_tool(self, tool: str, faults: ToolFaults) -> FaultPlan:
        """A new plan with `tool`'s faults replaced."""
        return FaultPlan({**self.tools, tool: faults})

    def to_json(self) -> dict[str, Any]:
        return {tool: faults.to_json() for tool, faults in self.tools.items()}

    @classmethod
    def from_json(cls, data: object) -> FaultPlan:
        """``{"charge_card": {"declined": true}, "reserve_hotel": {"latency": 0.5}}`` -> a checked plan."""
        if not isinstance(data, Mapping):
            raise FaultPlanError(f"a fault plan is an object of tool name -> faults, got {data!r}")
        for tool in data:
            if tool not in AGENCY_TOOLS:
                raise FaultPlanError(f"unknown tool {tool!r} in fault plan; known: {list(AGENCY_TOOLS)}")
        return cls({tool: ToolFaults.from_json(faults, tool) for tool, faults in data.items()})


_NO_FAULTS = ToolFaults()


class FaultOutcome(enum.Enum):
    """What the next call of a tool must do, decided before it acts."""

    PROCEED = "proceed"
    FAIL = "fail"
    DECLINE = "decline"


class FaultState:
    """The running side of a `FaultPlan`: remaining counts and seeded generators, per tool."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self._fail_next = {tool: f.fail_next for tool, f in plan.tools.items()}
        self._hang = {tool: f.hang_after_effect for tool, f in plan.tools.items()}
        self._rates = {tool: random.Random(f.seed) for tool, f in plan.tools.items()}
        self._latency = {tool: f.latency.sampler() for tool, f in plan.tools.items() if f.latency is not None}

    def replace_tool(self, tool: str, faults: ToolFaults) -> None:
        """Swap in `tool`'s new faults; the other tools keep their remaining counts and generators."""
        self.plan = self.plan.with_tool(tool, faults)  # checks the tool and faults before any change
        self._fail_next[tool] = faults.fail_next
        self._hang[tool] = faults.hang_after_effect
        self._rates[tool] = random.Random(faults.seed)
        if faults.latency is None:
            self._latency.pop(tool, None)
        else:
            self._latency[tool] = faults.latency.sampler()

    def delay(self, tool: str) -> float:
        """Seconds the next call of `tool` waits before acting."""
        latency = self.plan.for_tool(tool).latency
        if latency is None:
            return 0.0
        return latency.draw(self._latency[tool])

    def before(self, tool: str) -> FaultOutcome:
        """Decide whether the next call fails (consuming a `fail_next` count or a random draw)."""
        faults = self.plan.for_tool(tool)
        if self._fail_next.get(tool, 0) > 0:
            self._fail_next[tool] -= 1
            return FaultOutcome.FAIL
        if faults.fail_rate > 0 and self._rates[tool].random() < faults.fail_rate:
            return FaultOutcome.FAIL
        if faults.declined:
            return FaultOutcome.DECLINE
        return FaultOutcome.PROCEED

    def hangs_after_effect(self, tool: str) -> bool:
        """Whether the call that just acted must now stop answering (consumes one count)."""
        if self._hang.get(tool, 0) > 0:
            self._hang[tool] -= 1
            return True
        return False


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise FaultPlanError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)
