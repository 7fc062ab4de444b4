"""A create's `tool_choice` in domain terms, checked against the request's tools."""

from __future__ import annotations

from typing import Any

from domain.errors import InvalidRequest
from domain.objects import (
    AllowedToolsChoice,
    CustomToolChoice,
    FunctionToolChoice,
    HostedToolChoice,
    McpToolChoice,
    ToolChoice,
)
from domain.tools import HOSTED_TOOL_TYPES, offered
from service.wire.limits import Limits, check_size, short
from service.wire.request import (
    ToolChoiceAllowedParam,
    ToolChoiceCustomParam,
    ToolChoiceFunctionParam,
    ToolChoiceMcpParam,
    ToolChoiceParam,
)


def read_tool_choice(
    choice: ToolChoiceParam | None, tools: list[dict[str, Any]], limits: Limits
) -> ToolChoice:
    """`tool_choice` in domain terms: what it names must be among the request's tools."""
    callable_ = {("custom" if t.custom else "function", t.name) for t in offered(tools)}
    match choice:
        case None:
            return "auto"
        case ToolChoiceFunctionParam(name=name) | ToolChoiceCustomParam(name=name):
            kind = "function" if isinstance(choice, ToolChoiceFunctionParam) else "custom"
            if (kind, name) not in callable_:
                raise InvalidRequest(
                    f"Invalid 'tool_choice': {kind} '{name}' is not among the request's tools.",
                    param="tool_choice",
                    code="invalid_value",
                )
            if kind == "custom":
                return CustomToolChoice(name=name)
            return FunctionToolChoice(name=name)
        case ToolChoiceAllowedParam(mode=mode, tools=allowed):
            check_size("tool_choice.tools", allowed, limits)
            for j, entry in enumerate(allowed):
                _check_allowed(entry, callable_, j)
            return AllowedToolsChoice(mode=mode, tools=allowed)
        case ToolChoiceMcpParam(server_label=label, name=name):
            labels = {t.get("server_label") for t in tools if t.get("type") == "mcp"}
            if label not in labels:
                raise InvalidRequest(
                    f"Invalid 'tool_choice': MCP server '{label}' is not among the request's "
                    "tools.",
                    param="tool_choice.server_label",
                    code="invalid_value",
                )
            short("tool_choice.name", name, 128)
            return McpToolChoice(server_label=label, name=name)
        case HostedToolChoice():
            # Accepted whatever the tools (OpenAI runs these itself); it narrows the model's
            # tools to what stands for the kind here, if anything (domain.tools.narrowed).
            return choice
        case "required" if not tools:
            raise InvalidRequest(
                "tool_choice 'required' needs at least one tool.",
                param="tool_choice",
                code="invalid_value",
            )
        case _:
            return choice


def _check_allowed(entry: dict[str, Any], callable_: set[tuple[str, str]], j: int) -> None:
    """An `allowed_tools` entry names a function or custom tool of the request, or a hosted
    tool kind (which, not being offered, narrows nothing)."""
    kind = entry.get("type")
    if kind in HOSTED_TOOL_TYPES or (kind, entry.get("name")) in callable_:
        return
    raise InvalidRequest(
        f"Invalid 'tool_choice.tools[{j}]': not a tool among the request's tools.",
        param=f"tool_choice.tools[{j}]",
        code="invalid_value",
    )
