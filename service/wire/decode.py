"""Decoding a create body into domain objects: `parse_create_body` is the one mapping from
the wire to the domain, and every rejection it makes is an `InvalidRequest` carrying
OpenAI's `param` and `code`; nothing is written for a rejected request.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec import UNSET

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
    Refusal,
    ResponseObject,
    TextConfig,
    TextFormat,
    ToolChoice,
)
from service.wire.depth import check_nesting
from service.wire.rejection import rejection
from service.wire.request import (
    ContentPartParam,
    CreateResponseBody,
    FormatJsonObjectParam,
    FormatJsonSchemaParam,
    FunctionCallOutputParam,
    FunctionCallParam,
    FunctionToolParam,
    InputItemParam,
    MessageParam,
    OutputTextParam,
    ReasoningItemParam,
    ReasoningParam,
    RefusalParam,
    TextParam,
    ToolChoiceAllowedParam,
    ToolChoiceFunctionParam,
    ToolChoiceParam,
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


class CreateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A validated create request in domain terms: the response it starts (its id and
    creation time are left for the use-case to give) and what the response does not echo.

    Input item ids are "" unless the client sent one; the use-case, which knows the
    response id, assigns the others.
    """

    response: ResponseObject
    input: list[InputItem]
    stream: bool
    include: list[str]
    extra: dict[str, Any]  # parameters kept verbatim for audit (e.g. `stream_options`)

    @property
    def background(self) -> bool:
        return self.response.background


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
MAX_MODEL_CHARS = 256
RESPONSE_ID = r"^resp_[A-Za-z0-9_-]{1,128}$"
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_json = msgspec.json.Decoder()


def parse_create_body(body: bytes, limits: Limits) -> CreateRequest:
    """Decode and validate a create body; raises `InvalidRequest` with OpenAI's param."""
    check_nesting(body, limits.max_json_depth)
    try:
        raw = _json.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise InvalidRequest(
            f"We could not parse the JSON body of your request: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(raw, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    _refuse_unsupported(raw)
    raw = _tag_easy_messages(raw)
    try:
        parsed = msgspec.convert(raw, CreateResponseBody)
    except msgspec.ValidationError as exc:
        raise rejection(exc, raw) from exc
    return _to_request(parsed, limits)


def _refuse_unsupported(raw: dict[str, Any]) -> None:
    """OpenAI fields and tool kinds resplog lacks get a 400 saying so, not "unknown"."""
    for name, why in UNSUPPORTED_FIELDS.items():
        if name in raw and raw[name] is not None:
            raise InvalidRequest(
                f"Unsupported parameter: '{name}': {why}.", param=name, code="unsupported_parameter"
            )
    tools = raw.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind != "function":
            raise InvalidRequest(
                f"Unsupported tool type '{kind}' at tools[{i}]: resplog supports function tools.",
                param=f"tools[{i}].type",
                code="unsupported_parameter",
            )


def _tag_easy_messages(raw: dict[str, Any]) -> dict[str, Any]:
    """Give `type: "message"` to input items that have a `role` and no `type`.

    OpenAI lets a message omit its type (openai-python `EasyInputMessageParam`), but a
    msgspec tagged union needs the tag to pick a Struct, so it is filled in here; nothing
    else is touched, and msgspec does all the validating.
    """
    items = raw.get("input")
    if not isinstance(items, list):
        return raw
    tagged = [
        {"type": "message", **item}
        if isinstance(item, dict) and "type" not in item and "role" in item
        else item
        for item in items
    ]
    return {**raw, "input": tagged}


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
        truncation=p.truncation or "disabled",
    )
    return CreateRequest(
        response=response,
        input=items,
        stream=bool(p.stream),
        include=list(p.include or []),
        extra={
            k: v
            for k, v in (
                ("stream_options", p.stream_options),
                ("prompt_cache_retention", p.prompt_cache_retention),
            )
            if v is not None
        },
    )


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
        _check_size(f"tools[{i}].parameters", t.parameters, limits)
        _check_text(f"tools[{i}].description", t.description, limits)
        out.append(
            FunctionTool(
                name=t.name, description=t.description, parameters=t.parameters, strict=t.strict
            )
        )
    return out


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
    choice: ToolChoiceParam | None, tools: list[FunctionTool], limits: Limits
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
            _check_size("tool_choice.tools", allowed, limits)
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


def _input(value: str | list[InputItemParam] | None, limits: Limits) -> list[InputItem]:
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
    items = [_item(item, f"input[{i}]", limits) for i, item in enumerate(value)]
    _refuse_duplicate_ids(items)
    return items


def _refuse_duplicate_ids(items: list[InputItem]) -> None:
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


def _item(item: InputItemParam, param: str, limits: Limits) -> InputItem:
    iid = item.id or ""
    match item:
        case MessageParam(role=role, content=str() as text, phase=phase):
            _check_text(f"{param}.content", text, limits)
            part = OutputText(text=text) if role == "assistant" else InputText(text=text)
            return InputMessage(id=iid, role=role, content=[part], phase=phase)
        case MessageParam(role=role, content=list() as parts, phase=phase):
            content = [_part(c, f"{param}.content[{j}]", limits) for j, c in enumerate(parts)]
            return InputMessage(id=iid, role=role, content=content, phase=phase)
        case FunctionCallParam(call_id=call_id, name=name, arguments=arguments):
            return InputFunctionCall(id=iid, call_id=call_id, name=name, arguments=arguments)
        case FunctionCallOutputParam(call_id=call_id, output=output):
            text = _tool_output(output, f"{param}.output", limits)
            return FunctionCallOutput(id=iid, call_id=call_id, output=text)
        case ReasoningItemParam(summary=summary, content=content, encrypted_content=enc):
            return InputReasoning(
                id=iid,
                summary=summary or [],
                content=content or [],
                encrypted_content=enc if isinstance(enc, str) else UNSET,
            )
    raise AssertionError(f"unhandled input item {type(item).__name__}")


def _part(part: ContentPartParam, param: str, limits: Limits) -> InputPart:
    if isinstance(part, RefusalParam):
        return Refusal(refusal=part.refusal)
    _check_text(f"{param}.text", part.text, limits)
    return (
        OutputText(text=part.text)
        if isinstance(part, OutputTextParam)
        else InputText(text=part.text)
    )


def _tool_output(value: str | list[ContentPartParam], param: str, limits: Limits) -> str:
    if isinstance(value, str):
        _check_text(param, value, limits)
        return value
    parts = [_part(v, f"{param}[{j}]", limits) for j, v in enumerate(value)]
    return "".join(p.text for p in parts if isinstance(p, InputText | OutputText))
