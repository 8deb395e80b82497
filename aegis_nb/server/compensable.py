"""Compensable tools: an `AegisMCP` tool declared with its undo, which a saga handle makes a saga step.

``@app.tool(compensate=...)`` declares the undo, one of:

- a function ``async def undo(arguments, result, idempotency_key)``, given the call's arguments (those
  marked secret as ``Secret("***")``: secrets are used once, by the call, and never kept or journaled),
  its structured result (None when the call failed in doubt) and the step's idempotency key;
- `UndoTool` (or a bare tool name): another tool of the server, called with arguments bound from the
  call by JSON Pointers over ``{arguments, result}`` (`aegis_nb.server.bindings`), plus the key.

A binding that does not resolve leaves the step *orphaned*: the undo is never called with a missing
value; the compensation raises `UndoNotBound`, so the rollback reports the step left standing and the
saga's status says ``orphaned``. A call carrying a saga handle (the ``saga`` argument the tool's
schema gains, or ``_meta["aegis-nb/saga"]``) is the saga's next step (`CompensableCall`); without one
it runs as a plain tool.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from secrets import token_hex
from types import MappingProxyType
from typing import Any, Final, TypeAlias

import anyio
from mcp.types import CallToolResult
from pydantic_core import to_jsonable_python

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError, ToolError
from aegis_nb.kernel.executor import ToolExecutor
from aegis_nb.kernel.scrubbing import exception_text, scrub
from aegis_nb.kernel.undo import NOTHING_TO_UNDO, Undo
from aegis_nb.kernel.values import REDACTED, Secret, thaw
from aegis_nb.server.bindings import Binding, BindingError, bind
from aegis_nb.server.saga_handles import UndoNotBound
from aegis_nb.server.session import unwrap_result

SAGA_ARGUMENT: Final = "saga"
"""The argument a compensable tool's schema gains: the handle of the saga the call joins."""

SAGA_META_KEY: Final = "aegis-nb/saga"
"""``_meta`` key a host may set instead of the argument."""

STEP_META_KEY: Final = "aegis-nb/step"
"""``_meta`` key of a result inside a saga: the step's flat index and idempotency key."""

DEFAULT_KEY_ARGUMENT: Final = "idempotency_key"

HELD_SECRETS: Final = "_aegis_held_secrets"
"""The step argument that stands for a call's secret arguments: ``{"token": ..., "names": [...]}``.

Secrets are never journaled, so a call's secret values are held by its step until its execute takes
them (`CompensableCall.hold`); its compensation, live or after a crash, sees each as ``Secret("***")``.
"""

UndoFunction: TypeAlias = Callable[[Mapping[str, Any], Mapping[str, Any] | None, str], Awaitable[object]]
"""``async def undo(arguments, result, idempotency_key)``; may return `NOTHING_TO_UNDO`."""

ToolCall: TypeAlias = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""How an undo tool is called: the server's own ``call_tool`` (in process, through its runner)."""


@dataclass(frozen=True, slots=True)
class UndoTool:
    """Undo by calling the server's tool `tool` with `bindings` resolved from the call, plus the key."""

    tool: str
    bindings: Mapping[str, Binding]
    key_argument: str | None = DEFAULT_KEY_ARGUMENT

    @classmethod
    def of(
        cls,
        tool: str,
        bindings: Mapping[str, str] | None = None,
        *,
        key_argument: str | None = DEFAULT_KEY_ARGUMENT,
    ) -> UndoTool:
        """`bindings` maps each undo argument to a pointer (``"/result/booking_id"``) or an SEP-3172
        expression (``"$response.body#/booking_id"``); a bad one is a `SagaDefinitionError`."""
        if not isinstance(tool, str) or not tool:
            raise SagaDefinitionError(f"an undo tool is named by a non-empty str, got {tool!r}")
        parsed: dict[str, Binding] = {}
        for name, text in (bindings or {}).items():
            try:
                parsed[name] = Binding.parse(text)
            except BindingError as exc:
                raise SagaDefinitionError(f"undo {tool!r}, argument {name!r}: {exc}") from None
        return cls(tool, MappingProxyType(parsed), key_argument)


Compensation: TypeAlias = UndoFunction | UndoTool | str


def undo_of(compensation: Compensation) -> UndoFunction | UndoTool:
    """The declared undo, checked: a coroutine function, an `UndoTool`, or a tool name."""
    if isinstance(compensation, UndoTool):
        return compensation
    if isinstance(compensation, str):
        return UndoTool.of(compensation)
    if inspect.iscoroutinefunction(compensation):
        return compensation
    raise SagaDefinitionError(
        "compensate= takes an `async def undo(arguments, result, idempotency_key)`, an UndoTool or a "
        f"tool name, got {type(compensation).__name__}"
    )


