"""`UpstreamStep`: one upstream call of an agent saga, undone by the tool the policy names.

Execute forwards the call (with the step's idempotency key, when the policy names the argument that
takes it) and keeps the structured result in the metadata under ``<tool>#<index>``. Compensate
binds the undo's arguments from ``{arguments, result}`` with the policy's JSON Pointers; when one
does not resolve (a result that lacks the field, or none at all because the call failed in doubt),
the undo is never called: `UndoNotBound` is raised instead, and the saga reports the step orphaned.

Arguments the policy marks secret are held as `Secret`s: they are revealed only into the call to
the upstream, so no event, journal row, status or log sees them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.types import CallToolResult

from aegis_nb.gateway.binding import bind
from aegis_nb.gateway.policy import ToolPolicy
from aegis_nb.gateway.upstream import Upstreams
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.executor import ToolExecutor
from aegis_nb.kernel.undo import NOTHING_TO_UNDO, Undo
from aegis_nb.kernel.values import Secret, thaw
from aegis_nb.server.saga_handles import UndoNotBound
from aegis_nb.server.session import unwrap_result

_EXECUTOR = ToolExecutor()


class UpstreamStep:
    """Execute: the upstream tool; compensate: its undo with the bound arguments (see the module)."""

    in_doubt = True
    """An upstream error not marked refused may come after the tool acted: undo it anyway."""

    def __init__(self, upstreams: Upstreams, policy: ToolPolicy, arguments: Mapping[str, Any]) -> None:
        self.name = policy.name
        self.policy = policy
        self._upstreams = upstreams
        self.answer: CallToolResult | None = None
        """The upstream's own answer to the call, once it succeeded (the gateway passes it on)."""
        self._arguments = {
            name: Secret(value) if name in policy.secret and isinstance(value, str) else value
            for name, value in arguments.items()
        }

    def _sent(self, ctx: AegisContext) -> dict[str, Any]:
        """The call's arguments as the upstream gets them: secrets revealed, the key added."""
        sent = {name: v.reveal() if isinstance(v, Secret) else v for name, v in self._arguments.items()}
        key = ctx.idempotency_key
        if self.policy.idempotency_arg is not None and key is not None:
            sent.setdefault(self.policy.idempotency_arg, key)
        return sent

    def result_key(self, ctx: AegisContext) -> str:
        """Where this step's result is kept: its own key, as two calls of one tool are two steps."""
        return f"{self.name}#{ctx.step_index}"

    async def execute(self, ctx: AegisContext, /) -> AegisContext:
        answer = await self._upstreams.call(self.name, self._sent(ctx))
        result = unwrap_result(self.name, answer)  # raises the upstream's error as a ToolError
        self.answer = answer
        return ctx.with_metadata({self.result_key(ctx): result})

    async def compensate(self, ctx: AegisContext, /) -> Undo | None:
        undo = self.policy.undo
        assert undo is not None  # only a compensable tool becomes a step
        result = ctx.metadata.get(self.result_key(ctx))
        bound, missing = bind(self.policy.bindings, self._sent(ctx), result)
        if missing:
            pointers = ", ".join(f"{name} ({self.policy.bindings[name].text})" for name in missing)
            raise UndoNotBound(f"{undo} was not called: {pointers} did not resolve from the call")
        # Values bound from the result come frozen from the metadata: sent as plain JSON.
        call = self._upstreams.call
        answer = await _EXECUTOR.run_named(f"{self.name}.compensate", ctx, call, undo, thaw(bound))
        undone = unwrap_result(undo, answer)
        if undone.get("changed") is False:  # the undo's own word that nothing was there to undo
            return NOTHING_TO_UNDO
        return None

    def __repr__(self) -> str:
        return f"<UpstreamStep {self.name} / {self.policy.undo}>"
