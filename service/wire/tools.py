"""A create's `tools` as the response echoes them: each kind checked, names unique where
they are called, and an `mcp` tool's secrets kept apart and redacted."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from domain.errors import InvalidRequest
from domain.objects import FunctionTool
from domain.tools import is_builtin
from service.wire.limits import Limits, check_size, check_text
from service.wire.request import (
    CustomToolParam,
    FunctionToolParam,
    HostedToolParam,
    McpToolParam,
    NamespaceToolParam,
    ToolParam,
    ToolSearchToolParam,
)

# What an `mcp` tool's secrets (`headers` values, `authorization`) are echoed and stored as.
REDACTED = "<redacted>"
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def read_tools(tools: list[ToolParam], limits: Limits) -> list[dict[str, Any]]:
    """The tools as the response echoes them: function tools in `FunctionTool`'s form (as
    every stored log has them), the others as sent, less the fields resplog ignores."""
    if len(tools) > limits.max_tools:
        raise InvalidRequest(
            f"Too many tools: {len(tools)} (the limit is {limits.max_tools}).",
            param="tools",
            code="array_above_max_length",
        )
    names = _Names()
    return [_tool(t, f"tools[{i}]", limits, names) for i, t in enumerate(tools)]


class _Names:
    """Tool names seen so far, per namespace: a name must be unique where it is called."""

    def __init__(self) -> None:
        self.seen: set[tuple[str | None, str]] = set()

    def add(self, name: str, param: str, namespace: str | None = None) -> None:
        if not _TOOL_NAME.match(name):
            raise InvalidRequest(
                f"Invalid '{param}.name': '{name[:80]}' must match ^[a-zA-Z0-9_-]{{1,64}}$.",
                param=f"{param}.name",
                code="invalid_value",
            )
        if (namespace, name) in self.seen:
            raise InvalidRequest(
                f"Duplicate tool name '{name}' at {param}.",
                param=f"{param}.name",
                code="invalid_value",
            )
        self.seen.add((namespace, name))


def _tool(t: ToolParam, param: str, limits: Limits, names: _Names) -> dict[str, Any]:
    match t:
        case FunctionToolParam() | CustomToolParam():
            return _callable_tool(t, param, limits, names)
        case NamespaceToolParam(name=name, description=about, tools=inner):
            names.add(name, param, namespace="")
            check_text(f"{param}.description", about, limits)
            return {
                "type": "namespace",
                "name": name,
                "description": about,
                "tools": [
                    _callable_tool(u, f"{param}.tools[{j}]", limits, names, namespace=name)
                    for j, u in enumerate(inner)
                ],
            }
        case ToolSearchToolParam():
            check_size(f"{param}.parameters", t.parameters, limits)
            check_text(f"{param}.description", t.description, limits)
            fields: dict[str, Any] = {"execution": t.execution, "description": t.description}
            fields["parameters"] = t.parameters
            return {"type": "tool_search", **{k: v for k, v in fields.items() if v is not None}}
        case McpToolParam():
            return _mcp_tool(t, param, limits, names)
        case HostedToolParam(tool=tool):
            if limits.hosted_tools == "refuse" and not (limits.builtins and is_builtin(tool)):
                raise InvalidRequest(
                    f"Unsupported tool type '{tool['type']}' at {param}: this server does not "
                    "run hosted tools.",
                    param=f"{param}.type",
                    code="unsupported_parameter",
                )
            check_size(param, tool, limits)
            return tool
    raise AssertionError(f"unhandled tool {type(t).__name__}")


def _callable_tool(
    t: FunctionToolParam | CustomToolParam,
    param: str,
    limits: Limits,
    names: _Names,
    namespace: str | None = None,
) -> dict[str, Any]:
    names.add(t.name, param, namespace)
    check_text(f"{param}.description", t.description, limits)
    if isinstance(t, FunctionToolParam):
        check_size(f"{param}.parameters", t.parameters, limits)
        tool = FunctionTool(
            name=t.name, description=t.description, parameters=t.parameters, strict=t.strict
        )
        out: dict[str, Any] = msgspec.to_builtins(tool)
        return out
    check_size(f"{param}.format", t.format, limits)
    custom: dict[str, Any] = {"type": "custom", "name": t.name}
    if t.description is not None:
        custom["description"] = t.description
    if t.format is not None:
        custom["format"] = msgspec.to_builtins(t.format)
    return custom


def mcp_secrets(tools: list[ToolParam]) -> dict[str, dict[str, str]]:
    """Each `mcp` tool's headers (`authorization` as a bearer header), by server label."""
    out: dict[str, dict[str, str]] = {}
    for t in tools:
        if isinstance(t, McpToolParam) and (t.headers or t.authorization):
            headers = dict(t.headers or {})
            if t.authorization:
                headers["Authorization"] = f"Bearer {t.authorization}"
            out[t.server_label] = headers
    return out


def _mcp_tool(t: McpToolParam, param: str, limits: Limits, names: _Names) -> dict[str, Any]:
    """An `mcp` tool as echoed and stored: its secrets replaced by `REDACTED`."""
    if t.connector_id is not None or t.tunnel_id is not None or not t.server_url:
        raise InvalidRequest(
            f"Unsupported MCP server at {param}: this server reaches MCP servers by "
            "'server_url' only (no connectors or tunnels).",
            param=f"{param}.server_url",
            code="unsupported_parameter",
        )
    if not _TOOL_NAME.match(t.server_label):
        raise InvalidRequest(
            f"Invalid 'server_label' at {param}: letters, digits, '_' and '-' only.",
            param=f"{param}.server_label",
            code="invalid_value",
        )
    names.add(t.server_label, param, namespace="mcp")
    if not t.server_url.startswith(("http://", "https://")):
        raise InvalidRequest(
            f"Invalid 'server_url' at {param}: an http(s) URL is expected.",
            param=f"{param}.server_url",
            code="invalid_value",
        )
    echo = {k: v for k, v in msgspec.to_builtins(t).items() if v is not None}
    echo["type"] = "mcp"
    if t.headers:
        echo["headers"] = {name: REDACTED for name in t.headers}
    if t.authorization:
        echo["authorization"] = REDACTED
    check_size(param, echo, limits)
    return echo
