"""The OpenAI wire shapes of requests and errors, and their mapping to domain objects.

Requests are decoded strictly (no type coercion, unknown fields refused) so a client learns
about a typo instead of having it silently ignored. Every rejection is an `InvalidRequest`
carrying OpenAI's `param` and `code`; nothing is written for a rejected request.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from domain.errors import InvalidRequest
from domain.objects import (
    AllowedToolsChoice,
    FormatJsonObject,
    FormatJsonSchema,
    FormatText,
    FunctionCallOutput,
    FunctionTool,
    FunctionToolChoice,
    InputFunctionCall,
    InputItem,
    InputMessage,
    InputPart,
    InputReasoning,
    InputText,
    OutputText,
    ReasoningConfig,
    ReasoningText,
    Refusal,
    SummaryText,
    TextConfig,
    TextFormat,
    ToolChoice,
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


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class FunctionToolParam(_Strict, frozen=True, kw_only=True):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolChoiceFunctionParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="function"):
    name: str


class ToolChoiceAllowedParam(
    _Strict, frozen=True, kw_only=True, tag_field="type", tag="allowed_tools"
):
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


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
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class CreateResponseBody(_Strict, frozen=True, kw_only=True):
    """The body of `POST /v1/responses`. Fields OpenAI has that resplog does not support
    are refused with a 400 naming them, never silently dropped."""

    model: str
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[FunctionToolParam] | None = None
    tool_choice: (
        Literal["none", "auto", "required"]
        | ToolChoiceFunctionParam
        | ToolChoiceAllowedParam
        | None
    ) = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    temperature: float | None = None
    top_p: float | None = None
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
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None


# Fields of OpenAI's API resplog refuses with a clear message instead of ignoring.
UNSUPPORTED_FIELDS = {
    "conversation": "conversations are not supported; use previous_response_id",
    "prompt": "prompt templates are not supported",
    "background_options": "background_options are not supported",
    "context_management": "context_management is not supported",
    "moderation": "moderation is not supported",
    "image": "image options are not supported",
    "access_programs": "access_programs are not supported",
    "prompt_cache_options": "prompt_cache_options are not supported",
}


class CreateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A validated create request, in domain terms."""

    model: str
    input: list[InputItem]
    instructions: str | None
    previous_response_id: str | None
    tools: list[FunctionTool]
    tool_choice: ToolChoice
    parallel_tool_calls: bool
    max_output_tokens: int | None
    max_tool_calls: int | None
    temperature: float | None
    top_p: float | None
    top_logprobs: int | None
    reasoning: ReasoningConfig
    text: TextConfig
    metadata: dict[str, str]
    user: str | None
    safety_identifier: str | None
    prompt_cache_key: str | None
    store: bool
    stream: bool
    background: bool
    include: list[str]
    truncation: Literal["auto", "disabled"]
    service_tier: str
    extra: dict[str, Any]


