"""`ToolPairStep`: a saga step made of two MCP tools, one that acts and one that undoes it.

Execute calls `execute_tool` with arguments built from the context and the step's saga arguments
(by default the saga kwargs as they are), sets the context's idempotency key (over any key they
carry), and stores the tool's structured result in the metadata under `result_key`, which must not
hold a result already (steps that call the same tool need result keys of their own). Compensate
calls `compensate_tool` with arguments built from the context *its own execute produced* and that
stored result (``None`` when the step is compensated in doubt, because its execute never returned);
by default just the same idempotency key, so an undo tool can find an effect it was never told
about. Works on any `ToolCaller`: the mock agency or a real server, in-process, over stdio or HTTP.

A tool served by the Python SDK should type its key parameter ``str`` (``""`` for none), as the
mock agency does: the SDK tries to parse every string sent for a parameter typed otherwise
(``str | None``) as JSON, and a key fails that parse with an exception on every call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aegis_nb.kernel.context import AegisContext
from aegis_nb.kernel.errors import SagaDefinitionError, ToolError
from aegis_nb.kernel.executor import ToolExecutor
from aegis_nb.kernel.undo import NOTHING_TO_UNDO, Undo
from aegis_nb.saga.retry import RetryPolicy
from aegis_nb.server.session import ToolCaller

ArgumentsFn = Callable[..., Mapping[str, Any]]
"""``(ctx, *args, **kwargs) -> tool arguments`` for the execute tool."""

UndoArgumentsFn = Callable[[AegisContext, Mapping[str, Any] | None], Mapping[str, Any]]
"""``(ctx, result) -> tool arguments`` for the undo tool; `result` is None when compensating in doubt."""

_EXECUTOR = ToolExecutor()


class ToolPairStep:
    """Execute with one MCP tool, compensate with its undo tool, on one session."""

    def __init__(
        self,
        session: ToolCaller,
        execute_tool: str,
        compensate_tool: str,
        *,
        name: str | None = None,
        arguments: ArgumentsFn | None = None,
        undo_arguments: UndoArgumentsFn | None = None,
        result_key: str | None = None,
        idempotency_arg: str | None = "idempotency_key",
        timeout: float | None = None,
        compensation_retry: RetryPolicy | None = None,
        in_doubt: bool = False,
    ) -> None:
        """`idempotency_arg` names the tool argument that carries ``ctx.idempotency_key`` (None: not sent).

        `in_doubt` asks the engine to compensate this step even when its own execute failed or timed
        out, for tools whose effect may have happened anyway.
        """
        for what, tool in (("execute_tool", execute_tool), ("compensate_tool", compensate_tool)):
            if not isinstance(tool, str) or not tool:
                raise SagaDefinitionError(f"ToolPairStep: {what} must be a tool name, got {tool!r}")
        self.session = session
        self.execute_tool = execute_tool
        self.compensate_tool = compensate_tool
        self.name = name or execute_tool
        self.arguments = arguments
        self.undo_arguments = undo_arguments
        self.result_key = result_key or execute_tool
        self.idempotency_arg = idempotency_arg
        self.timeout = timeout
        self.compensation_retry = compensation_retry
        self.in_doubt = in_doubt

    async def execute(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> AegisContext:
        if self.arguments is not None:
            built = self.arguments(ctx, *args, **kwargs)
            if not isinstance(built, Mapping):
                # Refused as a ToolError, like a taken result key: the tool was not called.
                raise ToolError(
                    self.execute_tool,
                    f"step {self.name!r} did not call {self.execute_tool!r}: its arguments function "
                    f"returned {type(built).__name__}, not a mapping of tool arguments",
                )
            tool_args = dict(built)
        elif args:
            raise SagaDefinitionError(
                f"step {self.name!r}: positional saga args need an `arguments` function to name them"
            )
        else:
            tool_args = kwargs  # a fresh dict of this call's own
        if self.result_key in ctx.metadata:
            # Storing over it would lose the earlier result, and a compensation in doubt (which
            # gets this step's input) would take that result for its own and undo the wrong
            # effect. Refusing as a ToolError tells the engine nothing was done.
            raise ToolError(
                self.execute_tool,
                f"step {self.name!r} did not call {self.execute_tool!r}: metadata key "
                f"{self.result_key!r} already holds an earlier result; give this step its own result_key",
            )
        self._add_key(ctx, tool_args)
        # No scope of our own: the engine already holds the forward deadline for the whole saga.
        result = await self.session.call_tool(self.execute_tool, tool_args)
        return ctx.with_metadata({self.result_key: result})

    async def compensate(self, ctx: AegisContext, /, *args: Any, **kwargs: Any) -> Undo | None:
        """Call the undo tool; `NOTHING_TO_UNDO` when its structured result says ``"changed": false``
        (an in-doubt step whose tool never acted, say), so the run says so rather than "undone"."""
        result = ctx.metadata.get(self.result_key)
        if self.undo_arguments is not None:
            built = self.undo_arguments(ctx, result)
            if not isinstance(built, Mapping):
                raise TypeError(
                    f"step {self.name!r}: its undo_arguments function returned "
                    f"{type(built).__name__}, not a mapping of tool arguments"
                )
            tool_args = dict(built)
        else:
            tool_args = {}
            self._add_key(ctx, tool_args)
        # A compensation gets an exact budget in its context; the engine's backstop is looser.
        undone = await _EXECUTOR.run_named(
            f"{self.name}.compensate", ctx, self.session.call_tool, self.compensate_tool, tool_args
        )
        # Only an explicit false: a tool that says nothing about it is taken at its word, undone.
        if isinstance(undone, Mapping) and undone.get("changed") is False:
            return NOTHING_TO_UNDO
        return None

    def _add_key(self, ctx: AegisContext, tool_args: dict[str, Any]) -> None:
        # Always the step's own, over any key the arguments carry: a key chosen by whoever chose the
        # saga's kwargs could name another run's effect, which this step's undo would then cancel.
        if self.idempotency_arg is not None:
            key = ctx.idempotency_key
            if key is not None:
                tool_args[self.idempotency_arg] = key

    def __repr__(self) -> str:
        return f"<ToolPairStep {self.name}: {self.execute_tool} / {self.compensate_tool}>"
