"""The tools stage: the tools a response offers its engine, and the refusal, before anything
is written, of `mcp` servers on a server that does not run MCP tools.
"""

from __future__ import annotations

from domain.errors import InvalidRequest
from domain.objects import ResponseObject
from domain.tools import OfferedTool, mcp_servers, offered
from service.bundle import Bundle


def check_tools(svc: Bundle, response: ResponseObject) -> None:
    """Refuse `mcp` tools where no tool loop runs them (`svc.runner.tools`)."""
    if svc.runner.tools is None and mcp_servers(response.tools):
        raise InvalidRequest(
            "This server does not run MCP tools.", param="tools", code="unsupported_parameter"
        )


def offered_tools(response: ResponseObject) -> list[OfferedTool]:
    """The tools the engine is offered: the request's function, custom and client-run tools,
    namespaces flattened (an `mcp` server's and the built-ins' are added by the loop that
    runs them, service/tools/mcploop.py)."""
    return offered(response.tools)
