"""Server layer: `AegisMCP` (workflows and compensable tools as MCP tools, agent sagas by handle), tool
sessions and tool-pair steps, on the `mcp` SDK."""

from aegis_nb.kernel.extras import needs_extra

with needs_extra("mcp", "aegis_nb.server (AegisMCP, connect, ToolPairStep)"):
    from aegis_nb.server.app import AegisMCP, Transport, Workflow
    from aegis_nb.server.compensable import SAGA_ARGUMENT, SAGA_META_KEY, UndoTool
    from aegis_nb.server.deadline import TIMEOUT_META_KEY, InvalidRequestMeta
    from aegis_nb.server.http_security import UnsafeServing
    from aegis_nb.server.results import REFUSED_META_KEY, TIMED_OUT_META_KEY, StepTiming, WorkflowResult
    from aegis_nb.server.saga_handles import HandleRefused, SagaHandles, UndoNotBound
    from aegis_nb.server.session import ToolCaller, ToolSession, connect, unwrap_result
    from aegis_nb.server.tool_step import ToolPairStep


__all__ = [
    "REFUSED_META_KEY",
    "SAGA_ARGUMENT",
    "SAGA_META_KEY",
    "TIMED_OUT_META_KEY",
    "TIMEOUT_META_KEY",
    "AegisMCP",
    "HandleRefused",
    "InvalidRequestMeta",
    "SagaHandles",
    "StepTiming",
    "ToolCaller",
    "ToolPairStep",
    "ToolSession",
    "Transport",
    "UndoNotBound",
    "UndoTool",
    "UnsafeServing",
    "Workflow",
    "WorkflowResult",
    "connect",
    "unwrap_result",
]
