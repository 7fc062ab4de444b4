"""The OpenAI Responses object model: the response, its output and input items, tools.

These are the shapes the log stores and clients receive, so field names and order follow
the OpenAI API. They are frozen msgspec Structs; stored data must stay readable forever, so
none of them forbids unknown fields and every field added later gets a default.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "incomplete"})


Phase = Literal["commentary", "final_answer"]


class _Obj(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every object: frozen, keyword-only."""


def _absent_if_none(obj: _Obj, *names: str) -> None:
    """Fields the Open Responses schema wants absent, never null, when unset are `UNSET`
    (msgspec then leaves them out). Logs written before that stored `null` for them; this
    reads such a null as `UNSET`, so a value has one form whatever version wrote it."""
    for name in names:
        if getattr(obj, name) is None:
            msgspec.structs.force_setattr(obj, name, UNSET)


def phase_of(message: OutputMessage | InputMessage) -> Phase | None:
    """A message's phase, or None when it has none."""
    phase = message.phase
    return None if phase is None or isinstance(phase, UnsetType) else phase


# --- content parts -------------------------------------------------------------------------


class InputText(_Obj, frozen=True, kw_only=True, tag_field="type", tag="input_text"):
    text: str


class OutputText(_Obj, frozen=True, kw_only=True, tag_field="type", tag="output_text"):
    text: str
    annotations: list[dict[str, Any]] = msgspec.field(default_factory=list)
    logprobs: list[dict[str, Any]] = msgspec.field(default_factory=list)


class Refusal(_Obj, frozen=True, kw_only=True, tag_field="type", tag="refusal"):
    refusal: str


class ReasoningText(_Obj, frozen=True, kw_only=True, tag_field="type", tag="reasoning_text"):
    text: str


class SummaryText(_Obj, frozen=True, kw_only=True, tag_field="type", tag="summary_text"):
    text: str


class InputImage(_Obj, frozen=True, kw_only=True, tag_field="type", tag="input_image"):
    """An image a client sent (openai-python `ResponseInputImage`): a URL, usually a
    `data:image/...;base64,` one, kept as sent."""

    detail: Literal["low", "high", "auto", "original"] = "auto"
    file_id: str | None = None
    image_url: str | None = None


class InputFile(_Obj, frozen=True, kw_only=True, tag_field="type", tag="input_file"):
    """A file a client sent (openai-python `ResponseInputFile`): its bytes as a data URL
    (`file_data`) and its name, kept as sent."""

    file_data: str | None = None
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None


MessagePart = OutputText | Refusal
InputPart = InputText | OutputText | Refusal | InputImage | InputFile
ContentPart = OutputText | Refusal | ReasoningText


# --- output items ---------------------------------------------------------------------------


class OutputMessage(_Obj, frozen=True, kw_only=True, tag_field="type", tag="message"):
    id: str
    status: ItemStatus
    role: Literal["assistant"] = "assistant"
    content: list[MessagePart] = msgspec.field(default_factory=list)
    # "commentary" for a preamble the model says before calling tools, else "final_answer";
    # absent when the engine does not say (`None` is read as absent, see `_absent_if_none`).
    phase: Phase | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        _absent_if_none(self, "phase")


class ReasoningItem(_Obj, frozen=True, kw_only=True, tag_field="type", tag="reasoning"):
    id: str
    summary: list[SummaryText] = msgspec.field(default_factory=list)
    content: list[ReasoningText] = msgspec.field(default_factory=list)
    encrypted_content: str | UnsetType | None = UNSET
    status: ItemStatus | None = None

    def __post_init__(self) -> None:
        _absent_if_none(self, "encrypted_content")


# A tool call's `namespace` is UNSET (left out of the JSON) unless the tool was in a
# `namespace` tool, so calls of plain functions keep the bytes they always had.
Namespace = str | msgspec.UnsetType


class FunctionCall(_Obj, frozen=True, kw_only=True, tag_field="type", tag="function_call"):
    id: str | None = None
    call_id: str
    name: str
    arguments: str
    status: ItemStatus | None = None
    namespace: Namespace = msgspec.UNSET


