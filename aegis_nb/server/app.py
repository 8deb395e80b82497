"""`AegisMCP`: an `MCPServer` that also serves `@app.workflow` sagas as MCP tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer

from aegis_nb.kernel.context import AegisContext
from aegis_nb.saga.engine import WorkflowEngine

WorkflowFn = TypeVar("WorkflowFn", bound=Callable[..., Awaitable[Any]])


class AegisMCP(MCPServer[Any]):
    """An MCP server whose workflows run on `workflow_engine` and roll back on failure."""

    def __init__(self, name: str, *, engine: WorkflowEngine | None = None, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.workflow_engine = engine or WorkflowEngine()
        self.workflows: dict[str, Callable[..., Awaitable[Any]]] = {}

    def workflow(self, name: str | None = None) -> Callable[[WorkflowFn], WorkflowFn]:
        """Register ``async def fn(ctx, ...)`` as the saga workflow `name`; returns `fn` unchanged."""

        def decorator(fn: WorkflowFn) -> WorkflowFn:
            workflow_name = name or fn.__name__
            self.workflows[workflow_name] = fn

            async def run_workflow() -> dict[str, Any]:
                final = await fn(AegisContext())
                return final.to_json() if isinstance(final, AegisContext) else {}

            self.add_tool(run_workflow, name=workflow_name, description=fn.__doc__)
            return fn

        return decorator
