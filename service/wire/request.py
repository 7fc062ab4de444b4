"""The body of `POST /v1/responses` as msgspec Structs: what a client may send, and the
schema `/openapi.json` publishes. Validation is msgspec's: no coercion, unknown fields refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from domain.objects import AnyHostedToolChoice, ReasoningEffort, ReasoningText, SummaryText


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


# --- tools, tool choice, text format, reasoning ---------------------------------------------


class FunctionToolParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="function"):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    # Accepted and ignored (openai-python `FunctionToolParam`): resplog has no deferred
    # loading or programmatic callers, and does not check outputs against a schema.
    defer_loading: Any = None
    allowed_callers: Any = None
    output_schema: Any = None
    async_: Any = msgspec.field(default=None, name="async")


class GrammarFormatParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="grammar"):
    syntax: Literal["lark", "regex"]
    definition: str


class TextFormatParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="text"):
    pass


class CustomToolParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="custom"):
    """A tool whose input is free-form text (openai-python `CustomToolParam`)."""

    name: str
    description: str | None = None
    format: TextFormatParam | GrammarFormatParam | None = None
    defer_loading: Any = None
    allowed_callers: Any = None
    async_: Any = msgspec.field(default=None, name="async")


class NamespaceToolParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="namespace"):
    """A named group of function and custom tools (openai-python `NamespaceToolParam`)."""

    name: str
    description: str
    tools: list[FunctionToolParam | CustomToolParam]


class ToolSearchToolParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="tool_search"):
    execution: Literal["server", "client"] | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None


class HostedToolParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="hosted"):
    """A tool OpenAI runs itself (`web_search`, `file_search`, ...): decode wraps it, as
    sent, under this tag, so any of its fields is accepted (domain.tools.HOSTED_TOOL_TYPES).
    Clients send the tool itself (`{"type": "web_search"}`), never this wrapper, which is
    refused."""

    tool: dict[str, Any]


class McpToolFilterParam(_Strict, frozen=True, kw_only=True, omit_defaults=True):
    """Which of an MCP server's tools (openai-python `McpAllowedToolsMcpToolFilter`, and the
    filters of `require_approval`): those named, those whose `readOnlyHint` is `read_only`,
    or those that are both (domain/tools.py `matches`)."""

    tool_names: list[str] | None = None
    read_only: bool | None = None


class McpApprovalFilterParam(_Strict, frozen=True, kw_only=True, omit_defaults=True):
    """openai-python `McpRequireApprovalMcpToolApprovalFilter`."""

    always: McpToolFilterParam | None = None
    never: McpToolFilterParam | None = None


class McpToolParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="mcp"):
    """A remote MCP server whose tools the server runs (openai-python `tool.py` `Mcp`;
    docs/mcp.md). `headers` and `authorization` are secrets: never echoed or stored."""

    server_label: str
    server_url: str | None = None
    connector_id: str | None = None
    tunnel_id: str | None = None
    allowed_tools: list[str] | McpToolFilterParam | None = None
    allowed_callers: list[str] | None = None
    require_approval: Literal["always", "never"] | McpApprovalFilterParam | None = None
    headers: dict[str, str] | None = None
    authorization: str | None = None
    server_description: str | None = None
    defer_loading: bool | None = None


ToolParam = (
    FunctionToolParam
    | CustomToolParam
    | NamespaceToolParam
    | ToolSearchToolParam
    | HostedToolParam
    | McpToolParam
)


class ToolChoiceFunctionParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="function"):
    name: str


class ToolChoiceAllowedParam(
    _Strict, frozen=True, kw_only=True, tag_field="type", tag="allowed_tools"
):
    # openai-python requires `auto` or `required`; the Open Responses `AllowedToolsParam`
    # also takes `none`, and no mode at all (`auto`, which the response then echoes).
    mode: Literal["none", "auto", "required"] = "auto"
    tools: list[dict[str, Any]]


class ToolChoiceCustomParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="custom"):
    name: str


class ToolChoiceMcpParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="mcp"):
    server_label: str
    name: str | None = None


# A hosted kind (`{"type": "file_search"}`, ...) decodes straight to the domain's choice:
# it has no field but its type.
ToolChoiceParam = (
    Literal["none", "auto", "required"]
    | ToolChoiceFunctionParam
    | ToolChoiceCustomParam
    | ToolChoiceAllowedParam
    | ToolChoiceMcpParam
    | AnyHostedToolChoice
)


class FormatTextParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="text"):
    pass


class FormatJsonObjectParam(
    _Strict, frozen=True, kw_only=True, tag_field="type", tag="json_object"
):
    pass


class FormatJsonSchemaParam(
    _Strict, frozen=True, kw_only=True, tag_field="type", tag="json_schema"
):
    name: str
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


class TextParam(_Strict, frozen=True, kw_only=True):
    format: FormatTextParam | FormatJsonObjectParam | FormatJsonSchemaParam | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningParam(_Strict, frozen=True, kw_only=True):
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: str | None = None  # openai-python: "standard", "pro" or another string


# --- content parts --------------------------------------------------------------------------


class _Part(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """A content part. Fields a part does not use are ignored, not refused: a client passing
    back an earlier `output_text` sends its `annotations` and `logprobs` too
    (openai-python `ResponseOutputTextParam`)."""


class InputTextParam(_Part, frozen=True, kw_only=True, tag="input_text"):
    text: str


class ChatTextParam(InputTextParam, frozen=True, kw_only=True, tag="text"):
    """Chat Completions' `{"type": "text"}` part, read as `input_text`."""


