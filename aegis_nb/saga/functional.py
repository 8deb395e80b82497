"""Steps from plain ``async def`` functions, for notebooks::

@step(name="BookFlight", timeout=5)
async def book_flight(ctx, destination):
    return ctx.with_metadata({"flight_id": "F1"})

@book_flight.compensation
async def cancel_flight(ctx, destination):
    ...
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, overload

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError
from aegis_nb.saga.retry import RetryPolicy

ExecuteFn = Callable[..., Awaitable[AegisContext | None]]
CompensateFn = Callable[..., Awaitable[object]]


class FunctionStep:
    """A step made of an execute function and a compensation attached with `.compensation`."""

    def __init__(
        self,
        execute: ExecuteFn,
        *,
        name: str | None = None,
        timeout: float | None = None,
        compensation_retry: RetryPolicy | None = None,
        in_doubt: bool = False,
        read_only: bool = False,
    ) -> None:
        _require_async(execute, "execute")
        self._execute = execute
        self._compensate: CompensateFn | None = None
        function = _unwrapped(execute)
        self.name = name or _name_of(function, execute)
        self.timeout = timeout
        self.compensation_retry = compensation_retry
        self.in_doubt = in_doubt
        self.read_only = read_only
        self.__doc__ = function.__doc__

    def compensation(self, fn: CompensateFn) -> CompensateFn:
        """Decorator: attach the function that undoes this step (returned unchanged)."""
        _require_async(fn, f"compensation of {self.name}")
        if self.read_only:
            raise SagaDefinitionError(f"step {self.name!r} is read_only and cannot have a compensation")
        self._compensate = fn
        return fn

    async def execute(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> AegisContext | None:
        return await self._execute(ctx, *args, **kwargs)

    async def compensate(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> object:
        if self._compensate is None:
            if self.read_only:
                return None
            raise SagaDefinitionError(
                f"step {self.name!r} has no compensation: attach one with @{self.name}.compensation, "
                "or declare it @step(read_only=True) if it changes nothing"
            )
        return await self._compensate(ctx, *args, **kwargs)

    def forwards_to(self, method: str) -> Callable[..., object] | None:
        """The function `method` passes its arguments to, so a saga can check them before it runs."""
        return self._execute if method == "execute" else self._compensate

    @property
    def is_complete(self) -> bool:
        """True when the step can be undone (or has nothing to undo)."""
        return self.read_only or self._compensate is not None

    def __repr__(self) -> str:
        return f"<step {self.name}>"


@overload
def step(
    fn: ExecuteFn,
    *,
    name: str | None = None,
    timeout: float | None = None,
    compensation_retry: RetryPolicy | None = None,
    in_doubt: bool = False,
    read_only: bool = False,
) -> FunctionStep: ...


@overload
def step(
    fn: None = None,
    *,
    name: str | None = None,
    timeout: float | None = None,
    compensation_retry: RetryPolicy | None = None,
    in_doubt: bool = False,
    read_only: bool = False,
) -> Callable[[ExecuteFn], FunctionStep]: ...


def step(
    fn: ExecuteFn | None = None,
    *,
    name: str | None = None,
    timeout: float | None = None,
    compensation_retry: RetryPolicy | None = None,
    in_doubt: bool = False,
    read_only: bool = False,
) -> FunctionStep | Callable[[ExecuteFn], FunctionStep]:
    """Decorator turning ``async def execute(ctx, ...)`` into a `FunctionStep` (with or without options)."""

    def wrap(execute: ExecuteFn) -> FunctionStep:
        return FunctionStep(
            execute,
            name=name,
            timeout=timeout,
            compensation_retry=compensation_retry,
            in_doubt=in_doubt,
            read_only=read_only,
        )

    return wrap(fn) if fn is not None else wrap


def _require_async(fn: object, what: str) -> None:
    if not inspect.iscoroutinefunction(fn):
        raise SagaDefinitionError(f"{what} must be an `async def` function, got {fn!r}")


def _unwrapped(fn: object) -> object:
    """The function a `functools.partial` wraps (partials have neither a name nor its docstring)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _name_of(function: object, execute: object) -> str:
    """`function`'s name, for the step made of `execute`; refused when there is none to use."""
    name = getattr(function, "__name__", None)
    if not isinstance(name, str) or not name:
        raise SagaDefinitionError(
            f"cannot tell the name of step {execute!r}: give it one with @step(name=...)"
        )
    return name
