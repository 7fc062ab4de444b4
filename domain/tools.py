"""The tools a response offers the model, read from what it echoes.

A response echoes every tool the client sent (`ResponseObject.tools`, plain JSON). Only some
are offered to the model: `function` tools, `custom` tools (free-form text input), the
function and custom tools inside a `namespace`, and a client-executed `tool_search`. Hosted
tools (`web_search`, `file_search`, `image_generation`, ...) are echoed, recorded as not
offered, and never shown to the model (docs/api.md, "Tools"), except where a tool
server runs gpt-oss's built-ins: `web_search` and `code_interpreter` then offer them (the
end of this module; domain/builtins.py runs them).

Every engine renders an offered tool as a function: a custom tool as a function of one string
parameter `input` (the text the model writes), a namespaced tool under its namespace (harmony
has namespaces of its own; a chat upstream sees `namespace__name`). `custom_input` reads a
custom tool's text back out of such a call (service/tools/calls.py streams it).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from domain.objects import (
    AllowedToolsChoice,
    CustomToolCall,
    CustomToolCallOutput,
    CustomToolChoice,
    FunctionCall,
    FunctionCallOutput,
    FunctionToolChoice,
    HostedToolChoice,
    InputCustomToolCall,
    InputFunctionCall,
    InputItem,
    McpToolChoice,
    OutputItem,
    ToolChoice,
)

# What a function rendering of a custom tool takes: the tool's whole input as one string.
CUSTOM_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's input, as text."}},
    "required": ["input"],
    "additionalProperties": False,
}

# Tool types OpenAI runs itself (openai-python `ToolParam`): accepted and echoed, not offered.
HOSTED_TOOL_TYPES: frozenset[str] = frozenset(
    {
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "computer",
        "computer_use_preview",
        "code_interpreter",
        "image_generation",
        "local_shell",
        "shell",
        "apply_patch",
        "programmatic_tool_calling",
    }
)


class OfferedTool(msgspec.Struct, frozen=True, kw_only=True):
    """A tool the model is told about, in the terms every engine renders."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    namespace: str | None = None
    namespace_description: str | None = None
    custom: bool = False  # free-form text input; `parameters` is then CUSTOM_PARAMETERS
    format: dict[str, Any] | None = None  # a custom tool's input format (grammar), as sent
    server_label: str | None = None  # an MCP server's tool: the server runs it (docs/mcp.md)
    approval: bool = False  # an MCP tool whose calls wait for the client's approval
    # gpt-oss's built-in `browser` or `python`, run through the tool server
    # (domain/builtins.py): engines that know them render them their own way.
    builtin: str | None = None

    def qualified(self, separator: str) -> str:
        """The name an engine without namespaces uses: `namespace<sep>name`."""
        return f"{self.namespace}{separator}{self.name}" if self.namespace else self.name


def offered(tools: list[dict[str, Any]]) -> list[OfferedTool]:
    """The echoed tools the model may call, in order; namespaces flattened."""
    out: list[OfferedTool] = []
    for tool in tools:
        kind = tool.get("type")
        if kind == "namespace":
            ns, about = str(tool.get("name")), tool.get("description")
            out.extend(
                _one(t, namespace=ns, about=about if isinstance(about, str) else None)
                for t in tool.get("tools") or []
            )
        elif kind in ("function", "custom"):
            out.append(_one(tool))
        elif kind == "tool_search" and tool.get("execution") == "client":
            out.append(
                OfferedTool(
                    name="tool_search",
                    description=tool.get("description"),
                    parameters=tool.get("parameters"),
                )
            )
    return out


def not_offered(tools: list[dict[str, Any]], *, builtins: bool = False) -> list[str]:
    """The types of the echoed tools the model is not told about (hosted tools; but those
    a tool server's built-ins stand for when `builtins`)."""
    return [
        str(t.get("type"))
        for t in tools
        if (t.get("type") in HOSTED_TOOL_TYPES and not (builtins and is_builtin(t)))
        or (t.get("type") == "tool_search" and t.get("execution") != "client")
    ]


def is_builtin(tool: dict[str, Any]) -> bool:
    """Whether a request's tool is one a tool server's built-ins stand for."""
    return tool.get("type") in BROWSER_TYPES | PYTHON_TYPES