class CustomToolCall(_Obj, frozen=True, kw_only=True, tag_field="type", tag="custom_tool_call"):
    """A call of a `custom` tool: free-form text `input` instead of JSON arguments
    (openai-python `ResponseCustomToolCall`)."""

    id: str | None = None
    call_id: str
    name: str
    input: str
    status: ItemStatus | None = None
    namespace: Namespace = msgspec.UNSET


class CompactionItem(_Obj, frozen=True, kw_only=True, tag_field="type", tag="compaction"):
    """A compaction in a response's output (openai-python `ResponseCompactionItem`; it
    has no `status`): the conversation before it, summarised and sealed. Made whole, so
    it is added and done in one step; its id names the response that wrote the summary."""

    id: str
    encrypted_content: str


# --- MCP items (openai-python `response_output_item.py`: McpListTools, McpCall,
# McpApprovalRequest; the server runs these calls itself, see docs/mcp.md) ---------------


class McpListTools(_Obj, frozen=True, kw_only=True, tag_field="type", tag="mcp_list_tools"):
    """The tools an MCP server offered (each `{name, input_schema, description,
    annotations}`), or why they could not be listed. No `status` field, as in OpenAI's."""

    id: str
    server_label: str
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    error: str | None = None


McpCallStatus = Literal["in_progress", "completed", "incomplete", "calling", "failed"]


class McpCall(_Obj, frozen=True, kw_only=True, tag_field="type", tag="mcp_call"):
    """One call of an MCP server's tool, run by the server; `error` is one of openai-python's
    `McpToolCallError` shapes (`mcp_protocol_error`, `mcp_tool_execution_error`,
    `http_error`)."""

    id: str
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: dict[str, Any] | None = None
    approval_request_id: str | None = None
    status: McpCallStatus | None = None


class McpApprovalRequest(
    _Obj, frozen=True, kw_only=True, tag_field="type", tag="mcp_approval_request"
):
    """The model wants to call a tool that needs the client's approval: the response ends,
    and a later request answers it with an `mcp_approval_response` item."""

    id: str
    server_label: str
    name: str
    arguments: str


# --- gpt-oss's built-in tools, run through the operator's tool server (docs/mcp.md,
# "Built-in tools"): OpenAI's items for its hosted `web_search` and `code_interpreter` -------


class WebSearchCall(_Obj, frozen=True, kw_only=True, tag_field="type", tag="web_search_call"):
    """A `browser.*` call of gpt-oss (openai-python `response_function_web_search.py`
    `ResponseFunctionWebSearch`): `action` is `{"type": "search", "query"}`,
    `{"type": "open_page", "url"}` or `{"type": "find_in_page", "pattern", "url"}`. OpenAI's
    item carries no results; what the tool answered is kept in the log's hidden facts."""

    id: str
    action: dict[str, Any]
    status: Literal["in_progress", "searching", "completed", "failed"]


class CodeInterpreterCall(
    _Obj, frozen=True, kw_only=True, tag_field="type", tag="code_interpreter_call"
):
    """A `python` call of gpt-oss (openai-python `response_code_interpreter_tool_call.py`
    `ResponseCodeInterpreterToolCall`): the code, and its output as `{"type": "logs"}`."""

    id: str
    code: str | None
    container_id: str
    outputs: list[dict[str, Any]] | None = None
    status: Literal["in_progress", "completed", "incomplete", "interpreting", "failed"]


McpItem = McpListTools | McpCall | McpApprovalRequest
BuiltinCall = WebSearchCall | CodeInterpreterCall
# The calls the server runs itself, step by step in the log (service/tools/mcploop.py).
ServerCall = McpCall | WebSearchCall | CodeInterpreterCall
ToolCall = FunctionCall | CustomToolCall
OutputItem = (
    OutputMessage
    | ReasoningItem
    | FunctionCall
    | CustomToolCall
    | McpListTools
    | McpCall
    | McpApprovalRequest
    | CompactionItem
    | WebSearchCall
    | CodeInterpreterCall
)


# --- input items (what a client sends; stored in the request facts) -------------------------


