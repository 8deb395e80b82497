"""`UpstreamStep`: the saga step of one compensable upstream tool, undone by the tool the policy names.

One step object per compensable tool, for the gateway's life; each call is a step of it whose saga
keyword arguments are the call's arguments, so a journal can keep them (they are JSON, as MCP
arguments are) and rebuild the step by its registered name after a crash.

Execute forwards the call (with the step's idempotency key, when the policy names the argument that
takes it) and keeps the structured result in the metadata under ``<tool>#<index>``. Compensate
binds the undo's arguments from ``{arguments, result}`` with the policy's JSON Pointers; when one
does not resolve (a result that lacks the field, or none at all because the call failed in doubt),
the undo is never called: `UndoNotBound` is raised instead, and the saga reports the step orphaned.

An argument the policy marks secret never becomes a saga argument: the gateway puts a placeholder
(``{"aegis-nb/secret": <token>}``) in its place and the value in this step's own table, which only
the call to the upstream reads (once). So no event, journal row, status or log holds it; an undo
bound to it does not resolve, and is not called.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final

from mcp.types import CallToolResult

from aegis_nb.gateway.policy import ToolPolicy
from aegis_nb.gateway.upstream import Upstreams
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolError
from aegis_nb.kernel.executor import ToolExecutor
from aegis_nb.kernel.undo import NOTHING_TO_UNDO, Undo
from aegis_nb.kernel.values import thaw
from aegis_nb.server.bindings import bind
from aegis_nb.server.saga_handles import UndoNotBound
from aegis_nb.server.session import unwrap_result

SECRET_PLACEHOLDER: Final = "aegis-nb/secret"
"""Key of the placeholder that stands for a secret argument in a step's saga arguments."""

_EXECUTOR = ToolExecutor()


class UpstreamStep:
    """Execute: the upstream tool; compensate: its undo with the bound arguments (see the module)."""

    in_doubt = True
    """An upstream error not marked refused may come after the tool acted: undo it anyway."""

    def __init__(self, upstreams: Callable[[], Upstreams], policy: ToolPolicy) -> None:
        """`upstreams` gives the gateway's open sessions when a call runs (recovery included)."""
        self.name = policy.name
        self.policy = policy
        self._upstreams = upstreams
        # Per call, set by the gateway and taken once: the secret values behind the placeholders,
        # and the upstream's own answer to a call that succeeded (by idempotency key).
        self._secrets: dict[str, str] = {}
        self._answers: dict[str, CallToolResult] = {}

    def saga_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments as the saga (and its journal) holds them: each secret a placeholder."""
        held = dict(arguments)
        for name in self.policy.secret:
            value = held.get(name)
            if isinstance(value, str):
                token = secrets.token_urlsafe(16)
                self._secrets[token] = value
                held[name] = {SECRET_PLACEHOLDER: token}
        return held

    def forget(self, arguments: Mapping[str, Any]) -> None:
        """Drop the secrets of a call that never ran (its saga refused it)."""
        for value in arguments.values():
            if isinstance(value, Mapping) and set(value) == {SECRET_PLACEHOLDER}:
                self._secrets.pop(str(value[SECRET_PLACEHOLDER]), None)

    def take_answer(self, ctx: AegisContext) -> CallToolResult | None:
        """The upstream's answer to the call this step ran in `ctx`'s place, once."""
        key = ctx.idempotency_key
        return None if key is None else self._answers.pop(key, None)

    def _key(self, ctx: AegisContext, arguments: dict[str, Any]) -> dict[str, Any]:
        key = ctx.idempotency_key
        if self.policy.idempotency_arg is not None and key is not None:
            arguments.setdefault(self.policy.idempotency_arg, key)
        return arguments

    def result_key(self, ctx: AegisContext) -> str:
        """Where this step's result is kept: its own key, as two calls of one tool are two steps."""
        return f"{self.name}#{ctx.step_index}"

    async def execute(self, ctx: AegisContext, /, **arguments: Any) -> AegisContext:
        sent = dict(arguments)
        for name, value in arguments.items():
            if isinstance(value, Mapping) and set(value) == {SECRET_PLACEHOLDER}:
                secret = self._secrets.pop(str(value[SECRET_PLACEHOLDER]), None)
                if secret is None:  # a replayed step: its secret was never kept
                    raise ToolError(self.name, f"{self.name} was not called: the secret {name} is gone")
                sent[name] = secret
        answer = await self._upstreams().call(self.name, self._key(ctx, sent))
        result = unwrap_result(self.name, answer)  # raises the upstream's error as a ToolError
        if ctx.idempotency_key is not None:
            self._answers[ctx.idempotency_key] = answer
        return ctx.with_metadata({self.result_key(ctx): result})

    async def compensate(self, ctx: AegisContext, /, **arguments: Any) -> Undo | None:
        undo = self.policy.undo
        assert undo is not None  # only a compensable tool becomes a step
        result = ctx.metadata.get(self.result_key(ctx))
        # A secret's placeholder is not its value: a pointer to it resolves to nothing.
        plain = {
            name: value
            for name, value in arguments.items()
            if not (isinstance(value, Mapping) and set(value) == {SECRET_PLACEHOLDER})
        }
        bound, missing = bind(self.policy.bindings, self._key(ctx, plain), result)
        if missing:
            pointers = ", ".join(f"{name} ({self.policy.bindings[name].text})" for name in missing)
            raise UndoNotBound(f"{undo} was not called: {pointers} did not resolve from the call")
        # Values bound from the result come frozen from the metadata: sent as plain JSON.
        call = self._upstreams().call
        answer = await _EXECUTOR.run_named(f"{self.name}.compensate", ctx, call, undo, thaw(bound))
        undone = unwrap_result(undo, answer)
        if undone.get("changed") is False:  # the undo's own word that nothing was there to undo
            return NOTHING_TO_UNDO
        return None

    def __repr__(self) -> str:
        return f"<UpstreamStep {self.name} / {self.policy.undo}>"
