"""Faults injected into one run (``--fail``, ``--latency``, rehearsal timeouts) by wrapping steps.

The user's step is never changed: each run wraps it in an `InjectedStep` that adds latency before
execute, fails instead of calling it, or calls it and then hangs (the effect happened but the answer
never came: the in-doubt case). The wrapper keeps the step's name and options, so the diagram and
the report read as if the step itself had been slow or had failed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import AegisError
from aegis_nb.saga.binding import argument_receiver
from aegis_nb.saga.definition import step_name


class InjectedFailure(AegisError):
    """The failure ``--fail STEP[=MESSAGE]`` (or a rehearsal) put in place of a step's execute."""


class Hang(enum.Enum):
    """Where an injected hang happens."""

    NONE = "none"
    AFTER_EFFECT = "after_effect"


@dataclass(frozen=True)
class Fault:
    """What to do to one step in one run; the default does nothing."""

    fail: bool = False
    message: str | None = None
    latency: float = 0.0
    hang: Hang = Hang.NONE
    timeout: float | None = None  # replaces the step's own timeout (rehearsals bound hangs this way)

    @property
    def is_noop(self) -> bool:
        return not self.fail and self.latency == 0.0 and self.hang is Hang.NONE and self.timeout is None


class InjectedStep:
    """`step` with `fault` applied; compensation is the step's own, untouched."""

    def __init__(self, step: Any, fault: Fault) -> None:
        self.step = step
        self.fault = fault
        self.name = step_name(step)
        self.timeout = fault.timeout if fault.timeout is not None else getattr(step, "timeout", None)
        self.compensation_retry = getattr(step, "compensation_retry", None)
        self.in_doubt = getattr(step, "in_doubt", False)
        self.is_complete = getattr(step, "is_complete", True)

    async def execute(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> AegisContext | None:
        fault = self.fault
        if fault.latency > 0:
            await anyio.sleep(fault.latency)
        if fault.fail:
            raise InjectedFailure(fault.message or f"{self.name} failed (injected by --fail)")
        result: AegisContext | None = await self.step.execute(ctx, *args, **kwargs)
        if fault.hang is Hang.AFTER_EFFECT:
            await anyio.sleep_forever()
        return result

    async def compensate(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> object:
        return await self.step.compensate(ctx, *args, **kwargs)

    def forwards_to(self, method: str) -> Callable[..., object] | None:
        """What the wrapped step's `method` passes its arguments to: the wrapper adds none of its own."""
        return argument_receiver(self.step, method)

    def __repr__(self) -> str:
        return f"<{self.name} with {self.fault}>"


def inject(step: Any, fault: Fault) -> Any:
    """`step` itself when `fault` does nothing, else the wrapper."""
    return step if fault.is_noop else InjectedStep(step, fault)
