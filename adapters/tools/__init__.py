"""Tool servers the server runs tools on: MCP over streamable HTTP (`mcp.py`)."""

from adapters.tools.mcp import McpToolServers

__all__ = ["McpToolServers"]