def _one(
    tool: dict[str, Any], *, namespace: str | None = None, about: str | None = None
) -> OfferedTool:
    custom = tool.get("type") == "custom"
    return OfferedTool(
        name=str(tool.get("name")),
        description=tool.get("description"),
        parameters=CUSTOM_PARAMETERS if custom else tool.get("parameters"),
        strict=None if custom else tool.get("strict"),
        namespace=namespace,
        namespace_description=about,
        custom=custom,
        format=tool.get("format") if custom else None,
    )


def custom_input(arguments: str) -> str:
    """A custom tool's text from the arguments of its function rendering; arguments that
    are not that shape (a model that wrote plain text) are the text itself."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        return str(value["input"])
    return arguments


# How engines qualify a namespaced tool's name: harmony's own `namespace.name`, and
# `namespace__name` where a name may not hold a dot (chat-completions function names).
SEPARATORS = (".", "__")


def resolve(tools: list[OfferedTool], called: str) -> OfferedTool | None:
    """The offered tool an engine's call names by its qualified name, if any."""
    for tool in tools:
        if any(tool.qualified(sep) == called for sep in SEPARATORS):
            return tool
    return None


def function_view(item: InputItem | OutputItem, separator: str) -> InputItem | OutputItem:
    """An item as an engine that knows only functions sees it: a custom tool's call is a
    call of its function rendering, its output a function's output, and a namespaced
    call names its function by the qualified name."""
    match item:
        case InputCustomToolCall() | CustomToolCall():
            return InputFunctionCall(
                id=item.id or "",
                call_id=item.call_id,
                name=_qualified(item.name, item.namespace, separator),
                arguments=json.dumps({"input": item.input}),
            )
        case CustomToolCallOutput(id=iid, call_id=cid, output=out):
            return FunctionCallOutput(id=iid, call_id=cid, output=out)
        case InputFunctionCall(namespace=str(ns)) | FunctionCall(namespace=str(ns)):
            return msgspec.structs.replace(
                item, name=_qualified(item.name, ns, separator), namespace=msgspec.UNSET
            )
    return item


def _qualified(name: str, namespace: str | msgspec.UnsetType, separator: str) -> str:
    return f"{namespace}{separator}{name}" if isinstance(namespace, str) else name


def narrowed(tools: list[OfferedTool], choice: ToolChoice) -> list[OfferedTool]:
    """The tools a `tool_choice` leaves the model (all of them for "auto", "required" and
    "none": an engine that can say "none" says it itself)."""
    match choice:
        case FunctionToolChoice(name=name):
            return [t for t in tools if t.name == name and not t.custom]
        case CustomToolChoice(name=name):
            return [t for t in tools if t.name == name and t.custom]
        case AllowedToolsChoice(mode="none"):
            return []
        case AllowedToolsChoice(tools=entries):
            allowed = {(e.get("type"), e.get("name")) for e in entries}
            return [t for t in tools if ("custom" if t.custom else "function", t.name) in allowed]
        case McpToolChoice(server_label=label, name=name):
            return [
                t
                for t in tools
                if t.server_label == label and (not isinstance(name, str) or t.name == name)
            ]
        case HostedToolChoice(kind=kind):
            # What stands for the kind here: the built-in a tool server runs for it, or
            # nothing (the model is then offered no tool).
            builtin = (
                "browser" if kind in BROWSER_TYPES else "python" if kind in PYTHON_TYPES else None
            )
            return [t for t in tools if builtin is not None and t.builtin == builtin]
    return list(tools)


# --- MCP servers (docs/mcp.md) ------------------------------------------------------------------


class McpServer(msgspec.Struct, frozen=True, kw_only=True):
    """An echoed `mcp` tool: where its server is and which of its tools the model may use.
    Its headers are not here: they never reach the log (service/tools/mcploop.py)."""

    server_label: str
    server_url: str
    # `allowed_tools` as a filter (a list of names is `{"tool_names": [...]}`); None: all.
    allowed_tools: dict[str, Any] | None = None
    require_approval: Any = None
    server_description: str | None = None


def mcp_servers(tools: list[dict[str, Any]]) -> list[McpServer]:
    """The `mcp` tools among the echoed ones, in order."""
    out = []
    for tool in tools:
        if tool.get("type") != "mcp":
            continue
        allowed = tool.get("allowed_tools")
        if isinstance(allowed, list):
            allowed = {"tool_names": allowed}
        out.append(
            McpServer(
                server_label=str(tool.get("server_label")),
                server_url=str(tool.get("server_url")),
                allowed_tools=allowed if isinstance(allowed, dict) else None,
                require_approval=tool.get("require_approval"),
                server_description=tool.get("server_description"),
            )
        )
    return out