class ErrorDetail(msgspec.Struct, frozen=True):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(msgspec.Struct, frozen=True):
    """OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""

    error: ErrorDetail


MAX_MODEL_CHARS = 256
_PATH = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_json = msgspec.json.Decoder()


def _path_param(message: str) -> tuple[str, str | None]:
    match = _PATH.search(message)
    if not match:
        return message, None
    return message[: match.start()], match.group("path") or None


def parse_create_body(body: bytes, limits: Limits) -> CreateRequest:
    """Decode and validate a create body; raises `InvalidRequest` with OpenAI's param."""
    try:
        raw = _json.decode(body)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(raw, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    for name, why in UNSUPPORTED_FIELDS.items():
        if name in raw and raw[name] is not None:
            raise InvalidRequest(
                f"Unsupported parameter: '{name}': {why}.", param=name, code="unsupported_parameter"
            )
    _pre_check_tools(raw.get("tools"))
    try:
        parsed = msgspec.convert(raw, CreateResponseBody)
    except msgspec.ValidationError as exc:
        raise _validation_error(str(exc)) from exc
    return _to_request(parsed, limits)


def _validation_error(message: str) -> InvalidRequest:
    text, param = _path_param(message)
    unknown = re.match(r"Object contains unknown field `(?P<f>[^`]+)`", text)
    if unknown:
        field = f"{param}.{unknown['f']}" if param else unknown["f"]
        return InvalidRequest(
            f"Unknown parameter: '{field}'.", param=field, code="unknown_parameter"
        )
    missing = re.match(r"Object missing required field `(?P<f>[^`]+)`", text)
    if missing:
        field = f"{param}.{missing['f']}" if param else missing["f"]
        return InvalidRequest(
            f"Missing required parameter: '{field}'.",
            param=field,
            code="missing_required_parameter",
        )
    return InvalidRequest(
        f"Invalid value for '{param}': {text}." if param else text,
        param=param,
        code="invalid_value",
    )


def _pre_check_tools(tools: object) -> None:
    if not isinstance(tools, list):
        return
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind != "function":
            raise InvalidRequest(
                f"Unsupported tool type '{kind}' at tools[{i}]: resplog supports function tools.",
                param=f"tools[{i}].type",
                code="unsupported_parameter",
            )


def _check_range(name: str, value: float | None, low: float, high: float) -> None:
    if value is not None and not low <= value <= high:
        raise InvalidRequest(
            f"Invalid '{name}': {value} is out of range; it must be between {low} and {high}.",
            param=name,
            code="invalid_value",
        )


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
    background, store = bool(p.background), p.store is not False
    if background and not store:
        raise InvalidRequest(
            "Background responses require store=true.", param="background", code="invalid_value"
        )
    _check_range("temperature", p.temperature, 0, 2)
    _check_range("top_p", p.top_p, 0, 1)
    _check_range("top_logprobs", p.top_logprobs, 0, 20)
    if p.max_output_tokens is not None:
        _check_range("max_output_tokens", p.max_output_tokens, 16, limits.max_output_tokens)
    if p.max_tool_calls is not None:
        _check_range("max_tool_calls", p.max_tool_calls, 1, 1024)
    _check_text("instructions", p.instructions, limits)
    tools = _tools(p.tools or [], limits)
    return CreateRequest(
        model=p.model,
        input=normalize_input(p.input, limits),
        instructions=p.instructions,
        previous_response_id=p.previous_response_id,
        tools=tools,
        tool_choice=_tool_choice(p.tool_choice, tools),
        parallel_tool_calls=p.parallel_tool_calls is not False,
        max_output_tokens=p.max_output_tokens,
        max_tool_calls=p.max_tool_calls,
        temperature=p.temperature,
        top_p=p.top_p,
        top_logprobs=p.top_logprobs,
        reasoning=_reasoning(p.reasoning),
        text=_text(p.text),
        metadata=_metadata(p.metadata, limits),
        user=_short("user", p.user),
        safety_identifier=_short("safety_identifier", p.safety_identifier),
        prompt_cache_key=_short("prompt_cache_key", p.prompt_cache_key),
        store=store,
        stream=bool(p.stream),
        background=background,
        include=list(p.include or []),
        truncation=p.truncation or "disabled",
        service_tier=p.service_tier or "default",
        extra={
            k: v
            for k, v in (
                ("stream_options", p.stream_options),
                ("prompt_cache_retention", p.prompt_cache_retention),
            )
            if v is not None
        },
    )


RESPONSE_ID = r"^resp_[A-Za-z0-9_-]{1,128}$"


def check_response_id(value: str, *, param: str = "response_id") -> str:
    if not re.fullmatch(RESPONSE_ID, value):
        raise InvalidRequest(
            f"Invalid '{param}': '{value[:80]}'. Expected an ID that begins with 'resp'.",
            param=param,
            code="invalid_value",
        )
    return value


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


def _tools(tools: list[FunctionToolParam], limits: Limits) -> list[FunctionTool]:
    if len(tools) > limits.max_tools:
        raise InvalidRequest(
            f"Too many tools: {len(tools)} (the limit is {limits.max_tools}).",
            param="tools",
            code="array_above_max_length",
        )
    seen: set[str] = set()
    out = []
    for i, t in enumerate(tools):
        if not _TOOL_NAME.match(t.name):
            raise InvalidRequest(
                f"Invalid 'tools[{i}].name': '{t.name[:80]}' must match ^[a-zA-Z0-9_-]{{1,64}}$.",
                param=f"tools[{i}].name",
                code="invalid_value",
            )
        if t.name in seen:
            raise InvalidRequest(
                f"Duplicate tool name '{t.name}' at tools[{i}].",
                param=f"tools[{i}].name",
                code="invalid_value",
            )
        seen.add(t.name)
        if (
            t.parameters is not None
            and len(msgspec.json.encode(t.parameters)) > limits.max_tool_schema_bytes
        ):
            raise InvalidRequest(
                f"Invalid 'tools[{i}].parameters': the schema is larger than "
                f"{limits.max_tool_schema_bytes} bytes.",
                param=f"tools[{i}].parameters",
                code="invalid_value",
            )
        _check_text(f"tools[{i}].description", t.description, limits)
        out.append(
            FunctionTool(
                name=t.name, description=t.description, parameters=t.parameters, strict=t.strict
            )
        )
    return out


def _tool_choice(
    choice: Literal["none", "auto", "required"]
    | ToolChoiceFunctionParam
    | ToolChoiceAllowedParam
    | None,
    tools: list[FunctionTool],
) -> ToolChoice:
    names = {t.name for t in tools}
    match choice:
        case None:
            return "auto"
        case ToolChoiceFunctionParam(name=name):
            if name not in names:
                raise InvalidRequest(
                    f"Invalid 'tool_choice': function '{name}' is not among the request's tools.",
                    param="tool_choice",
                    code="invalid_value",
                )
            return FunctionToolChoice(name=name)
        case ToolChoiceAllowedParam(mode=mode, tools=allowed):
            for j, entry in enumerate(allowed):
                if entry.get("type") != "function" or entry.get("name") not in names:
                    raise InvalidRequest(
                        f"Invalid 'tool_choice.tools[{j}]': not a function among the tools.",
                        param=f"tool_choice.tools[{j}]",
                        code="invalid_value",
                    )
            return AllowedToolsChoice(mode=mode, tools=allowed)
        case "required" if not tools:
            raise InvalidRequest(
                "tool_choice 'required' needs at least one tool.",
                param="tool_choice",
                code="invalid_value",
            )
        case _:
            return choice


def _reasoning(r: ReasoningParam | None) -> ReasoningConfig:
    if r is None:
        return ReasoningConfig()
    return ReasoningConfig(effort=r.effort, summary=r.summary or r.generate_summary)


def _text(t: TextParam | None) -> TextConfig:
    if t is None or t.format is None:
        return TextConfig(verbosity=t.verbosity if t else None)
    fmt: TextFormat
    match t.format:
        case FormatJsonSchemaParam(name=name, schema=schema, description=d, strict=s):
            fmt = FormatJsonSchema(name=name, schema=schema, description=d, strict=s)
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


def normalize_input(value: str | list[dict[str, Any]] | None, limits: Limits) -> list[InputItem]:
    """OpenAI's input forms (a string, easy messages, typed items) as domain items.

    Item ids are left empty here ("") and assigned by the use-case, which knows the
    response id; ids a client sends for items it passes back are kept.
    """
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
    return [_item(raw, f"input[{i}]", limits) for i, raw in enumerate(value)]


def _bad(param: str, message: str, code: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(f"Invalid '{param}': {message}", param=param, code=code)


def _str_field(raw: dict[str, Any], key: str, param: str, *, required: bool = True) -> str:
    value = raw.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        if value is None:
            raise InvalidRequest(
                f"Missing required parameter: '{param}.{key}'.",
                param=f"{param}.{key}",
                code="missing_required_parameter",
            )
        raise _bad(f"{param}.{key}", f"expected a string, got {type(value).__name__}.")
    return value


def _item_id(raw: dict[str, Any], param: str) -> str:
    value = raw.get("id")
    if value is None:
        return ""
    if not isinstance(value, str) or not 0 < len(value) <= 128:
        raise _bad(f"{param}.id", "expected a string of 1 to 128 characters.")
    return value


_ITEM_KEYS = {
    "message": {"type", "id", "role", "content", "status", "phase"},
    "function_call": {"type", "id", "call_id", "name", "arguments", "status"},
    "function_call_output": {"type", "id", "call_id", "output", "status"},
    "reasoning": {"type", "id", "summary", "content", "encrypted_content", "status"},
}


def _item(raw: object, param: str, limits: Limits) -> InputItem:
    if not isinstance(raw, dict):
        raise _bad(param, "expected an object.")
    kind = raw.get("type", "message" if "role" in raw else None)
    if kind not in _ITEM_KEYS:
        if kind == "item_reference":
            raise _bad(
                f"{param}.type",
                "item references are not supported; send the item.",
                "unsupported_parameter",
            )
        raise _bad(f"{param}.type", f"unsupported input item type {kind!r}.")
    extra = set(raw) - _ITEM_KEYS[kind]
    if extra:
        key = sorted(extra)[0]
        raise InvalidRequest(
            f"Unknown parameter: '{param}.{key}'.", param=f"{param}.{key}", code="unknown_parameter"
        )
    iid = _item_id(raw, param)
    if kind == "message":
        return _message(raw, param, iid, limits)
    if kind == "function_call":
        return InputFunctionCall(
            id=iid,
            call_id=_str_field(raw, "call_id", param),
            name=_str_field(raw, "name", param),
            arguments=_str_field(raw, "arguments", param),
        )
    if kind == "function_call_output":
        return FunctionCallOutput(
            id=iid,
            call_id=_str_field(raw, "call_id", param),
            output=_tool_output(raw.get("output"), f"{param}.output", limits),
        )
    return _reasoning_item(raw, param, iid)


def _message(raw: dict[str, Any], param: str, iid: str, limits: Limits) -> InputMessage:
    role = raw.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise _bad(f"{param}.role", f"{role!r} is not one of user, assistant, system, developer.")
    content = raw.get("content")
    parts: list[InputPart]
    if isinstance(content, str):
        _check_text(f"{param}.content", content, limits)
        parts = [OutputText(text=content) if role == "assistant" else InputText(text=content)]
    elif isinstance(content, list):
        parts = [_part(c, f"{param}.content[{j}]", limits) for j, c in enumerate(content)]
    else:
        raise _bad(f"{param}.content", "expected a string or an array of content parts.")
    return InputMessage(id=iid, role=role, content=parts)


def _part(raw: object, param: str, limits: Limits) -> InputPart:
    if not isinstance(raw, dict):
        raise _bad(param, "expected a content part object.")
    kind = raw.get("type")
    if kind in ("input_text", "output_text", "text"):
        text = _str_field(raw, "text", param)
        _check_text(f"{param}.text", text, limits)
        return OutputText(text=text) if kind == "output_text" else InputText(text=text)
    if kind == "refusal":
        return Refusal(refusal=_str_field(raw, "refusal", param))
    if kind in ("input_image", "input_file", "input_audio"):
        raise _bad(
            f"{param}.type",
            f"{kind} content is not supported by this server.",
            "unsupported_parameter",
        )
    raise _bad(f"{param}.type", f"unsupported content part type {kind!r}.")


def _tool_output(value: object, param: str, limits: Limits) -> str:
    if isinstance(value, str):
        _check_text(param, value, limits)
        return value
    if isinstance(value, list):
        texts = [_part(v, f"{param}[{j}]", limits) for j, v in enumerate(value)]
        return "".join(t.text for t in texts if isinstance(t, InputText | OutputText))
    raise _bad(param, "expected a string or an array of input_text parts.")


def _reasoning_item(raw: dict[str, Any], param: str, iid: str) -> InputReasoning:
    try:
        summary = msgspec.convert(raw.get("summary") or [], list[SummaryText])
        content = msgspec.convert(raw.get("content") or [], list[ReasoningText])
    except msgspec.ValidationError as exc:
        raise _bad(param, str(exc)) from exc
    enc = raw.get("encrypted_content")
    return InputReasoning(
        id=iid,
        summary=summary,
        content=content,
        encrypted_content=enc if isinstance(enc, str) else None,
    )