class CompensableCall:
    """The saga step of one compensable tool: execute calls the tool, compensate its undo.

    One object per tool; a call's arguments are the step's keyword arguments. The result is kept in
    the step's own context (``ctx.metadata[result_key(index)]``), which its compensation receives.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        undo: UndoFunction | UndoTool,
        call_tool: ToolCall,
        *,
        key_argument: str | None,
        timeout: float | None,
        in_doubt: bool = False,
    ) -> None:
        self.name = name
        self.fn = fn
        self.undo = undo
        self.call_tool = call_tool
        self.key_argument = key_argument
        self.timeout = timeout
        self.in_doubt = in_doubt
        self._executor = ToolExecutor()
        self._held: dict[str, dict[str, Any]] = {}

    def hold(self, secrets: Mapping[str, Any]) -> dict[str, Any]:
        """Keep a call's secret values for its execute; the step argument that stands for them."""
        token = token_hex(16)
        self._held[token] = dict(secrets)
        return {HELD_SECRETS: {"token": token, "names": sorted(secrets)}}

    def release(self, held: Mapping[str, Any]) -> None:
        """Forget secrets `hold` kept that no execute took (the step never ran)."""
        stand_in = held.get(HELD_SECRETS)
        if isinstance(stand_in, Mapping):
            self._held.pop(stand_in.get("token", ""), None)

    def result_key(self, index: int | None) -> str:
        return f"{self.name}#{index}"

    async def execute(self, ctx: AegisContext, /, **arguments: Any) -> AegisContext:
        stand_in = arguments.pop(HELD_SECRETS, None)
        sent = {name: _revealed(value) for name, value in arguments.items()}
        held: dict[str, Any] = {}
        if isinstance(stand_in, Mapping):
            held = self._held.pop(stand_in["token"], {})
            sent.update(held)
        if self.key_argument is not None and ctx.idempotency_key is not None:
            sent[self.key_argument] = ctx.idempotency_key
        limit = ctx
        if self.timeout is not None:  # the tool's own timeout, inside the saga's deadline
            limit = AegisContext(deadline=min(ctx.deadline, anyio.current_time() + self.timeout))
        try:
            result = await self._executor.run_named(self.name, limit, self.fn, **sent)
        except Exception as exc:
            raise _without_secrets(exc, self.name, [v for v in held.values() if isinstance(v, str)]) from None
        return ctx.with_metadata({self.result_key(ctx.step_index): structured(result)})

    async def compensate(self, ctx: AegisContext, /, **arguments: Any) -> Undo | None:
        stand_in = arguments.pop(HELD_SECRETS, None)
        if isinstance(stand_in, Mapping):
            self._held.pop(stand_in["token"], None)
            arguments.update({name: Secret(REDACTED) for name in stand_in["names"]})
        found = ctx.metadata.get(self.result_key(ctx.step_index))
        result: dict[str, Any] | None = None if found is None else thaw(found, reveal=True)
        key = ctx.idempotency_key or ""
        if not isinstance(self.undo, UndoTool):
            done = await self.undo(MappingProxyType(dict(arguments)), result, key)
            return NOTHING_TO_UNDO if done is NOTHING_TO_UNDO else None
        plain = {name: _revealed(value) for name, value in arguments.items()}
        bound, missing = bind(self.undo.bindings, plain, result)
        if missing:
            pointers = ", ".join(f"{name} ({self.undo.bindings[name].text})" for name in missing)
            raise UndoNotBound(f"orphaned: undo {self.undo.tool!r} not called, unresolved: {pointers}")
        if self.undo.key_argument is not None:
            bound[self.undo.key_argument] = key
        answer = await self.call_tool(self.undo.tool, bound)
        undone = unwrap_result(self.undo.tool, answer) if isinstance(answer, CallToolResult) else answer
        if isinstance(undone, Mapping) and undone.get("changed") is False:
            return NOTHING_TO_UNDO
        return None

    def __repr__(self) -> str:
        undo = self.undo.tool if isinstance(self.undo, UndoTool) else getattr(self.undo, "__name__", "undo")
        return f"<CompensableCall {self.name} / {undo}>"


def structured(result: Any) -> dict[str, Any]:
    """A tool's return value as MCP structured content: an object, a non-object under ``result``."""
    plain = to_jsonable_python(result)
    return plain if isinstance(plain, dict) else {"result": plain}


def _without_secrets(exc: Exception, tool: str, values: list[str]) -> Exception:
    """`exc` itself, or when its words hold a secret value, the same failure in words that do not.

    The engine scrubs the secrets it knows (in the context and the step's arguments); these never
    were in either, so the step scrubs them before the failure reaches events, reports or logs.
    """
    text = exception_text(exc)
    if not values or scrub(text, values) == text:
        return exc
    if isinstance(exc, ToolError):
        return ToolError(exc.tool, scrub(exc.message, values), exc.structured, refused=exc.refused)
    # Another exception may have acted first: said as a ToolError that does not claim a refusal.
    return ToolError(tool, f"{type(exc).__name__}: {scrub(text, values)}", refused=False)


def _revealed(value: Any) -> Any:
    return value.reveal() if isinstance(value, Secret) else value
