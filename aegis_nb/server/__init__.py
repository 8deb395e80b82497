"""Server layer: `AegisMCP`, an MCP server (official `mcp` SDK) that serves tools and saga workflows."""

from aegis_nb.server.app import AegisMCP

__all__ = ["AegisMCP"]
