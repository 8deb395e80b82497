"""Parallel groups: steps that start together on one context, and how their outputs merge.

``parallel(book_flight, reserve_hotel)`` is one saga entry whose members run concurrently, each with
its own idempotency key. The group's output merges the metadata the members wrote, in declaration
order; two members writing one key with different values fail the group, naming both. When a member
fails, the others are cancelled and waited for, and the group's compensations run concurrently
(`CompensationOrder.CONCURRENT`) or one by one, newest start first (`REVERSE_START`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError, StepResultError


class CompensationOrder(enum.Enum):
    """How a parallel group's members are compensated."""

    CONCURRENT = "concurrent"
    """All at once, each with its own retries: a failure never holds its siblings up."""

    REVERSE_START = "reverse_start"
    """One by one, the member started last first, as a sequential saga would."""


@dataclass(frozen=True, slots=True)
class ParallelGroup:
    """A saga entry of members that start together; build it with `parallel`.

    `members` are saga entries as the list form takes them (a bare step or ``(step, args, kwargs)``),
    checked when the saga is.
    """

    members: tuple[Any, ...]
    compensation: CompensationOrder = CompensationOrder.CONCURRENT


@dataclass(frozen=True, slots=True)
class StepGroup:
    """Where a checked step sits in its parallel group: the group's first index, size and order.

    Members of a group have consecutive indexes from `start`; member ``n`` has index ``start + n``.
    """

    start: int
    size: int
    compensation: CompensationOrder

    def member(self, index: int) -> int:
        """The member number (from 0) of the step at saga index `index`."""
        return index - self.start


def parallel(
    *members: Any, compensation: CompensationOrder | str = CompensationOrder.CONCURRENT
) -> ParallelGroup:
    """A group of saga entries that start together on the same context (see the module docstring).

    Each member is a step or ``(step, args, kwargs)``; `compensation` is ``"concurrent"`` (default)
    or ``"reverse_start"``. Refused here: an empty group, a group inside a group, a member that is no
    step, one step object used twice.
    """
    try:
        order = CompensationOrder(compensation)
    except ValueError:
        choices = ", ".join(repr(o.value) for o in CompensationOrder)
        raise SagaDefinitionError(
            f"parallel(compensation=...) must be one of {choices}, got {compensation!r}"
        ) from None
    if not members:
        raise SagaDefinitionError("parallel() needs at least one member: an empty group has nothing to run")
    seen: dict[int, int] = {}
    for number, member in enumerate(members):
        step = member[0] if isinstance(member, tuple) and member else member
        if isinstance(step, ParallelGroup):
            raise SagaDefinitionError(
                f"parallel member {number} is itself a parallel group; groups do not nest "
                "(list its members in the outer group instead)"
            )
        if not (hasattr(step, "execute") and hasattr(step, "compensate")):
            raise SagaDefinitionError(
                f"parallel member {number} is not a step: got {type(step).__name__}, which has no "
                "async execute(ctx, ...) and compensate(ctx, ...)"
            )
        if id(step) in seen:
            raise SagaDefinitionError(
                f"parallel members {seen[id(step)]} and {number} are the same step object; members run "
                "at once, each with its own key, so give each its own step"
            )
        seen[id(step)] = number
    return ParallelGroup(tuple(members), order)


def merge_outputs(start: AegisContext, outputs: Sequence[AegisContext], names: Sequence[str]) -> AegisContext:
    """The context after a group: `start` with every key a member wrote, in declaration order.

    A member writes a key when its output holds a value `start` does not. Two members writing one
    key with different values is a `StepResultError` naming both; the output's deadline is the
    earliest any member returned.
    """
    before = start.metadata
    written: dict[str, Any] = {}
    writer: dict[str, str] = {}
    for name, output in zip(names, outputs, strict=True):
        for key, value in output.metadata.items():
            if key in before and before[key] == value:
                continue
            if key in written and written[key] != value:
                raise StepResultError(
                    f"parallel members {writer[key]!r} and {name!r} both wrote metadata key {key!r}, "
                    "with different values: the group's output would depend on which finished last"
                )
            written[key], writer[key] = value, name
    merged = start.with_metadata(written) if written else start
    deadline = min((output.deadline for output in outputs), default=start.deadline)
    return merged.with_budget(deadline) if deadline < merged.deadline else merged


__all__ = ["CompensationOrder", "ParallelGroup", "StepGroup", "merge_outputs", "parallel"]
