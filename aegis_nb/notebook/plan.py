"""Which steps a saga magic runs, in order, with which arguments: resolved from names before anything runs.

A name is looked up among the steps ``%%aegis_step`` registered, then in the user's namespace (a step
object, or a step class that takes no arguments, as in the documentation's example). The cell form
lists one step per line, optionally called with Python arguments evaluated in the user's namespace::

    %%aegis_saga --deadline 2
    BookFlight("Lisbon")
    ReserveHotel(nights=3)
    ChargeCard

Steps on one line joined by ``&`` run together, as a parallel group (`aegis_nb.saga.parallel`), and
so does a variable bound to ``parallel(...)`` on a line of its own (which can choose
``compensation="reverse_start"``)::

    %%aegis_saga
    BookFlight("LIS") & ReserveHotel(nights=3)
    ChargeCard

Groups do not nest: a group inside a group is refused, naming its line, before anything runs.

Each position also has a *label*: the engine's unique name for it, as the diagram and the report show
it (a step used twice is ``BookFlight#1`` and ``BookFlight#2``). Faults are keyed by label, so one use
of a repeated step can be made to fail on its own.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeAlias

from IPython.core.error import UsageError

from aegis_nb.kernel.errors import SagaDefinitionError
from aegis_nb.notebook.injection import Fault, inject
from aegis_nb.notebook.options import did_you_mean
from aegis_nb.saga.definition import SagaEntry, normalize_saga, step_name
from aegis_nb.saga.parallel import CompensationOrder, ParallelGroup, StepGroup, parallel

PlanEntry: TypeAlias = SagaEntry | ParallelGroup
"""An entry of the saga list a plan runs: a step, ``(step, args, kwargs)``, or a parallel group."""


@dataclass(frozen=True)
class PlannedStep:
    """One step of a saga: the name it was written as, the step, its arguments, and its group.

    `group` places a member of a parallel group as the engine does (`StepSpec.group`): the group's
    first position, its size and its compensation order; None for a step of its own.
    """

    name: str
    step: Any
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    group: StepGroup | None = None


@dataclass(frozen=True)
class SagaPlan:
    """The saga a magic will run: its steps in position order, a group's members consecutive."""

    steps: tuple[PlannedStep, ...]

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """The positions of each parallel group's members, group by group."""
        return tuple(
            tuple(range(planned.group.start, planned.group.start + planned.group.size))
            for index, planned in enumerate(self.steps)
            if planned.group is not None and planned.group.start == index
        )

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

    def entries(self, faults: Mapping[str, Fault] | None = None) -> list[PlanEntry]:
        """The engine's saga list for one run, with `faults` (keyed by label) wrapped around their steps.

        A group's members become one `parallel` entry, in their order, with the group's compensation.
        """
        faults = faults or {}
        labels = self.labels if faults else ()
        planned_entries: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
        for index, planned in enumerate(self.steps):
            fault = faults.get(labels[index], Fault()) if faults else Fault()
            planned_entries.append((inject(planned.step, fault), planned.args, dict(planned.kwargs)))
        entries: list[PlanEntry] = []
        index = 0
        while index < len(self.steps):
            group = self.steps[index].group
            if group is None:
                entries.append(planned_entries[index])
                index += 1
            else:
                members = planned_entries[index : index + group.size]
                entries.append(parallel(*members, compensation=group.compensation))
                index += group.size
        return entries


def plan_of(saga: Sequence[PlanEntry]) -> SagaPlan:
    """The plan of a saga list as `WorkflowEngine.execute_saga` takes it, its groups kept.

    Each position is named by its label; a bad list is the engine's `SagaDefinitionError`.
    """
    specs = normalize_saga(list(saga))
    return SagaPlan(
        tuple(PlannedStep(spec.name, spec.step, spec.args, spec.kwargs, spec.group) for spec in specs)
    )


