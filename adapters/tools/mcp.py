"""`ToolServers` over the official `mcp` package's client (streamable HTTP).

One connection per request: a call is rare next to generation, and a connection held
across a loop's steps would tie the loop to this process, which the durable loop must not
be (service/tools/mcploop.py). Every failure becomes a `ToolError` whose words never carry the
headers; the caller bounds the time.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpcore2
import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import (
    MCP_DEFAULT_SSE_READ_TIMEOUT,
    MCP_DEFAULT_TIMEOUT,
    create_mcp_http_client,
)

from adapters.tools.hosts import GuardedBackend, HostPolicy
from domain.mcp import execution_error, protocol_error
from service.ports import ToolError

log = logging.getLogger("resplog.mcp")

# The most pages of tools one listing asks a server for (MCP's `tools/list` pagination).
MAX_PAGES = 100


def _guarded(policy: HostPolicy, headers: dict[str, str]) -> httpx2.AsyncClient:
    """The `mcp` package's HTTP client (its timeouts, no redirects of its own), connecting
    only where `policy` allows (adapters/tools/hosts.py). httpx's transport takes no
    network backend, so its pool is replaced by one over the guarded backend, as the
    transport makes it (the default SSL context, HTTP/1.1, its limits); a test starts a
    server the policy refuses, so a transport that stopped using the pool would show."""
    transport = httpx2.AsyncHTTPTransport()
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(),
        max_connections=100,
        max_keepalive_connections=20,
        keepalive_expiry=5.0,
        network_backend=GuardedBackend(policy),
    )
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    return httpx2.AsyncClient(headers=headers, timeout=timeout, transport=transport)


def _reason(exc: BaseException) -> str:
    """What went wrong, in words: the exception's class and message (an exception group,
    as anyio raises, by its first leaf), never the request's headers."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class McpToolServers:
    """Lists and calls the tools of MCP servers: those a request names only where `hosts`
    lets the server connect (None: anywhere), the operator's own (`trusted`, the tool
    server of the built-ins) anywhere."""

    def __init__(self, hosts: HostPolicy | None = None, trusted: frozenset[str] = frozenset()):
        self._hosts = None if hosts is None or hosts.anything else hosts
        self._trusted = trusted

    def _client(self, url: str, headers: dict[str, str]) -> Client:
        if self._hosts is None or url in self._trusted:
            http = create_mcp_http_client(headers=dict(headers))
        else:
            http = _guarded(self._hosts, dict(headers))
        return Client(streamable_http_client(url, http_client=http), cache=None, mode="legacy")

    async def list_tools(self, url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
        """Every tool of the server: a server with many may list them a page at a time
        (each page's `nextCursor` names the next), and every page is asked for, up to
        `MAX_PAGES` (past it the listing fails: a server that pages on without end)."""
        try:
            async with self._client(url, headers) as client:
                page = await client.list_tools()
                found = list(page.tools)
                for _ in range(MAX_PAGES - 1):
                    if page.next_cursor is None:
                        break
                    page = await client.list_tools(cursor=page.next_cursor)
                    found += page.tools
        except Exception as exc:
            raise ToolError(protocol_error(f"listing the tools failed ({_reason(exc)})")) from exc
        if page.next_cursor is not None:
            raise ToolError(protocol_error(f"the server listed more than {MAX_PAGES} pages"))
        tools = []
        for tool in found:
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
            async with self._client(url, headers) as client:
                result = await client.call_tool(name, arguments)
        except Exception as exc:
            raise ToolError(protocol_error(f"the call failed ({_reason(exc)})")) from exc
        text = _output(result)
        if result.is_error:
            raise ToolError(execution_error(text or "the tool reported an error"))
        return text


def _output(result: types.CallToolResult) -> str:
    """A call's result as the text a model is shown (an `mcp_call`'s `output`): each
    content block in turn, a text as itself, a text resource embedded in the result as its
    text, and what a model cannot read here (an image, audio, a binary resource, a link to
    a resource) named in a line; a result of structured content alone, as its JSON."""
    parts: list[str] = []
    for block in result.content:
        match block:
            case types.TextContent(text=text):
                parts.append(text)
            case types.EmbeddedResource(resource=types.TextResourceContents(text=text)):
                parts.append(text)
            case types.EmbeddedResource(resource=resource):
                parts.append(f"[resource {resource.uri} ({resource.mime_type or 'binary'})]")
            case types.ResourceLink(name=name, uri=uri):
                parts.append(f"[resource link {name}: {uri}]")
            case types.ImageContent(mime_type=kind) | types.AudioContent(mime_type=kind):
                parts.append(f"[{block.type} ({kind}), not shown]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)
