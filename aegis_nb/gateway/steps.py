"""`UpstreamStep`: the saga step of one compensable upstream tool, undone by the tool the policy names.

One step object per compensable tool, for the gateway's life; each call is a step of it whose saga
keyword arguments are the call's arguments, so a journal can keep them (they are JSON, as MCP
arguments are) and rebuild the step by its registered name after a crash.

Execute forwards the call and keeps the structured result in the metadata under ``<tool>#<index>``.
When the policy names the argument that takes an idempotency key, the key sent is always the step's
own (``ctx.idempotency_key``, ``run_id/index``): a key the client sent is dropped, so no client can
make its step share an effect with another run's, and have its rollback undo what that run kept.
Compensate binds the undo's arguments from ``{arguments, result}`` with the policy's JSON Pointers
(``/arguments/<idempotency_arg>`` is that same key); when one does not resolve (a result that lacks
the field, or none at all because the call failed in doubt), the undo is never called: `UndoNotBound`
is raised instead, and the saga reports the step orphaned.

Each call is made through `UpstreamStep.calling`, which holds what the call alone may see, for as
long as its caller waits: the values of its secret arguments and the upstream's answer. The saga
arguments carry only a token for it (``CALL_ARGUMENT``) and a placeholder for each secret
(``{"aegis-nb/secret": <token>}``), so no event, journal row, status or log holds a secret, and an
answer whose caller left (cancelled, disconnected) is dropped with the call instead of kept.

What an upstream says back may quote a secret (an error naming the card, a result echoing it): every
error, stored result and answer is scrubbed of the call's secrets and of those the saga held before
(`aegis_nb.kernel.scrubbing`). The call's own are then kept in the step's context as `Secret` values,
so the engine scrubs them from every later failure of the saga too.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, TypeGuard

from mcp.types import CallToolResult

from aegis_nb.gateway.policy import ToolPolicy
from aegis_nb.gateway.upstream import UpstreamLost, Upstreams
from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import ToolError
from aegis_nb.kernel.executor import ToolExecutor
from aegis_nb.kernel.scrubbing import exception_text, scrub, scrub_json, scrubbed_error
from aegis_nb.kernel.undo import NOTHING_TO_UNDO, Undo
from aegis_nb.kernel.values import Secret, thaw
from aegis_nb.server.bindings import bind
from aegis_nb.server.saga_handles import UndoNotBound
from aegis_nb.server.session import unwrap_result

SECRET_PLACEHOLDER: Final = "aegis-nb/secret"
"""Key of the placeholder that stands for a secret argument in a step's saga arguments."""

CALL_ARGUMENT: Final = "aegis-nb/call"
"""The saga argument naming the waiting call a step runs for; never sent to the upstream."""

_EXECUTOR = ToolExecutor()


class PendingCall:
    """One caller's call, while it waits: its saga arguments, its secrets, then the upstream's answer."""

    __slots__ = ("answer", "arguments", "secrets")

    def __init__(self, arguments: dict[str, Any], secrets: dict[str, str]) -> None:
        self.arguments = arguments
        self.secrets = secrets
        self.answer: CallToolResult | None = None