def parse_plan(
    names: Sequence[str], body: str, steps: Mapping[str, Any], namespace: Mapping[str, Any]
) -> SagaPlan:
    """The saga from the line's step names followed by the cell body's lines (see the module docstring)."""
    planned = [PlannedStep(name, resolve_step(name, steps, namespace)) for name in names]
    for number, raw in enumerate(body.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        planned += _parse_line(number, line, len(planned), steps, namespace)
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
    number: int, line: str, start: int, steps: Mapping[str, Any], namespace: Mapping[str, Any]
) -> tuple[PlannedStep, ...]:
    """The step, or the members of the group, that line `number` (placed at position `start`) holds."""
    where = f"line {number} of the saga ({line!r})"
    if line.startswith("&") or line.endswith("&"):
        raise UsageError(
            f"{where}: & joins steps that run together and needs a step on each side, "
            "e.g. BookFlight & ReserveHotel"
        )
    try:
        node = ast.parse(line, mode="eval").body
    except SyntaxError as exc:
        raise UsageError(
            f"{where}: {exc.msg}; write STEP or STEP(arg, key=value), "
            "or STEP & STEP for steps that run together"
        ) from None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        operands = _group_operands(node, where)
        members = tuple(_parse_step(operand, number, where, steps, namespace) for operand in operands)
        for operand, member in zip(operands, members, strict=True):
            if isinstance(member.step, ParallelGroup):
                raise UsageError(
                    f"{where}: {ast.unparse(operand)} is a parallel group, and groups do not nest: "
                    "list its members in this group instead"
                )
        return _grouped(members, start, CompensationOrder.CONCURRENT, where)
    planned = _parse_step(node, number, where, steps, namespace)
    if isinstance(planned.step, ParallelGroup):
        return _grouped(_members(planned.step), start, planned.step.compensation, where)
    return (planned,)


def _group_operands(node: ast.BinOp, where: str) -> list[ast.expr]:
    """The operands of ``A & B & C``, left to right; a parenthesised group among them is refused.

    ``A & B & C`` parses as ``(A & B) & C``; a written ``(A & B)`` starts after its parenthesis,
    so a nested `&` that starts where the whole does is the chain, any other is a group in a group.
    """
    operands: list[ast.expr] = []
    current: ast.expr = node
    while (
        isinstance(current, ast.BinOp)
        and isinstance(current.op, ast.BitAnd)
        and current.col_offset == node.col_offset
    ):
        operands.append(current.right)
        current = current.left
    operands.append(current)
    operands.reverse()
    for operand in operands:
        if isinstance(operand, ast.BinOp) and isinstance(operand.op, ast.BitAnd):
            raise UsageError(
                f"{where}: a group inside a group ({ast.unparse(operand)}); groups do not nest: write "
                "every member in one group, A & B & C"
            )
    return operands


def _members(group: ParallelGroup) -> tuple[PlannedStep, ...]:
    """A `parallel(...)` value's members as planned steps, named as the engine names them."""
    members = []
    for member in group.members:
        step, args, kwargs = member if isinstance(member, tuple) else (member, (), {})
        members.append(PlannedStep(step_name(step), step, tuple(args), dict(kwargs)))
    return tuple(members)


def _grouped(
    members: tuple[PlannedStep, ...], start: int, order: CompensationOrder, where: str
) -> tuple[PlannedStep, ...]:
    """`members` placed in one group from position `start`, checked as `parallel` checks a group."""
    try:
        parallel(*((m.step, m.args, dict(m.kwargs)) for m in members), compensation=order)
    except SagaDefinitionError as exc:
        raise UsageError(f"{where}: {exc}") from None
    group = StepGroup(start, len(members), order)
    return tuple(replace(member, group=group) for member in members)


def _parse_step(
    node: ast.expr, number: int, where: str, steps: Mapping[str, Any], namespace: Mapping[str, Any]
) -> PlannedStep:
    """``STEP`` or ``STEP(args)``: the step resolved, its arguments evaluated in the user's namespace.

    A name may also be bound to a parallel group (the caller decides what may hold one).
    """
    if isinstance(node, ast.Name):
        group = namespace.get(node.id)
        if node.id not in steps and isinstance(group, ParallelGroup):
            return PlannedStep(node.id, group)
        return PlannedStep(node.id, resolve_step(node.id, steps, namespace))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        if name not in steps and isinstance(namespace.get(name), ParallelGroup):
            raise UsageError(f"{where}: {name} is a parallel group, which takes no arguments")
        step = resolve_step(name, steps, namespace)
        call = ast.Expression(ast.Call(ast.Name("_aegis_args", ast.Load()), node.args, node.keywords))
        ast.fix_missing_locations(call)
        scope = dict(namespace)
        scope["_aegis_args"] = _collect
        try:
            args, kwargs = eval(compile(call, f"<saga line {number}>", "eval"), scope)
        except Exception as exc:
            raise UsageError(
                f"{where}: evaluating the arguments raised {type(exc).__name__}: {exc}"
            ) from None
        return PlannedStep(name, step, args, kwargs)
    raise UsageError(
        f"{where}: write STEP or STEP(arg, key=value), or STEP & STEP for steps that run together"
    )


def _collect(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs


def _looks_like_step(value: object) -> bool:
    return callable(getattr(value, "execute", None)) and callable(getattr(value, "compensate", None))
