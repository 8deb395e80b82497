"""Which of the SDK's own tool errors are refusals: the call never reached the tool, so nothing was done.

The SDK answers an unknown tool and arguments that fail its validation with an ``is_error`` result of
its own, unmarked; a `ToolSession` would read those as "may have acted" and compensate a step that
never ran. `AegisMCP` marks them ``aegis-nb/refused``, keeping the SDK's words.
"""

from __future__ import annotations

from mcp.server.mcpserver.exceptions import ToolError as SdkToolError
from mcp.server.mcpserver.exceptions import UnexpectedToolError
from pydantic import ValidationError

UNKNOWN_TOOL_PREFIX = "Unknown tool: "


def refused_on_arrival(exc: BaseException) -> bool:
    """Whether the SDK raised `exc` before the tool ran: an unknown tool, or arguments it rejected."""
    if not isinstance(exc, SdkToolError) or isinstance(exc, UnexpectedToolError):
        return False
    if isinstance(exc.__cause__, ValidationError):  # Tool.run: the arguments failed validation
        return True
    return exc.__cause__ is None and str(exc).startswith(UNKNOWN_TOOL_PREFIX)
