"""`ToolServers` over the official `mcp` package's client (streamable HTTP).

One connection per request: a call is rare next to generation, and a connection held
across a loop's steps would tie the loop to this process, which the durable loop must not
be (service/mcploop.py). Every failure becomes a `ToolError` whose words never carry the
headers; the caller bounds the time.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from domain.mcp import execution_error, protocol_error
from service.ports import ToolError

log = logging.getLogger("resplog.mcp")


def _client(url: str, headers: dict[str, str]) -> Client:
    http = create_mcp_http_client(headers=dict(headers))
    return Client(streamable_http_client(url, http_client=http), cache=None, mode="legacy")


def _reason(exc: BaseException) -> str:
    """What went wrong, in words: the exception's class and message (an exception group,
    as anyio raises, by its first leaf), never the request's headers."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class McpToolServers:
    """Lists and calls the tools of MCP servers."""

    async def list_tools(self, url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
        try:
            async with _client(url, headers) as client:
                result = await client.list_tools()
        except Exception as exc:
            raise ToolError(protocol_error(f"listing the tools failed ({_reason(exc)})")) from exc
        tools = []
        for tool in result.tools:
            entry: dict[str, Any] = {"name": tool.name, "input_schema": tool.input_schema}
            if tool.description is not None:
                entry["description"] = tool.description
            if tool.annotations is not None:  # by MCP's own names (`readOnlyHint`), as sent
                entry["annotations"] = tool.annotations.model_dump(exclude_none=True, by_alias=True)
            tools.append(entry)
        return tools

    async def call_tool(
        self, url: str, headers: dict[str, str], name: str, arguments: dict[str, Any]
    ) -> str:
        try:
            async with _client(url, headers) as client:
                result = await client.call_tool(name, arguments)
        except Exception as exc:
            raise ToolError(protocol_error(f"the call failed ({_reason(exc)})")) from exc
        text = "\n".join(getattr(c, "text", "") for c in result.content if hasattr(c, "text"))
        if result.is_error:
            raise ToolError(execution_error(text or "the tool reported an error"))
        return text
