"""What crosses into Temporal: a saga as JSON (`SagaPlan`), one step call (`StepCall`), and the outcome.

Temporal stores every workflow input, activity input and result in its history, so all of it is
plain JSON built with `saga.durable.codec` (versioned, secrets redacted) and steps travel as
`saga.durable.locator` locators. A plan is checked on the client, before anything starts: a step
that a worker could not rebuild, or arguments that are not JSON, fail there with the step's name.

Clocks: a context's deadline lives on the local event loop's clock, which means nothing on another
machine. The client sends the time *left* (`SagaPlan.timeout`); the workflow turns it into an
absolute deadline on its own clock (Unix seconds, deterministic); an activity turns that into its
loop clock again, and back on the way out. Clock skew between machines shifts a deadline by the skew.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.definition import StepSpec
from aegis_nb.saga.durable.codec import (
    SCHEMA_VERSION,
    RecordError,
    context_from_json,
    context_to_json,
    json_problem,
)
from aegis_nb.saga.durable.errors import StepNotRecoverable
from aegis_nb.saga.durable.locator import StepLocator, StepResolver, one_object_per_registered_name
from aegis_nb.saga.durable.steprecord import StepRecord, retry_from_json, retry_to_json
from aegis_nb.saga.retry import RetryPolicy

_HOW_TO = (
    "on Temporal, a worker rebuilds each step by name or import path: register it on both sides "
    "(saga_worker(..., steps=[...]) and TemporalSagaRunner(..., steps=[...])) or use a module-level step"
)


@dataclass(frozen=True, slots=True)
class SagaPlan:
    """A whole saga for the workflow: the steps, the initial context, the time left and the rollback rules.

    `timeout` is the seconds left before the context's deadline when the client started the
    workflow (None: no deadline); `context` is the initial context without its deadline.
    `heartbeat_after`: an activity that may run longer than this many seconds heartbeats (None:
    none does); a shorter one is watched by its start-to-close timeout alone.
    """

    saga: str
    steps: tuple[StepRecord, ...]
    context: Mapping[str, Any]
    timeout: float | None
    compensation_budget: float
    compensation_retry: RetryPolicy
    heartbeat_timeout: float
    heartbeat_after: float | None = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "v": SCHEMA_VERSION,
            "saga": self.saga,
            "steps": [step.to_json() for step in self.steps],
            "context": dict(self.context),
            "timeout": self.timeout,
            "compensation_budget": self.compensation_budget,
            "compensation_retry": retry_to_json(self.compensation_retry),
            "heartbeat_timeout": self.heartbeat_timeout,
            "heartbeat_after": self.heartbeat_after,
        }

    @classmethod
    def from_json(cls, data: object) -> SagaPlan:
        data = _mapping(data, "saga plan")
        if data.get("v") != SCHEMA_VERSION:
            raise RecordError(f"saga plan of schema {data.get('v')!r}; this worker reads {SCHEMA_VERSION}")
        return cls(
            saga=str(data["saga"]),
            steps=tuple(StepRecord.from_json(step, position) for position, step in enumerate(data["steps"])),
            context=MappingProxyType(dict(data["context"])),
            timeout=None if data["timeout"] is None else float(data["timeout"]),
            compensation_budget=float(data["compensation_budget"]),
            compensation_retry=retry_from_json(data["compensation_retry"]),
            heartbeat_timeout=float(data["heartbeat_timeout"]),
            # A plan from a client before heartbeat_after: every activity heartbeats, as it did.
            heartbeat_after=_optional_seconds(data.get("heartbeat_after", 0.0)),
        )

    def heartbeats(self, bound: float) -> bool:
        """Whether an activity that may run `bound` seconds (``inf``: no limit) heartbeats."""
        return self.heartbeat_after is not None and bound > self.heartbeat_after


@dataclass(frozen=True, slots=True)
class StepCall:
    """One activity's input: which step, which method's arguments, and the context in workflow time.

    `limit` (Unix seconds, None: none) is when the call is cut off: the context deadline, or earlier
    under the step's own timeout. Compensations get their budget as the context deadline itself.
    """

    name: str
    locator: StepLocator
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    context: AegisContext
    limit: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "v": SCHEMA_VERSION,
            "name": self.name,
            "step": self.locator.to_json(),
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "context": context_to_json(self.context),
            "limit": self.limit,
        }

    @classmethod
    def from_json(cls, data: object) -> StepCall:
        data = _mapping(data, "step call")
        if data.get("v") != SCHEMA_VERSION:
            raise RecordError(f"step call of schema {data.get('v')!r}; this worker reads {SCHEMA_VERSION}")
        limit = data["limit"]
        return cls(
            name=str(data["name"]),
            locator=StepLocator.from_json(data["step"]),
            args=tuple(data["args"]),
            kwargs=MappingProxyType(dict(data["kwargs"])),
            context=context_from_json(data["context"]),
            limit=None if limit is None else float(limit),
        )


def _optional_seconds(value: object) -> float | None:
    """Seconds, or None; anything else is a `RecordError`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"heartbeat_after must be seconds or null, got {value!r}")
    return float(value)


def _mapping(data: object, what: str) -> Mapping[str, Any]:
    """`data` if it is a JSON object; else a `RecordError`, which the workflow and the activities report."""
    if not isinstance(data, Mapping):
        raise RecordError(f"a {what} must be a JSON object, got {type(data).__name__}")
    return data


def plan_steps(saga: str, specs: Sequence[StepSpec], resolver: StepResolver) -> tuple[StepRecord, ...]:
    """Each checked entry as a `StepRecord`; `StepNotRecoverable` naming the step a worker could not run.

    Two different objects located by one registered name are refused too: the worker would run the
    registered one for both entries.
    """
    records: list[StepRecord] = []
    for spec in specs:
        where = f"saga {saga!r}, entry {spec.index} ({spec.name})"
        located = resolver.locate(spec.step)
        if isinstance(located, str):
            raise StepNotRecoverable(
                f"{where}: a Temporal worker could not rebuild this step: {located}; {_HOW_TO}"
            )
        problem = json_problem(list(spec.args), "args") or json_problem(dict(spec.kwargs), "kwargs")
        if problem:
            raise StepNotRecoverable(f"{where}: its arguments cannot cross into Temporal history: {problem}")
        records.append(StepRecord.of(spec, located))
    one_object_per_registered_name(
        saga,
        specs,
        [record.locator for record in records],
        rebuilder="a Temporal worker",
        registration="saga_worker(..., steps={keys}) and TemporalSagaRunner(..., steps=the same)",
    )
    return tuple(records)


def context_without_deadline(ctx: AegisContext) -> dict[str, Any]:
    """The context as JSON with no deadline: the plan sends the time left instead."""
    data = context_to_json(ctx)
    data["deadline"] = None
    return data


def restamp(ctx: AegisContext, deadline: float, run_id: str | None, index: int | None) -> AegisContext:
    """`ctx` with its deadline replaced and its idempotency key set (metadata untouched)."""
    return AegisContext.from_parts(ctx.metadata, deadline=deadline, run_id=run_id, step_index=index)


def convert_deadline(deadline: float, *, source: Callable[[], float], target: Callable[[], float]) -> float:
    """`deadline` on the `source` clock as the same moment on the `target` clock (``inf`` stays ``inf``)."""
    if deadline == math.inf:
        return math.inf
    return target() + (deadline - source())


def wall_clock() -> float:
    """Unix seconds: the clock workflow time is on (see `temporalio.workflow.time`)."""
    return time.time()
