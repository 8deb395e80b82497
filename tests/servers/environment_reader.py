"""A stdio MCP server with one read-only tool that says what one of its environment variables holds:
what the gateway's upstream `env` (and the ``${NAME}`` it fills) reaches a started upstream with."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server: MCPServer[object] = MCPServer("environment-reader")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def read_variable(name: str) -> dict[str, str | None]:
    """The value of the environment variable `name` in this process, or null when it is not set."""
    return {"name": name, "value": os.environ.get(name)}


if __name__ == "__main__":
    server.run("stdio")
