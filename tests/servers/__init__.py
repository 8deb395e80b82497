"""MCP servers the transport tests start as subprocesses."""
