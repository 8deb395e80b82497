"""`StepRecord`: one step of a saga as it crosses into another process, and its one JSON form.

A `StepSpec` holds the live step object; a record names it by its locator instead, with its JSON
arguments and its options. The journal's run row holds one per step (for recovery), and so does a
Temporal saga plan (for the workflow and its activities).

Schema 1 grew by keys its first readers ignore, so 0.1.0 still reads what this writes. This reads
what 0.1.0 wrote: its journals left a step's index to its place in the list and kept none of its
options (read as None: recovery takes them from the rebuilt step), and its Temporal plans named
the locator ``"step"``. A member of a parallel group keeps its `StepGroup` under ``"group"``,
written only when set, so a step outside any group is written byte for byte as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.durable.codec import RecordError
from aegis_nb.saga.durable.locator import StepLocator
from aegis_nb.saga.parallel import CompensationOrder, StepGroup
from aegis_nb.saga.retry import RetryPolicy


@dataclass(frozen=True, slots=True)
class StepRecord:
    """Where to find one step of a run, its JSON arguments and its options (`retry` None: the engine's)."""

    index: int
    name: str
    locator: StepLocator
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    timeout: float | None
    retry: RetryPolicy | None
    in_doubt: bool
    group: StepGroup | None = None

    @classmethod
    def of(cls, spec: StepSpec, locator: StepLocator) -> StepRecord:
        """The record of `spec`, whose step `locator` finds again (its arguments already checked as JSON)."""
        kwargs = MappingProxyType(dict(spec.kwargs))
        return cls(
            spec.index,
            spec.name,
            locator,
            spec.args,
            kwargs,
            spec.timeout,
            spec.retry,
            spec.in_doubt,
            spec.group,
        )

    def to_json(self) -> dict[str, Any]:
        data = {
            "index": self.index,
            "name": self.name,
            "locator": self.locator.to_json(),
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "timeout": self.timeout,
            "retry": None if self.retry is None else retry_to_json(self.retry),
            "in_doubt": self.in_doubt,
        }
        if self.group is not None:
            group = self.group
            data["group"] = {
                "start": group.start,
                "size": group.size,
                "compensation": group.compensation.value,
            }
        return data

    @classmethod
    def from_json(cls, data: object, position: int) -> StepRecord:
        """The record `to_json` (or 0.1.0) wrote as step `position` of its list, checked (`RecordError`)."""
        if not isinstance(data, dict):
            raise RecordError(f"step {position} is not a JSON object")
        index = data.get("index", position)
        name, args, kwargs, in_doubt = (data.get(key) for key in ("name", "args", "kwargs", "in_doubt"))
        if not (
            index == position
            and isinstance(name, str)
            and isinstance(args, list)
            and isinstance(kwargs, dict)
            and all(isinstance(key, str) for key in kwargs)
            and isinstance(in_doubt, bool)
        ):
            raise RecordError(f"step {position} is malformed: {data!r}")
        locator = StepLocator.from_json(data["locator"] if "locator" in data else data.get("step"))
        retry = data.get("retry")
        return cls(
            index=position,
            name=name,
            locator=locator,
            args=tuple(args),
            kwargs=MappingProxyType(kwargs),
            timeout=_timeout(data.get("timeout"), position),
            retry=None if retry is None else retry_from_json(retry),
            in_doubt=in_doubt,
            group=_group(data.get("group"), position),
        )


def _group(value: object, position: int) -> StepGroup | None:
    """The group `to_json` wrote for step `position` (None when absent), checked (`RecordError`)."""
    if value is None:
        return None
    bad = RecordError(f"step {position} has a malformed parallel group: {value!r}")
    if not isinstance(value, dict):
        raise bad
    start, size, order = value.get("start"), value.get("size"), value.get("compensation")
    if not (
        type(start) is int
        and type(size) is int
        and 0 <= start <= position < start + size
        and isinstance(order, str)
        and order in {o.value for o in CompensationOrder}
    ):
        raise bad
    return StepGroup(start, size, CompensationOrder(order))


def _timeout(value: object, position: int) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (value > 0 and math.isfinite(value))
    ):
        raise RecordError(f"step {position} timeout must be positive seconds or null, got {value!r}")
    return float(value)


def retry_to_json(policy: RetryPolicy) -> dict[str, Any]:
    return {
        "attempts": policy.attempts,
        "initial_delay": policy.initial_delay,
        "multiplier": policy.multiplier,
        "max_delay": policy.max_delay,
    }


def retry_from_json(data: object) -> RetryPolicy:
    """The policy `retry_to_json` wrote; `RecordError` if it is not one."""
    if not isinstance(data, dict):
        raise RecordError(f"a retry policy must be a JSON object, got {data!r}")
    try:
        return RetryPolicy(
            attempts=int(data["attempts"]),
            initial_delay=float(data["initial_delay"]),
            multiplier=float(data["multiplier"]),
            max_delay=float(data["max_delay"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"malformed retry policy {data!r} ({exc})") from None
