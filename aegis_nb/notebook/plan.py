"""Which steps a saga magic runs, in order, with which arguments: resolved from names before anything runs.

A name is looked up among the steps ``%%aegis_step`` registered, then in the user's namespace (a step
object, or a step class that takes no arguments, as in the documentation's example). The cell form
lists one step per line, optionally called with Python arguments evaluated in the user's namespace::

    %%aegis_saga --deadline 2
    BookFlight("Lisbon")
    ReserveHotel(nights=3)
    ChargeCard

Each position also has a *label*: the engine's unique name for it, as the diagram and the report show
it (a step used twice is ``BookFlight#1`` and ``BookFlight#2``). Faults are keyed by label, so one use
of a repeated step can be made to fail on its own.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from IPython.core.error import UsageError

from aegis_nb.notebook.injection import Fault, inject
from aegis_nb.notebook.options import did_you_mean
from aegis_nb.saga.definition import SagaEntry, normalize_saga


@dataclass(frozen=True)
class PlannedStep:
    """One line of a saga: the name it was written as, the step, and its arguments."""

    name: str
    step: Any
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SagaPlan:
    """The saga a magic will run."""

    steps: tuple[PlannedStep, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The names the steps were written as (a repeated step's name repeats)."""
        return tuple(planned.name for planned in self.steps)

    @cached_property
    def labels(self) -> tuple[str, ...]:
        """Each position's unique name, as the engine numbers repeats (``Fly#1``, ``Fly#2``).

        Taken from the engine itself rather than recomputed, so the labels always match the diagram
        and the report. The plan must be a valid saga (`SagaRunner.check` it first).
        """
        return tuple(spec.name for spec in normalize_saga(self.entries()))

    def select(self, name: str, option: str) -> tuple[int, ...]:
        """The positions an option's step name picks out: one by its label, else every use of a name.

        ``Fly#2`` (or any label) picks that one step; ``Fly`` picks every line written as ``Fly``.
        """
        if name in self.labels:
            return (self.labels.index(name),)
        positions = tuple(index for index, written in enumerate(self.names) if written == name)
        if not positions:
            known = sorted({*self.labels, *self.names})
            raise UsageError(
                f"{option} names {name!r}, which is not a step of this saga{did_you_mean(name, known)}; "
                f"its steps are: {', '.join(self.labels)}"
            )
        return positions

    def entries(self, faults: Mapping[str, Fault] | None = None) -> list[SagaEntry]:
        """The engine's saga list for one run, with `faults` (keyed by label) wrapped around their steps."""
        if not faults:
            return [(planned.step, planned.args, dict(planned.kwargs)) for planned in self.steps]
        return [
            (inject(planned.step, faults.get(label, Fault())), planned.args, dict(planned.kwargs))
            for planned, label in zip(self.steps, self.labels, strict=True)
        ]


def parse_plan(
    names: Sequence[str], body: str, steps: Mapping[str, Any], namespace: Mapping[str, Any]
) -> SagaPlan:
    """The saga from the line's step names followed by the cell body's lines."""
    planned = [PlannedStep(name, resolve_step(name, steps, namespace)) for name in names]
    for number, raw in enumerate(body.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        planned.append(_parse_line(number, line, steps, namespace))
    if not planned:
        raise UsageError(
            "the saga has no steps: list them after the magic (%aegis_saga BookFlight ChargeCard) "
            "or one per line in the cell (%%aegis_saga)"
        )
    return SagaPlan(tuple(planned))


def resolve_step(name: str, steps: Mapping[str, Any], namespace: Mapping[str, Any]) -> Any:
    """The step called `name`: registered by ``%%aegis_step``, else a step (or step class) variable."""
    if name in steps:
        return steps[name]
    value = namespace.get(name)
    if value is None:
        known = sorted(set(steps) | {k for k, v in namespace.items() if _looks_like_step(v)})
        hint = f"; known steps: {', '.join(known)}" if known else ""
        raise UsageError(
            f"unknown step {name!r}{did_you_mean(name, known)}: define it with %%aegis_step {name}, "
            f"or bind a step object to the variable {name}{hint}"
        )
    if inspect.isclass(value) and _looks_like_step(value):
        try:
            return value()
        except TypeError as exc:
            raise UsageError(
                f"step class {name} needs arguments to be built ({exc}); bind an instance to a variable "
                f"(e.g. {name.lower()} = {name}(...)) and name that"
            ) from None
    if not _looks_like_step(value):
        raise UsageError(
            f"{name} is a {type(value).__name__}, not a step: a step has async execute(ctx, ...) and "
            "compensate(ctx, ...); define one with %%aegis_step"
        )
    return value


def _parse_line(
    number: int, line: str, steps: Mapping[str, Any], namespace: Mapping[str, Any]
) -> PlannedStep:
    try:
        node = ast.parse(line, mode="eval").body
    except SyntaxError as exc:
        raise UsageError(
            f"line {number} of the saga ({line!r}): {exc.msg}; write STEP or STEP(arg, key=value)"
        ) from None
    if isinstance(node, ast.Name):
        return PlannedStep(node.id, resolve_step(node.id, steps, namespace))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        step = resolve_step(name, steps, namespace)
        call = ast.Expression(ast.Call(ast.Name("_aegis_args", ast.Load()), node.args, node.keywords))
        ast.fix_missing_locations(call)
        scope = dict(namespace)
        scope["_aegis_args"] = _collect
        try:
            args, kwargs = eval(compile(call, f"<saga line {number}>", "eval"), scope)
        except Exception as exc:
            raise UsageError(
                f"line {number} of the saga ({line!r}): evaluating the arguments raised "
                f"{type(exc).__name__}: {exc}"
            ) from None
        return PlannedStep(name, step, args, kwargs)
    raise UsageError(f"line {number} of the saga ({line!r}): write STEP or STEP(arg, key=value)")


def _collect(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs


def _looks_like_step(value: object) -> bool:
    return callable(getattr(value, "execute", None)) and callable(getattr(value, "compensate", None))