class UpstreamStep:
    """Execute: the upstream tool; compensate: its undo with the bound arguments (see the module)."""

    in_doubt = True
    """An upstream error not marked refused may come after the tool acted: undo it anyway."""

    def __init__(self, upstreams: Callable[[], Upstreams], policy: ToolPolicy) -> None:
        """`upstreams` gives the gateway's open sessions when a call runs (recovery included)."""
        self.name = policy.name
        self.policy = policy
        self._upstreams = upstreams
        self._waiting: dict[str, PendingCall] = {}  # by the token in CALL_ARGUMENT

    @contextmanager
    def calling(self, arguments: Mapping[str, Any]) -> Iterator[PendingCall]:
        """A call of this tool for as long as its caller waits: run `call.arguments` as the saga's
        step, then read `call.answer` (None unless the step ran to an answer in this block)."""
        held = {name: value for name, value in arguments.items() if name != self.policy.idempotency_arg}
        hidden: dict[str, str] = {}
        for name in self.policy.secret:
            value = held.get(name)
            if isinstance(value, str):
                token = secrets.token_urlsafe(16)
                hidden[token] = value
                held[name] = {SECRET_PLACEHOLDER: token}
        token = secrets.token_urlsafe(16)
        held[CALL_ARGUMENT] = token
        call = PendingCall(held, hidden)
        self._waiting[token] = call
        try:
            yield call
        finally:
            del self._waiting[token]

    def result_key(self, ctx: AegisContext) -> str:
        """Where this step's result is kept: its own key, as two calls of one tool are two steps."""
        return f"{self.name}#{ctx.step_index}"

    def secrets_key(self, ctx: AegisContext) -> str:
        """Where this step's secrets are kept, as `Secret` values, for the engine to scrub."""
        return f"{self.result_key(ctx)}/secrets"

    async def execute(self, ctx: AegisContext, /, **arguments: Any) -> AegisContext:
        # Taken, not looked up again: once its caller has left, nothing else reaches the call.
        call = self._waiting.get(str(arguments.pop(CALL_ARGUMENT, "")))
        hidden = {} if call is None else call.secrets
        sent = dict(arguments)
        own: list[str] = []
        for name in self.policy.secret:
            value = arguments.get(name)
            if _is_placeholder(value):
                secret = hidden.pop(str(value[SECRET_PLACEHOLDER]), None)
                if secret is None:  # replayed, or its caller left before it started: never kept
                    raise ToolError(self.name, f"{self.name} was not called: the secret {name} is gone")
                sent[name] = secret
                own.append(secret)
        if self.policy.idempotency_arg is not None and ctx.idempotency_key is not None:
            sent[self.policy.idempotency_arg] = ctx.idempotency_key
        held = [*own, *ctx.secret_values()]
        failure: Exception | None = None
        try:
            answer = await self._upstreams().call(self.name, sent)
            result = unwrap_result(self.name, answer)  # raises the upstream's error as a ToolError
        except Exception as exc:
            failure = _scrubbed(exc, self.name, held)
            if failure is exc:
                raise
        if failure is not None:  # raised outside the handler: the original is not its context
            raise failure
        if held:
            result = scrub_json(result, held)
            answer = _scrubbed_answer(answer, held)
        if call is not None:
            call.answer = answer
        stored: dict[str, Any] = {self.result_key(ctx): result}
        if own:
            stored[self.secrets_key(ctx)] = [Secret(secret) for secret in own]
        return ctx.with_metadata(stored)

    async def compensate(self, ctx: AegisContext, /, **arguments: Any) -> Undo | None:
        undo = self.policy.undo
        assert undo is not None  # only a compensable tool becomes a step
        result = ctx.metadata.get(self.result_key(ctx))
        # A secret's placeholder is not its value: a pointer to it resolves to nothing.
        plain = {
            name: value
            for name, value in arguments.items()
            if name != CALL_ARGUMENT and not _is_placeholder(value)
        }
        if self.policy.idempotency_arg is not None and ctx.idempotency_key is not None:
            plain[self.policy.idempotency_arg] = ctx.idempotency_key  # what execute sent
        bound, missing = bind(self.policy.bindings, plain, result)
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


def _is_placeholder(value: object) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping) and set(value) == {SECRET_PLACEHOLDER}


def _scrubbed(exc: Exception, tool: str, held: list[str]) -> Exception:
    """`exc`, or the same failure in words without the secrets `held` (an upstream may quote them)."""
    if isinstance(exc, UpstreamLost):
        text = exception_text(exc)
        return exc if scrub(text, held) == text else UpstreamLost(scrub(text, held))
    return scrubbed_error(exc, tool, held)


def _scrubbed_answer(answer: CallToolResult, held: list[str]) -> CallToolResult:
    """The upstream's answer without the secrets `held`; the answer itself when it holds none."""
    data = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
    clean = scrub_json(data, held)
    return answer if clean == data else CallToolResult.model_validate(clean)