class OutputTextParam(_Part, frozen=True, kw_only=True, tag="output_text"):
    text: str


class RefusalParam(_Part, frozen=True, kw_only=True, tag="refusal"):
    refusal: str


class InputImageParam(_Part, frozen=True, kw_only=True, tag="input_image"):
    detail: Literal["low", "high", "auto", "original"] = "auto"
    file_id: str | None = None
    image_url: str | None = None


class InputFileParam(_Part, frozen=True, kw_only=True, tag="input_file"):
    file_data: str | None = None
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None


ContentPartParam = (
    InputTextParam
    | ChatTextParam
    | OutputTextParam
    | RefusalParam
    | InputImageParam
    | InputFileParam
)


# --- input items ----------------------------------------------------------------------------

# A client's id for an item it passes back is kept; the server assigns the others. An empty
# id is read as none: a compaction's output written before its user messages had ids
# repeated them with `"id": ""`, and what the server once emitted must be accepted back.
ItemId = Annotated[str, msgspec.Meta(max_length=128)]


class _Item(_Strict, frozen=True, kw_only=True, tag_field="type"):
    id: ItemId | None = None
    # Passed-back items carry a status (openai-python types it optional); it is accepted
    # as is and not kept: a stored input item is always "completed".
    status: Any = None
    # Codex CLI's built-in provider sends this on input items; accepted and not kept.
    internal_chat_message_metadata_passthrough: Any = None


class MessageParam(_Item, frozen=True, kw_only=True, tag="message"):
    """A message; its `type` may be omitted (openai-python `EasyInputMessageParam`, where
    `type` is not Required): decode fills the tag in before msgspec reads the union."""

    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPartParam]
    # An assistant message's phase, kept and echoed by `input_items` (openai-python
    # `EasyInputMessageParam.phase`); null is taken as absent.
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallParam(_Item, frozen=True, kw_only=True, tag="function_call"):
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None
    caller: Any = None  # programmatic callers: accepted, not kept
    async_: Any = msgspec.field(default=None, name="async")


class FunctionCallOutputParam(_Item, frozen=True, kw_only=True, tag="function_call_output"):
    call_id: str
    output: str | list[ContentPartParam]  # parts: their text is joined
    # Accepted, not kept: the call this output answers names its function and namespace
    # (openai-python `FunctionCallOutput.name`, `.namespace`).
    name: Any = None
    namespace: Any = None
    caller: Any = None


class CustomToolCallParam(_Item, frozen=True, kw_only=True, tag="custom_tool_call"):
    call_id: str
    name: str
    input: str
    namespace: str | None = None
    caller: Any = None
    async_: Any = msgspec.field(default=None, name="async")


class CustomToolCallOutputParam(_Item, frozen=True, kw_only=True, tag="custom_tool_call_output"):
    call_id: str
    output: str | list[ContentPartParam]
    caller: Any = None


class CompactionItemParam(_Item, frozen=True, kw_only=True, tag="compaction"):
    """openai-python `ResponseCompactionItemParam`: a compaction passed back."""

    encrypted_content: str
    created_by: Any = None  # accepted, not kept


class ItemReferenceParam(_Item, frozen=True, kw_only=True, tag="item_reference"):
    """An item of an earlier response of the same owner, named by its id; the use-case
    puts the item itself in its place (service/prompts/references.py)."""


class ReasoningItemParam(_Item, frozen=True, kw_only=True, tag="reasoning"):
    # openai-python `ResponseReasoningItemParam` requires `summary`; resplog never has.
    summary: list[SummaryText] | None = None
    content: list[ReasoningText] | None = None
    encrypted_content: Any = None  # kept when it is a string, else dropped (as ever)


class McpApprovalResponseParam(_Item, frozen=True, kw_only=True, tag="mcp_approval_response"):
    """openai-python `ResponseInputItemParam.McpApprovalResponse`: the client's answer to
    an `mcp_approval_request` of the response it continues."""

    approval_request_id: str
    approve: bool
    reason: str | None = None


class McpCallParam(_Item, frozen=True, kw_only=True, tag="mcp_call"):
    """openai-python `ResponseInputItemParam.McpCall`: an MCP call an earlier response ran,
    passed back. The next model is shown it as the call and its result (service/tools/mcploop.py
    `engine_prompt`), as it is shown the calls of the response it continues."""

    server_label: str
    name: str
    arguments: str
    output: str | None = None
    # openai-python `McpToolCallErrorParam`: `{"type": "mcp_protocol_error" | "http_error",
    # "code", "message"}` or `{"type": "mcp_tool_execution_error", "content"}`.
    error: dict[str, Any] | None = None
    approval_request_id: str | None = None


class McpApprovalRequestParam(_Item, frozen=True, kw_only=True, tag="mcp_approval_request"):
    """openai-python `ResponseInputItemParam.McpApprovalRequest`: a request for approval an
    earlier response made, passed back beside its answer (`mcp_approval_response`) by a
    client that keeps its own history; the loop finds it here (service/tools/mcploop.py)."""

    server_label: str
    name: str
    arguments: str


class SetAsideItemParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="set_aside"):
    """An input item of a kind OpenAI takes and resplog's engines are not given (a hosted
    tool's call, a computer or shell call and its output, an MCP listing...): decode puts
    it under this tag, as sent, and the request's facts keep it (`input_set_aside`).
    `set_aside` is resplog's own word, never a client's."""

    item: dict[str, Any]


TypedItemParam = (
    McpApprovalResponseParam
    | McpCallParam
    | McpApprovalRequestParam
    | MessageParam
    | FunctionCallParam
    | FunctionCallOutputParam
    | ReasoningItemParam
    | CustomToolCallParam
    | CustomToolCallOutputParam
    | CompactionItemParam
    | ItemReferenceParam
)
InputItemParam = TypedItemParam | SetAsideItemParam


class ConversationParam(_Strict, frozen=True, kw_only=True):
    id: str


class PromptParam(_Strict, frozen=True, kw_only=True):
    """openai-python `ResponsePromptParam` (`types/responses/response_prompt_param.py`): a
    prompt template's id, its version (the latest if none), and values for its variables,
    each text or an `input_text`, `input_image` or `input_file` part."""

    id: str
    version: str | None = None
    variables: dict[str, str | InputTextParam | InputImageParam | InputFileParam] | None = None


class CreateResponseBody(_Strict, frozen=True, kw_only=True):
    """The body of `POST /v1/responses`. Fields OpenAI has that resplog does not support
    are refused with a 400 naming them, never silently dropped."""

    model: str
    input: str | list[InputItemParam] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationParam | None = None
    prompt: PromptParam | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    # The Open Responses `CreateResponseBody`'s (openai-python's create has neither).
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    top_logprobs: int | None = None
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    background: bool | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: (
        Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"] | None
    ) = None
    # Not in openai-python's params, sent by Codex CLI (its turn, session and thread ids):
    # kept in the request's facts for audit, never echoed.
    client_metadata: dict[str, Any] | None = None