def read_only(tool: dict[str, Any]) -> bool:
    """Whether a listed tool says it changes nothing (MCP's `readOnlyHint` annotation; lists
    logged before 2026-12-06 spell it `read_only_hint`). A tool that gives no hint may
    change something."""
    notes = tool.get("annotations")
    if not isinstance(notes, dict):
        return False
    return notes.get("readOnlyHint", notes.get("read_only_hint")) is True


_CRITERIA = ("tool_names", "read_only")


def _criteria(spec: Any) -> bool:
    """Whether an MCP tool filter gives a criterion (`tool_names`, `read_only`)."""
    return isinstance(spec, dict) and any(spec.get(k) is not None for k in _CRITERIA)


def matches(spec: Any, tool: dict[str, Any]) -> bool:
    """Whether an MCP tool filter (openai-python `McpAllowedToolsMcpToolFilter` and the
    filters of `require_approval`: `tool_names`, `read_only`) takes a listed tool: every
    criterion it gives holds (its name is named; its read-only hint is `read_only`). A
    filter that gives none takes no tool."""
    if not _criteria(spec):
        return False
    names, only = spec.get("tool_names"), spec.get("read_only")
    if names is not None and tool.get("name") not in names:
        return False
    return only is None or read_only(tool) == only


def needs_approval(server: McpServer, tool: dict[str, Any]) -> bool:
    """Whether a call of a listed tool waits for the client (`require_approval`). OpenAI's
    default is "always": only "never", or a `never` filter that takes the tool, lets it run
    unasked; and when an `always` filter is given, a tool it does not take runs unasked."""
    rule = server.require_approval
    if rule == "never":
        return False
    if isinstance(rule, dict):
        if matches(rule.get("never"), tool):
            return False
        if _criteria(rule.get("always")):
            return matches(rule["always"], tool)
    return True


def mcp_offered(server: McpServer, listed_tools: list[dict[str, Any]]) -> list[OfferedTool]:
    """A listed server's tools the model is told about: those `allowed_tools` takes (all,
    when it is not given or gives no criterion)."""
    out = []
    allowed = server.allowed_tools
    for t in listed_tools:
        if _criteria(allowed) and not matches(allowed, t):
            continue
        out.append(
            OfferedTool(
                name=str(t.get("name")),
                description=t.get("description"),
                parameters=t.get("input_schema"),
                server_label=server.server_label,
                approval=needs_approval(server, t),
            )
        )
    return out


# --- gpt-oss's built-in tools (domain/builtins.py runs them) ---------------------------------

# The request's tool types each built-in stands for (openai-python `ToolParam`).
BROWSER_TYPES = frozenset(
    {"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"}
)
PYTHON_TYPES = frozenset({"code_interpreter"})
BROWSER = [
    OfferedTool(name=n, namespace="browser", builtin="browser") for n in ("search", "open", "find")
]
PYTHON = OfferedTool(name="python", builtin="python")
# `browser.<name>`'s action type on a `web_search_call` (`ResponseFunctionWebSearch.Action`).
BUILTIN_ACTIONS = {"search": "search", "open": "open_page", "find": "find_in_page"}


def builtin_offered(tools: list[dict[str, Any]]) -> list[OfferedTool]:
    """The built-ins a request's echoed tools ask for, browser first."""
    kinds = {t.get("type") for t in tools}
    out = list(BROWSER) if kinds & BROWSER_TYPES else []
    return [*out, PYTHON] if kinds & PYTHON_TYPES else out


def container_id(tools: list[dict[str, Any]]) -> str:
    """The container a `code_interpreter_call` names: the request's own id, else "auto"."""
    for t in tools:
        if t.get("type") in PYTHON_TYPES and isinstance(t.get("container"), str):
            return str(t["container"])
    return "auto"


def action(name: str, arguments: str) -> dict[str, Any]:
    """The `action` of a `web_search_call` for the model's `browser.<name>` call. An action's
    URL is what the model named (a link number is no URL: "" as vLLM gives)."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = {}
    args = args if isinstance(args, dict) else {}
    kind = BUILTIN_ACTIONS.get(name, "search")
    link = args.get("id")
    url = link if isinstance(link, str) else ""
    if kind == "search":
        return {"type": "search", "query": str(args.get("query", ""))}
    if kind == "open_page":
        return {"type": "open_page", "url": url}
    return {"type": "find_in_page", "pattern": str(args.get("pattern", "")), "url": url}