class InputMessage(_Obj, frozen=True, kw_only=True, tag_field="type", tag="message"):
    id: str
    role: Literal["user", "system", "developer", "assistant"]
    content: list[InputPart]
    status: ItemStatus | None = "completed"
    # An assistant message's phase as the client passed it back (openai-python
    # `EasyInputMessageParam.phase`); absent when it sent none.
    phase: Phase | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        _absent_if_none(self, "phase")


class FunctionCallOutput(
    _Obj, frozen=True, kw_only=True, tag_field="type", tag="function_call_output"
):
    id: str
    call_id: str
    output: str
    status: ItemStatus | None = "completed"


class InputFunctionCall(_Obj, frozen=True, kw_only=True, tag_field="type", tag="function_call"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus | None = "completed"
    namespace: Namespace = msgspec.UNSET


class InputCustomToolCall(
    _Obj, frozen=True, kw_only=True, tag_field="type", tag="custom_tool_call"
):
    id: str
    call_id: str
    name: str
    input: str
    status: ItemStatus | None = "completed"
    namespace: Namespace = msgspec.UNSET


class CustomToolCallOutput(
    _Obj, frozen=True, kw_only=True, tag_field="type", tag="custom_tool_call_output"
):
    id: str
    call_id: str
    output: str
    status: ItemStatus | None = "completed"


class InputReasoning(_Obj, frozen=True, kw_only=True, tag_field="type", tag="reasoning"):
    id: str
    summary: list[SummaryText] = msgspec.field(default_factory=list)
    content: list[ReasoningText] = msgspec.field(default_factory=list)
    encrypted_content: str | UnsetType | None = UNSET
    status: ItemStatus | None = None

    def __post_init__(self) -> None:
        _absent_if_none(self, "encrypted_content")


class InputCompaction(_Obj, frozen=True, kw_only=True, tag_field="type", tag="compaction"):
    """A compaction item (`POST /v1/responses/compact`) passed back as input: the sealed
    summary of the conversation it replaces. Its id, `cmp_<suffix>`, names the response
    that wrote the summary (`resp_<suffix>`), whose log shows what was summarised."""

    id: str
    encrypted_content: str
    created_by: str | None = None


class McpApprovalResponse(
    _Obj, frozen=True, kw_only=True, tag_field="type", tag="mcp_approval_response"
):
    """The client's answer to an `mcp_approval_request` (openai-python
    `ResponseInputItemParam.McpApprovalResponse`)."""

    id: str
    approval_request_id: str
    approve: bool
    reason: str | None = None


InputItem = (
    InputMessage
    | FunctionCallOutput
    | InputFunctionCall
    | InputReasoning
    | InputCustomToolCall
    | CustomToolCallOutput
    | InputCompaction
    | McpApprovalResponse
    | McpCall
    | McpApprovalRequest
)
# The prefix of the id the server gives an input item that came without one, by kind (a
# request's: `<prefix>_<response suffix>_in<index>`; a conversation's: `<prefix>_<...>`).
INPUT_ID_PREFIX: dict[type, str] = {
    InputMessage: "msg",
    FunctionCallOutput: "fco",
    InputFunctionCall: "fc",
    InputReasoning: "rs",
    InputCustomToolCall: "ctc",
    CustomToolCallOutput: "ctco",
    InputCompaction: "cmp",
    McpApprovalResponse: "mcpa",
    McpCall: "mcp",
    McpApprovalRequest: "mcpr",
}


class SetAsideItem(_Obj, frozen=True, kw_only=True, tag_field="type", tag="set_aside"):
    """An item of a kind OpenAI takes that no engine here is given (a hosted tool's call, a
    shell call and its output, an MCP listing...), added to a conversation: kept as sent
    (`item`), listed as `item` with its `id`, and left out of every prompt. A create's own
    such items are kept in its facts instead (service/wire's `SET_ASIDE`). `set_aside` is
    resplog's own word, never a client's."""

    id: str
    item: dict[str, Any]

    @classmethod
    def of(cls, sent: dict[str, Any]) -> SetAsideItem:
        """An item as sent (or as a response made it), its id taken out ("" if none)."""
        return cls(id=str(sent.get("id") or ""), item={k: v for k, v in sent.items() if k != "id"})

    def listed(self) -> dict[str, Any]:
        """The item as the API lists it: as sent, with its id."""
        return {"id": self.id, **self.item}


class ItemReference(_Obj, frozen=True, kw_only=True, tag_field="type", tag="item_reference"):
    """An input item named by its id (openai-python `ItemReference`): never stored, the
    create use-case puts the item it names in its place."""

    id: str


# --- configuration echoed on the response ---------------------------------------------------


class FunctionTool(_Obj, frozen=True, kw_only=True, tag_field="type", tag="function"):
    """A function tool as the response echoes it (the form every stored log has)."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionToolChoice(_Obj, frozen=True, kw_only=True, tag_field="type", tag="function"):
    name: str


class CustomToolChoice(_Obj, frozen=True, kw_only=True, tag_field="type", tag="custom"):
    name: str


class AllowedToolsChoice(_Obj, frozen=True, kw_only=True, tag_field="type", tag="allowed_tools"):
    mode: Literal["none", "auto", "required"]
    tools: list[dict[str, Any]]


class McpToolChoice(_Obj, frozen=True, kw_only=True, tag_field="type", tag="mcp"):
    """A call of a tool of one MCP server (openai-python `ToolChoiceMcp`), by name or any."""

    server_label: str
    name: str | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        _absent_if_none(self, "name")


class HostedToolChoice(_Obj, frozen=True, kw_only=True, tag_field="type"):
    """A hosted tool kind `tool_choice` forces (openai-python `ToolChoiceTypes`,
    `ToolChoiceApplyPatch`, `ToolChoiceShell`, programmatic tool calling): echoed as sent.
    One subclass per kind, since a tagged union needs a tag per type."""

    @property
    def kind(self) -> str:
        return str(self.__struct_config__.tag)


class FileSearchChoice(HostedToolChoice, frozen=True, kw_only=True, tag="file_search"):
    pass


class WebSearchPreviewChoice(HostedToolChoice, frozen=True, kw_only=True, tag="web_search_preview"):
    pass


class WebSearchPreviewDatedChoice(
    HostedToolChoice, frozen=True, kw_only=True, tag="web_search_preview_2025_03_11"
):
    pass


class ComputerChoice(HostedToolChoice, frozen=True, kw_only=True, tag="computer"):
    pass


class ComputerUseChoice(HostedToolChoice, frozen=True, kw_only=True, tag="computer_use"):
    pass


class ComputerUsePreviewChoice(
    HostedToolChoice, frozen=True, kw_only=True, tag="computer_use_preview"
):
    pass


class ImageGenerationChoice(HostedToolChoice, frozen=True, kw_only=True, tag="image_generation"):
    pass


class CodeInterpreterChoice(HostedToolChoice, frozen=True, kw_only=True, tag="code_interpreter"):
    pass


class ApplyPatchChoice(HostedToolChoice, frozen=True, kw_only=True, tag="apply_patch"):
    pass


class ShellChoice(HostedToolChoice, frozen=True, kw_only=True, tag="shell"):
    pass


class ProgrammaticToolCallingChoice(
    HostedToolChoice, frozen=True, kw_only=True, tag="programmatic_tool_calling"
):
    pass


AnyHostedToolChoice = (
    FileSearchChoice
    | WebSearchPreviewChoice
    | WebSearchPreviewDatedChoice
    | ComputerChoice
    | ComputerUseChoice
    | ComputerUsePreviewChoice
    | ImageGenerationChoice
    | CodeInterpreterChoice
    | ApplyPatchChoice
    | ShellChoice
    | ProgrammaticToolCallingChoice
)

ToolChoice = (
    Literal["none", "auto", "required"]
    | FunctionToolChoice
    | CustomToolChoice
    | AllowedToolsChoice
    | McpToolChoice
    | AnyHostedToolChoice
)


class FormatText(_Obj, frozen=True, kw_only=True, tag_field="type", tag="text"):
    pass


class FormatJsonObject(_Obj, frozen=True, kw_only=True, tag_field="type", tag="json_object"):
    pass


class FormatJsonSchema(_Obj, frozen=True, kw_only=True, tag_field="type", tag="json_schema"):
    name: str
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


TextFormat = FormatText | FormatJsonObject | FormatJsonSchema


class TextConfig(_Obj, frozen=True, kw_only=True):
    format: TextFormat = msgspec.field(default_factory=FormatText)
    verbosity: Literal["low", "medium", "high"] | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        _absent_if_none(self, "verbosity")


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ReasoningConfig(_Obj, frozen=True, kw_only=True):
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    # openai-python `Reasoning.context`: which earlier turns' reasoning the model is shown
    # (engines: docs/engines.md); `mode`: an execution mode, echoed and not acted on. Both
    # absent unless the request sent them, so older responses read back unchanged.
    context: Literal["auto", "current_turn", "all_turns"] | UnsetType | None = UNSET
    mode: str | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        _absent_if_none(self, "context", "mode")


# --- the response ---------------------------------------------------------------------------


class InputTokensDetails(_Obj, frozen=True, kw_only=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(_Obj, frozen=True, kw_only=True):
    reasoning_tokens: int = 0


class Usage(_Obj, frozen=True, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails = msgspec.field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = msgspec.field(default_factory=OutputTokensDetails)
    total_tokens: int


class ResponseError(_Obj, frozen=True, kw_only=True):
    # OpenAI's Response.error.code is a closed set; engine failures map to "server_error"
    # and the message says what happened.
    code: str
    message: str


class IncompleteDetails(_Obj, frozen=True, kw_only=True):
    reason: Literal["max_output_tokens", "content_filter"]


class ConversationRef(_Obj, frozen=True, kw_only=True):
    """The conversation a response belongs to (openai-python `Response.conversation`)."""

    id: str


class PromptRef(_Obj, frozen=True, kw_only=True):
    """The prompt template a response was made from (openai-python `Response.prompt`,
    `types/responses/response_prompt.py`): its id, the version used (the latest when the
    request named none) and the variables as the request gave them."""

    id: str
    variables: dict[str, str | InputText | InputImage | InputFile] | None = None
    version: str | None = None


class ResponseObject(_Obj, frozen=True, kw_only=True):
    """The OpenAI `Response` object: what `GET /v1/responses/{id}` returns."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    background: bool = False
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    model: str
    output: list[OutputItem] = msgspec.field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    reasoning: ReasoningConfig = msgspec.field(default_factory=ReasoningConfig)
    safety_identifier: str | None = None
    service_tier: str = "default"
    store: bool = True
    # Sampling settings echo the values the engine is given: the client's, or OpenAI's
    # documented defaults (temperature and top_p 1, penalties and top_logprobs 0); the Open
    # Responses schema requires numbers here. `None` only in logs written before, which are
    # served as they were stored. resplog takes no penalties (openai-python
    # `ResponseCreateParams` has none), so they are always 0.
    temperature: float | None = 1.0
    text: TextConfig = msgspec.field(default_factory=TextConfig)
    tool_choice: ToolChoice = "auto"
    # Every tool as the client sent it, normalised by the decoder (function tools in
    # `FunctionTool`'s form): hosted tools this deployment does not run are echoed too, so
    # the list is plain JSON; `domain.tools.offered` reads the ones the model is told about.
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    top_logprobs: int | None = 0
    top_p: float | None = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    truncation: Literal["auto", "disabled"] = "disabled"
    usage: Usage | None = None
    user: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    # Left out of the JSON unless the response names a conversation, so the objects of
    # logs written before conversations existed keep their bytes.
    conversation: ConversationRef | msgspec.UnsetType = msgspec.UNSET
    # Echoed when the client sent it (openai-python `Response.prompt_cache_retention`); no
    # engine here keeps a prompt cache that long, so it is not acted on.
    prompt_cache_retention: str | msgspec.UnsetType = msgspec.UNSET
    # Left out unless the request named a prompt template (domain/templates.py), so the
    # objects of other responses keep their bytes.
    prompt: PromptRef | msgspec.UnsetType = msgspec.UNSET

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES
