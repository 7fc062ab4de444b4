"""Decoding a create body into domain objects: `parse_create_body` is the one mapping from
the wire to the domain, and every rejection it makes is an `InvalidRequest` carrying
OpenAI's `param` and `code`; nothing is written for a rejected request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

import msgspec
from msgspec import UNSET

from domain.errors import InvalidRequest
from domain.objects import (
    AllowedToolsChoice,
    ConversationRef,
    CustomToolCallOutput,
    CustomToolChoice,
    FormatJsonObject,
    FormatJsonSchema,
    FormatText,
    FunctionCallOutput,
    FunctionTool,
    FunctionToolChoice,
    HostedToolChoice,
    InputCompaction,
    InputCustomToolCall,
    InputFile,
    InputFunctionCall,
    InputImage,
    InputItem,
    InputMessage,
    InputPart,
    InputReasoning,
    InputText,
    ItemReference,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpCallStatus,
    McpToolChoice,
    OutputText,
    ReasoningConfig,
    Refusal,
    ResponseObject,
    TextConfig,
    TextFormat,
    ToolChoice,
)
from domain.tools import HOSTED_TOOL_TYPES, is_builtin, not_offered, offered
from service.wire.depth import check_nesting
from service.wire.rejection import rejection
from service.wire.request import (
    CompactionItemParam,
    ContentPartParam,
    ConversationParam,
    CreateResponseBody,
    CustomToolCallOutputParam,
    CustomToolCallParam,
    CustomToolParam,
    FormatJsonObjectParam,
    FormatJsonSchemaParam,
    FunctionCallOutputParam,
    FunctionCallParam,
    FunctionToolParam,
    HostedToolParam,
    InputFileParam,
    InputImageParam,
    InputItemParam,
    ItemReferenceParam,
    McpApprovalRequestParam,
    McpApprovalResponseParam,
    McpCallParam,
    McpToolParam,
    MessageParam,
    NamespaceToolParam,
    OutputTextParam,
    ReasoningItemParam,
    ReasoningParam,
    RefusalParam,
    SetAsideItemParam,
    TextParam,
    ToolChoiceAllowedParam,
    ToolChoiceCustomParam,
    ToolChoiceFunctionParam,
    ToolChoiceMcpParam,
    ToolChoiceParam,
    ToolParam,
    ToolSearchToolParam,
    TypedItemParam,
)


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Request limits; every one is configurable (see docs/operations.md)."""

    max_input_items: int = 4096
    max_text_chars: int = 1_048_576  # per text part / instructions
    max_tools: int = 128
    max_tool_schema_bytes: int = 65_536
    max_output_tokens: int = 131_072
    max_metadata_pairs: int = 16
    max_metadata_key_chars: int = 64
    max_metadata_value_chars: int = 512
    # Deepest nesting of arrays and objects in a body: far inside what every reader of the
    # stored log can render back (Python's recursion limit is about 1000).
    max_json_depth: int = 128
    # The largest image or file part, as its data URL (the body limit bounds them together).
    max_file_bytes: int = 8 * 1024 * 1024
    # Hosted tools (domain.tools.HOSTED_TOOL_TYPES): accepted and not offered, or refused.
    hosted_tools: Literal["accept", "refuse"] = "accept"
    # A tool server runs gpt-oss's built-ins (`--tool-server`): the hosted tools they stand
    # for are offered, so neither refused nor recorded as not offered. Not a flag of its own.
    builtins: bool = False


class CreateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A validated create request in domain terms: the response it starts (its id and
    creation time are left for the use-case to give) and what the response does not echo.

    Input item ids are "" unless the client sent one; the use-case, which knows the
    response id, assigns the others.
    """

    response: ResponseObject
    input: list[InputItem | ItemReference]  # references are resolved by the use-case
    stream: bool
    include: list[str]
    extra: dict[str, Any]  # parameters kept verbatim for audit (e.g. `stream_options`)
    # Each `mcp` server's headers (its `authorization` as a bearer header among them), by
    # label: secrets, never stored as sent (service/tools/mcploop.py seals them).
    secrets: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)
    # False: record the response and complete it with no output, the engine never asked (a
    # WebSocket `response.create` with `generate: false`, OpenAI's warm-up; docs/websocket.md).
    generate: bool = True

    @property
    def background(self) -> bool:
        return self.response.background


# Fields of OpenAI's API resplog refuses with a clear message instead of ignoring.
# (Fields whose silent drop would change what the client gets: a prompt template defines the
# instructions, moderation is a safety control.)
UNSUPPORTED_FIELDS = {
    "prompt": "prompt templates are not supported",
    "moderation": "moderation is not supported",
}
# Options of openai-python's `ResponseCreateParams` taken only at the value that asks for
# what this server does anyway (it compresses no image context; it has no access program
# but the standard one): accepted and kept in the request's facts as ignored; any other
# value is a 400 naming it. {field: (key, the values taken, why another is refused)}.
DEFAULT_ONLY = {
    "image": (
        "context_compression",
        ("auto", "disabled"),
        "this server does not compress image context",
    ),
    "access_programs": (
        "cyber",
        ("standard",),
        "this server has no access program but the standard one",
    ),
}
# Fields of openai-python's `ResponseCreateParams` that resplog accepts and does not act on:
# hints about caching, background handling and context management. Kept verbatim in the
# request's facts (`extra`), so the log shows what was asked; listed in docs/operations.md.
IGNORED_FIELDS = ("background_options", "prompt_cache_options")
# Input items OpenAI takes (openai-python 3.60 `ResponseInputItemParam`) that no engine here
# is given: the calls and outputs of tools OpenAI hosts or a client runs outside the
# function/custom kinds, MCP listings passed back, and the like. They
# are accepted (a client passing back an earlier answer's output must not get a 400), kept
# in the request's facts under `SET_ASIDE` (so `input_items` lists them, in place, as sent)
# and left out of every prompt; docs/clients.md. (An MCP call or approval request passed
# back is an input item of its own: the next model is shown the call, and the loop finds
# the request an approval answers.)
SET_ASIDE_TYPES = frozenset(
    {
        "additional_tools",
        "apply_patch_call",
        "apply_patch_call_output",
        "code_interpreter_call",
        "computer_call",
        "computer_call_output",
        "configuration_update",
        "file_search_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "mcp_list_tools",
        "program",
        "program_output",
        "shell_call",
        "shell_call_output",
        "tool_search_call",
        "tool_search_output",
        "web_search_call",
    }
)
SET_ASIDE = "input_set_aside"  # the key of the request facts' `extra` that keeps them
MAX_MODEL_CHARS = 256
# What an `mcp` tool's secrets (`headers` values, `authorization`) are echoed and stored as.
REDACTED = "<redacted>"
RESPONSE_ID = r"^resp_[A-Za-z0-9_-]{1,128}$"
CONVERSATION_ID = r"^conv_[A-Za-z0-9_-]{1,128}$"
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_json = msgspec.json.Decoder()


def parse_create_body(body: bytes, limits: Limits) -> CreateRequest:
    """Decode and validate a create body; raises `InvalidRequest` with OpenAI's param."""
    return _parse(_object(body, limits), limits)


# The body of `POST /v1/responses/input_tokens` (openai-python `InputTokenCountParams`): the
# create fields that shape the prompt. `personality` is accepted and ignored (no engine here
# has one); `model` may be left out (the server's first model counts).
INPUT_TOKENS_FIELDS = frozenset(
    {
        "conversation",
        "input",
        "instructions",
        "model",
        "parallel_tool_calls",
        "previous_response_id",
        "reasoning",
        "text",
        "tool_choice",
        "tools",
        "truncation",
    }
)


def parse_input_tokens_body(body: bytes, limits: Limits, default_model: str) -> CreateRequest:
    """Decode a token-count body into the create request it would be (never stored)."""
    raw = _object(body, limits)
    raw.pop("personality", None)
    for name in raw:
        if name not in INPUT_TOKENS_FIELDS:
            raise InvalidRequest(
                f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter"
            )
    if raw.get("model") is None:
        raw["model"] = default_model
    return _parse(raw, limits)


# The body of `POST /v1/responses/compact` (openai-python `ResponseCompactParams`, the Open
# Responses `CompactResponseMethodPublicBody`): what shapes the conversation; the cache and
# tier hints are accepted and ignored.
COMPACT_FIELDS = frozenset({"model", "input", "instructions", "previous_response_id"})
COMPACT_IGNORED = frozenset(
    {
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "safety_identifier",
        "service_tier",
        "image",
    }
)


def parse_compact_body(body: bytes, limits: Limits) -> CreateRequest:
    """Decode a compaction body into the create request of its summarising response."""
    raw = _object(body, limits)
    for name in list(raw):
        if name in COMPACT_IGNORED:
            del raw[name]
        elif name not in COMPACT_FIELDS:
            raise InvalidRequest(
                f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter"
            )
    return _parse(raw, limits)


def _object(body: bytes, limits: Limits) -> dict[str, Any]:
    check_nesting(body, limits.max_json_depth)
    try:
        raw = _json.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(raw, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return raw


def _parse(raw: dict[str, Any], limits: Limits) -> CreateRequest:
    _refuse_unsupported(raw)
    ignored = {k: raw.pop(k) for k in IGNORED_FIELDS if raw.get(k) is not None}
    ignored |= _defaults_only(raw)
    acted = {**_trigger(raw), **_context_management(raw.pop("context_management", None))}
    raw = _wrap_set_aside(_wrap_hosted(_tag_easy_messages(raw)))
    try:
        parsed = msgspec.convert(raw, CreateResponseBody)
    except msgspec.ValidationError as exc:
        raise rejection(exc, raw) from exc
    req = _to_request(parsed, limits)
    aside = set_aside_items(parsed.input)
    if aside:  # kept for `input_items` and the audit; never given to an engine
        req = msgspec.structs.replace(req, extra={**req.extra, SET_ASIDE: aside})
    if acted:  # service/prompts/compaction.py acts on them; the facts keep them
        _check_size("context_management", acted.get("context_management"), limits)
        req = msgspec.structs.replace(req, extra={**req.extra, **acted})
    if ignored:
        for name, value in ignored.items():
            _check_size(name, value, limits)
        req = msgspec.structs.replace(req, extra={**req.extra, "ignored": ignored})
    return req


def _trigger(raw: dict[str, Any]) -> dict[str, Any]:
    """Codex CLI's `{"type": "compaction_trigger"}`, the last input item of a request that
    wants its conversation compacted (its answer is then one `compaction` item): taken out
    of the input and kept as a fact. Anywhere else in the input it is a 400."""
    items = raw.get("input")
    if not isinstance(items, list):
        return {}
    found = [
        i
        for i, item in enumerate(items)
        if isinstance(item, dict) and item.get("type") == "compaction_trigger"
    ]
    if not found:
        return {}
    if found != [len(items) - 1]:
        i = found[0] if found[0] != len(items) - 1 else found[1]
        raise InvalidRequest(
            f"Invalid 'input[{i}]': a compaction_trigger item must be the last input item.",
            param=f"input[{i}]",
            code="invalid_value",
        )
    raw["input"] = items[:-1]
    return {"compaction_trigger": True}


def _context_management(value: Any) -> dict[str, Any]:
    """openai-python `ResponseCreateParams.context_management`: a list of strategies;
    `compaction` (with an optional integer `compact_threshold`) is acted on, any other
    strategy kept as sent (and so ignored)."""
    if value is None:
        return {}
    if not isinstance(value, list) or not all(
        isinstance(e, dict) and isinstance(e.get("type"), str) for e in value
    ):
        raise InvalidRequest(
            "Invalid 'context_management': expected an array of objects with a 'type'.",
            param="context_management",
            code="invalid_type",
        )
    for i, entry in enumerate(value):
        threshold = entry.get("compact_threshold")
        bad = isinstance(threshold, bool) or not isinstance(threshold, int | None)
        if entry["type"] == "compaction" and (bad or (threshold is not None and threshold < 1)):
            raise InvalidRequest(
                f"Invalid 'context_management[{i}].compact_threshold': expected a positive "
                "integer.",
                param=f"context_management[{i}].compact_threshold",
                code="invalid_value",
            )
    return {"context_management": value}


def _refuse_unsupported(raw: dict[str, Any]) -> None:
    """OpenAI fields resplog lacks get a 400 saying so, not "unknown"; the ones it ignores
    are set aside for the facts (`_set_aside`)."""
    for name, why in UNSUPPORTED_FIELDS.items():
        if name in raw and raw[name] is not None:
            raise InvalidRequest(
                f"Unsupported parameter: '{name}': {why}.", param=name, code="unsupported_parameter"
            )


def _defaults_only(raw: dict[str, Any]) -> dict[str, Any]:
    """The `DEFAULT_ONLY` options of `raw`, taken out of it, each at a value this server
    follows anyway; another value is a 400 naming it."""
    taken = {}
    for name, (key, values, why) in DEFAULT_ONLY.items():
        value = raw.pop(name, None)
        if value is None:
            continue
        if not isinstance(value, dict) or set(value) - {key}:
            unknown = sorted(set(value) - {key}) if isinstance(value, dict) else []
            param = f"{name}.{unknown[0]}" if unknown else name
            raise InvalidRequest(
                f"Unknown parameter: '{param}'."
                if unknown
                else f"Invalid '{name}': expected an object.",
                param=param,
                code="unknown_parameter" if unknown else "invalid_type",
            )
        if value.get(key, values[0]) not in values:
            raise InvalidRequest(
                f"Unsupported value for '{name}.{key}': {str(value[key])[:64]!r}; {why}.",
                param=f"{name}.{key}",
                code="unsupported_value",
            )
        taken[name] = value
    return taken


def _wrap_hosted(raw: dict[str, Any]) -> dict[str, Any]:
    """Put each hosted tool (`web_search`, ...) under the `hosted` tag, as sent, so that
    msgspec reads every tool kind through one tagged union."""
    return _wrap(raw, "tools", HOSTED_TOOL_TYPES, ("hosted", "tool"))


def _wrap_set_aside(raw: dict[str, Any]) -> dict[str, Any]:
    """Put each input item of a kind in `SET_ASIDE_TYPES` under the `set_aside` tag, as
    sent, in its place (so that errors about the other items keep their index)."""
    return _wrap(raw, "input", SET_ASIDE_TYPES, ("set_aside", "item"))


def _wrap(
    raw: dict[str, Any], field: str, kinds: frozenset[str], wrapper: tuple[str, str]
) -> dict[str, Any]:
    """Each element of the list `raw[field]` whose `type` is one of `kinds`, as
    `{"type": tag, key: element}`. The tag is resplog's own word, never a client's."""
    elements = raw.get(field)
    if not isinstance(elements, list):
        return raw
    tag, key = wrapper
    wrapped = []
    for i, element in enumerate(elements):
        kind = element.get("type") if isinstance(element, dict) else None
        if kind == tag:
            raise InvalidRequest(
                f"Invalid value for '{field}[{i}].type': Invalid value '{tag}'.",
                param=f"{field}[{i}].type",
                code="invalid_value",
            )
        inside = isinstance(kind, str) and kind in kinds
        wrapped.append({"type": tag, key: element} if inside else element)
    return {**raw, field: wrapped}


def set_aside_items(given: str | list[InputItemParam] | None) -> list[dict[str, Any]]:
    """The set-aside input items with their index in the request's input (`at`)."""
    if not isinstance(given, list):
        return []
    return [
        {"at": i, "item": item.item}
        for i, item in enumerate(given)
        if isinstance(item, SetAsideItemParam)
    ]


def _tag_easy_messages(raw: dict[str, Any]) -> dict[str, Any]:
    """Give `type: "message"` to input items without a `type` (`item_reference` to one that
    is only an id).

    OpenAI lets a message omit its type (openai-python `EasyInputMessageParam`), but a
    msgspec tagged union needs the tag to pick a Struct, so it is filled in here; nothing
    else is touched, and msgspec does all the validating.
    """
    items = raw.get("input")
    if not isinstance(items, list):
        return raw
    return {**raw, "input": [_easy(item) for item in items]}


def _easy(item: object) -> object:
    if not isinstance(item, dict) or "type" in item:
        return item
    if "role" in item:
        return {"type": "message", **item}
    # openai-python `ItemReference` may omit its type too: an item that is only an id.
    return {"type": "item_reference", **item} if set(item) == {"id"} else item


# --- the body in domain terms -----------------------------------------------------------------


def _to_request(p: CreateResponseBody, limits: Limits) -> CreateRequest:
    if not p.model:
        raise InvalidRequest(
            "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    # The model name is also a column of the read model, where PostgreSQL refuses a NUL.
    if len(p.model) > MAX_MODEL_CHARS or not p.model.isprintable():
        raise InvalidRequest(
            f"Invalid 'model': at most {MAX_MODEL_CHARS} printable characters.",
            param="model",
            code="invalid_value",
        )
    if p.input is None and p.previous_response_id is None:
        raise InvalidRequest(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    if p.previous_response_id is not None:
        check_response_id(p.previous_response_id, param="previous_response_id")
    conversation = _conversation(p)
    background, store = bool(p.background), p.store is not False
    if background and not store:
        raise InvalidRequest(
            "Background responses require store=true.", param="background", code="invalid_value"
        )
    _check_range("temperature", p.temperature, 0, 2)
    _check_range("top_p", p.top_p, 0, 1)
    _check_range("presence_penalty", p.presence_penalty, -2, 2)
    _check_range("frequency_penalty", p.frequency_penalty, -2, 2)
    _check_range("top_logprobs", p.top_logprobs, 0, 20)
    if p.max_output_tokens is not None:
        _check_range("max_output_tokens", p.max_output_tokens, 16, limits.max_output_tokens)
    if p.max_tool_calls is not None:
        _check_range("max_tool_calls", p.max_tool_calls, 1, 1024)
    _check_text("instructions", p.instructions, limits)
    tools = _tools(p.tools or [], limits)
    items = _input(p.input, limits)
    response = ResponseObject(
        id="",  # given by the use-case, with created_at
        created_at=0,
        status="queued",
        background=background,
        instructions=p.instructions,
        max_output_tokens=p.max_output_tokens,
        max_tool_calls=p.max_tool_calls,
        model=p.model,
        parallel_tool_calls=p.parallel_tool_calls is not False,
        previous_response_id=p.previous_response_id,
        tool_choice=_tool_choice(p.tool_choice, tools, limits),
        reasoning=_reasoning(p.reasoning),
        text=_text(p.text, limits),
        metadata=_metadata(p.metadata, limits),
        user=_short("user", p.user),
        safety_identifier=_short("safety_identifier", p.safety_identifier),
        prompt_cache_key=_short("prompt_cache_key", p.prompt_cache_key),
        service_tier=p.service_tier or "default",
        store=store,
        # What the engine is given and the response echoes: the client's or OpenAI's default.
        temperature=1.0 if p.temperature is None else p.temperature,
        tools=tools,
        top_logprobs=p.top_logprobs or 0,
        top_p=1.0 if p.top_p is None else p.top_p,
        presence_penalty=p.presence_penalty or 0.0,
        frequency_penalty=p.frequency_penalty or 0.0,
        truncation=p.truncation or "disabled",
        conversation=msgspec.UNSET if conversation is None else ConversationRef(id=conversation),
        prompt_cache_retention=(
            msgspec.UNSET if p.prompt_cache_retention is None else p.prompt_cache_retention
        ),
    )
    return CreateRequest(
        response=response,
        input=items,
        stream=bool(p.stream),
        include=list(p.include or []),
        extra=_extra(p, tools, limits),
        secrets=_mcp_secrets(p.tools or []),
    )


def _mcp_secrets(tools: list[ToolParam]) -> dict[str, dict[str, str]]:
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
    _check_size(param, echo, limits)
    return echo


def _extra(p: CreateResponseBody, tools: list[dict[str, Any]], limits: Limits) -> dict[str, Any]:
    """What the request's facts keep for audit beside the echoed response: parameters not
    echoed, and the hosted tools the model was not offered."""
    _check_size("client_metadata", p.client_metadata, limits)
    return {
        k: v
        for k, v in (
            ("stream_options", p.stream_options),
            ("prompt_cache_retention", p.prompt_cache_retention),
            ("client_metadata", p.client_metadata),
            ("tools_not_offered", not_offered(tools, builtins=limits.builtins) or None),
        )
        if v is not None
    }


# Request headers agent clients send that say which session or thread a request belongs to
# (Codex CLI: `session-id`, `thread-id`, `originator`): kept in the facts for the audit view.
CLIENT_HEADERS = ("session-id", "thread-id", "originator")
MAX_HEADER_FACT_CHARS = 256


def with_client_headers(req: CreateRequest, headers: Mapping[str, str]) -> CreateRequest:
    """The request with the client headers it came with recorded in its facts (cut to
    `MAX_HEADER_FACT_CHARS`); a header is never a reason to refuse a request."""
    found = {
        name: headers[name][:MAX_HEADER_FACT_CHARS] for name in CLIENT_HEADERS if name in headers
    }
    if not found:
        return req
    return msgspec.structs.replace(req, extra={**req.extra, "client_headers": found})


def _conversation(p: CreateResponseBody) -> str | None:
    """The conversation's id (sent as an id or as `{"id": …}`); not with a previous response
    (OpenAI refuses both at once)."""
    value = p.conversation.id if isinstance(p.conversation, ConversationParam) else p.conversation
    if value is None:
        return None
    if p.previous_response_id is not None:
        raise InvalidRequest(
            "Mutually exclusive parameters: Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            param="conversation",
            code="mutually_exclusive_parameters",
        )
    return check_conversation_id(value, param="conversation")


def check_conversation_id(value: str, *, param: str = "conversation_id") -> str:
    if not re.fullmatch(CONVERSATION_ID, value):
        raise InvalidRequest(
            f"Invalid '{param}': '{value[:80]}'. Expected an ID that begins with 'conv'.",
            param=param,
            code="invalid_value",
        )
    return value


def check_response_id(value: str, *, param: str = "response_id") -> str:
    if not re.fullmatch(RESPONSE_ID, value):
        raise InvalidRequest(
            f"Invalid '{param}': '{value[:80]}'. Expected an ID that begins with 'resp'.",
            param=param,
            code="invalid_value",
        )
    return value


def _check_range(name: str, value: float | None, low: float, high: float) -> None:
    if value is not None and not low <= value <= high:
        raise InvalidRequest(
            f"Invalid '{name}': {value} is out of range; it must be between {low} and {high}.",
            param=name,
            code="invalid_value",
        )


def _short(name: str, value: str | None, limit: int = 512) -> str | None:
    if value is not None and len(value) > limit:
        raise InvalidRequest(
            f"Invalid '{name}': string too long (max {limit} characters).",
            param=name,
            code="string_above_max_length",
        )
    return value


def _check_text(param: str, text: str | None, limits: Limits) -> None:
    if text is not None and len(text) > limits.max_text_chars:
        raise InvalidRequest(
            f"Invalid '{param}': string too long ({len(text)} characters; the limit is "
            f"{limits.max_text_chars}).",
            param=param,
            code="string_above_max_length",
        )


def _tools(tools: list[ToolParam], limits: Limits) -> list[dict[str, Any]]:
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
            _check_text(f"{param}.description", about, limits)
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
            _check_size(f"{param}.parameters", t.parameters, limits)
            _check_text(f"{param}.description", t.description, limits)
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
            _check_size(param, tool, limits)
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
    _check_text(f"{param}.description", t.description, limits)
    if isinstance(t, FunctionToolParam):
        _check_size(f"{param}.parameters", t.parameters, limits)
        tool = FunctionTool(
            name=t.name, description=t.description, parameters=t.parameters, strict=t.strict
        )
        out: dict[str, Any] = msgspec.to_builtins(tool)
        return out
    _check_size(f"{param}.format", t.format, limits)
    custom: dict[str, Any] = {"type": "custom", "name": t.name}
    if t.description is not None:
        custom["description"] = t.description
    if t.format is not None:
        custom["format"] = msgspec.to_builtins(t.format)
    return custom


def _check_size(param: str, value: object, limits: Limits) -> None:
    """A schema-like part of the request (a tool's parameters, `text.format`'s schema, the
    allowed tools) is bounded like a tool schema: each is copied into the log."""
    if value is not None and len(msgspec.json.encode(value)) > limits.max_tool_schema_bytes:
        raise InvalidRequest(
            f"Invalid '{param}': larger than {limits.max_tool_schema_bytes} bytes.",
            param=param,
            code="invalid_value",
        )


def _tool_choice(
    choice: ToolChoiceParam | None, tools: list[dict[str, Any]], limits: Limits
) -> ToolChoice:
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
            _check_size("tool_choice.tools", allowed, limits)
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
            _short("tool_choice.name", name, 128)
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


def _reasoning(r: ReasoningParam | None) -> ReasoningConfig:
    if r is None:
        return ReasoningConfig()
    return ReasoningConfig(
        effort=r.effort,
        summary=r.summary or r.generate_summary,
        context=r.context,
        mode=_short("reasoning.mode", r.mode, 64),
    )


def _text(t: TextParam | None, limits: Limits) -> TextConfig:
    if t is None:
        return TextConfig()
    if t.format is None:
        return TextConfig(verbosity=t.verbosity)
    fmt: TextFormat
    match t.format:
        case FormatJsonSchemaParam(name=name, schema=schema, description=d, strict=s):
            _check_size("text.format.schema", schema, limits)
            _check_text("text.format.description", d, limits)
            # `strict` echoes as false when unset (OpenAI's default; the Open Responses
            # schema wants a boolean).
            fmt = FormatJsonSchema(name=name, schema=schema, description=d, strict=bool(s))
        case FormatJsonObjectParam():
            fmt = FormatJsonObject()
        case _:
            fmt = FormatText()
    return TextConfig(format=fmt, verbosity=t.verbosity)


def _metadata(meta: dict[str, str] | None, limits: Limits) -> dict[str, str]:
    meta = meta or {}
    if len(meta) > limits.max_metadata_pairs:
        raise InvalidRequest(
            f"Invalid 'metadata': too many pairs ({len(meta)}; the limit is "
            f"{limits.max_metadata_pairs}).",
            param="metadata",
            code="object_above_max_properties",
        )
    for key, value in meta.items():
        if len(key) > limits.max_metadata_key_chars:
            raise InvalidRequest(
                f"Invalid 'metadata': key '{key[:80]}' is longer than "
                f"{limits.max_metadata_key_chars} characters.",
                param="metadata",
                code="string_above_max_length",
            )
        if len(value) > limits.max_metadata_value_chars:
            raise InvalidRequest(
                f"Invalid 'metadata.{key}': value is longer than "
                f"{limits.max_metadata_value_chars} characters.",
                param=f"metadata.{key}",
                code="string_above_max_length",
            )
    return dict(meta)


# --- input items ------------------------------------------------------------------------------


def _input(
    value: str | list[InputItemParam] | None, limits: Limits
) -> list[InputItem | ItemReference]:
    """OpenAI's input forms (a string, messages, typed items) as domain items, with the
    size limits msgspec cannot know (they are configurable)."""
    if value is None:
        return []
    if isinstance(value, str):
        _check_text("input", value, limits)
        return [InputMessage(id="", role="user", content=[InputText(text=value)])]
    if len(value) > limits.max_input_items:
        raise InvalidRequest(
            f"Invalid 'input': too many items ({len(value)}; the limit is "
            f"{limits.max_input_items}).",
            param="input",
            code="array_above_max_length",
        )
    items = [
        _item(item, f"input[{i}]", limits)
        for i, item in enumerate(value)
        if not isinstance(item, SetAsideItemParam)
    ]
    _refuse_duplicate_ids(items)
    return items


_MCP_STATUSES = frozenset(get_args(McpCallStatus))


def _mcp_status(status: object) -> McpCallStatus | None:
    """A passed-back MCP call's status, kept when it is one of OpenAI's (the next prompt
    leaves out a call still running); a stored input item's status is otherwise dropped."""
    return status if status in _MCP_STATUSES else None  # type: ignore[return-value]


def _refuse_duplicate_ids(items: list[InputItem | ItemReference]) -> None:
    """OpenAI's 400 for two items with one id: the input items list pages by id, so an id
    must name one item (else `after=<that id>` never advances)."""
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item.id and item.id in seen:
            raise InvalidRequest(
                f"Duplicate item found with id {item.id}. Remove duplicate items from your "
                "input and try again.",
                param=f"input[{i}].id",
                code="invalid_value",
            )
        seen.add(item.id)


def _item(item: TypedItemParam, param: str, limits: Limits) -> InputItem | ItemReference:
    iid = item.id or ""
    match item:
        case ItemReferenceParam():
            if not iid:
                raise InvalidRequest(
                    f"Missing required parameter: '{param}.id'.",
                    param=f"{param}.id",
                    code="missing_required_parameter",
                )
            return ItemReference(id=iid)
        case MessageParam(role=role, content=str() as text, phase=phase):
            _check_text(f"{param}.content", text, limits)
            part = OutputText(text=text) if role == "assistant" else InputText(text=text)
            return InputMessage(id=iid, role=role, content=[part], phase=phase)
        case MessageParam(role=role, content=list() as parts, phase=phase):
            content = [_part(c, f"{param}.content[{j}]", limits) for j, c in enumerate(parts)]
            return InputMessage(id=iid, role=role, content=content, phase=phase)
        case FunctionCallParam(call_id=call_id, name=name, arguments=arguments):
            return InputFunctionCall(
                id=iid, call_id=call_id, name=name, arguments=arguments, namespace=_ns(item)
            )
        case FunctionCallOutputParam(call_id=call_id, output=output):
            text = _tool_output(output, f"{param}.output", limits)
            return FunctionCallOutput(id=iid, call_id=call_id, output=text)
        case CustomToolCallParam(call_id=call_id, name=name, input=text):
            _check_text(f"{param}.input", text, limits)
            return InputCustomToolCall(
                id=iid, call_id=call_id, name=name, input=text, namespace=_ns(item)
            )
        case CompactionItemParam(encrypted_content=blob):
            return InputCompaction(id=iid, encrypted_content=blob)
        case CustomToolCallOutputParam(call_id=call_id, output=output):
            text = _tool_output(output, f"{param}.output", limits)
            return CustomToolCallOutput(id=iid, call_id=call_id, output=text)
        case McpApprovalResponseParam(approval_request_id=req, approve=ok, reason=why):
            _check_text(f"{param}.reason", why, limits)
            return McpApprovalResponse(id=iid, approval_request_id=req, approve=ok, reason=why)
        case McpApprovalRequestParam(server_label=label, name=name, arguments=args):
            _check_text(f"{param}.arguments", args, limits)
            return McpApprovalRequest(id=iid, server_label=label, name=name, arguments=args)
        case McpCallParam(server_label=label, name=name, arguments=args, output=output):
            _check_text(f"{param}.arguments", args, limits)
            _check_text(f"{param}.output", output, limits)
            return McpCall(
                id=iid,
                server_label=label,
                name=name,
                arguments=args,
                output=output,
                error=item.error,
                approval_request_id=item.approval_request_id,
                status=_mcp_status(item.status),
            )
        case ReasoningItemParam(summary=summary, content=content, encrypted_content=enc):
            return InputReasoning(
                id=iid,
                summary=summary or [],
                content=content or [],
                encrypted_content=enc if isinstance(enc, str) else UNSET,
            )
    raise AssertionError(f"unhandled input item {type(item).__name__}")


def _ns(item: FunctionCallParam | CustomToolCallParam) -> str | msgspec.UnsetType:
    return msgspec.UNSET if item.namespace is None else item.namespace


def _part(part: ContentPartParam, param: str, limits: Limits) -> InputPart:
    if isinstance(part, RefusalParam):
        return Refusal(refusal=part.refusal)
    if isinstance(part, InputImageParam | InputFileParam):
        return _media(part, param, limits)
    _check_text(f"{param}.text", part.text, limits)
    return (
        OutputText(text=part.text)
        if isinstance(part, OutputTextParam)
        else InputText(text=part.text)
    )


_IMAGE_URL = re.compile(r"^(data:image/[a-z0-9.+-]+;base64,|https?://)", re.IGNORECASE)
_FILE_DATA = re.compile(r"^data:[a-z0-9.+-]+/[a-z0-9.+-]+;base64,", re.IGNORECASE)


def _media(part: InputImageParam | InputFileParam, param: str, limits: Limits) -> InputPart:
    """An image or file part: kept as sent, bounded by `max_file_bytes`. This server has no
    Files API, so a `file_id` is refused, as is a `file_url` (it would have the server
    fetch any URL a client names)."""
    if part.file_id is not None:
        raise InvalidRequest(
            f"Invalid '{param}.file_id': this server has no Files API; send the bytes inline "
            "(a data URL in image_url or file_data).",
            param=f"{param}.file_id",
            code="unsupported_parameter",
        )
    if isinstance(part, InputImageParam):
        url = part.image_url or ""
        if not _IMAGE_URL.match(url):
            raise InvalidRequest(
                f"Invalid '{param}.image_url': expected a data URL (data:image/...;base64,...) "
                "or an http(s) URL.",
                param=f"{param}.image_url",
                code="invalid_value",
            )
        _check_blob(f"{param}.image_url", url, limits)
        return InputImage(detail=part.detail, image_url=url)
    if part.file_url is not None:
        raise InvalidRequest(
            f"Invalid '{param}.file_url': files by URL are not supported; send file_data.",
            param=f"{param}.file_url",
            code="unsupported_parameter",
        )
    data = part.file_data or ""
    if not _FILE_DATA.match(data):
        raise InvalidRequest(
            f"Invalid '{param}.file_data': expected a data URL (data:<type>;base64,...).",
            param=f"{param}.file_data",
            code="invalid_value",
        )
    _check_blob(f"{param}.file_data", data, limits)
    return InputFile(file_data=data, filename=_short(f"{param}.filename", part.filename, 256))


def _check_blob(param: str, value: str, limits: Limits) -> None:
    if len(value) > limits.max_file_bytes:
        raise InvalidRequest(
            f"Invalid '{param}': larger than {limits.max_file_bytes} bytes.",
            param=param,
            code="string_above_max_length",
        )


def _tool_output(value: str | list[ContentPartParam], param: str, limits: Limits) -> str:
    if isinstance(value, str):
        _check_text(param, value, limits)
        return value
    parts = [_part(v, f"{param}[{j}]", limits) for j, v in enumerate(value)]
    return "".join(p.text for p in parts if isinstance(p, InputText | OutputText))
