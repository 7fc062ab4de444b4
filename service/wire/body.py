"""A create body's top-level fields as the `CreateRequest` they make: the response it
starts (model, sampling, limits, store, conversation, metadata) and its input and tools."""

from __future__ import annotations

import msgspec

from domain.errors import InvalidRequest
from domain.objects import ConversationRef, ResponseObject
from service.wire.create_request import CreateRequest
from service.wire.extras import extra_facts
from service.wire.ids import check_conversation_id, check_response_id
from service.wire.items import read_input
from service.wire.limits import Limits, check_text, short
from service.wire.prompt import read_prompt
from service.wire.request import ConversationParam, CreateResponseBody
from service.wire.text import read_reasoning, read_text
from service.wire.tool_choice import read_tool_choice
from service.wire.tools import mcp_secrets, read_tools

MAX_MODEL_CHARS = 256


def to_request(p: CreateResponseBody, limits: Limits) -> CreateRequest:
    """The decoded body as the `CreateRequest` it makes, each top-level field checked."""
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
    if p.input is None and p.previous_response_id is None and p.prompt is None:
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
    check_text("instructions", p.instructions, limits)
    tools = read_tools(p.tools or [], limits)
    items = read_input(p.input, limits)
    prompt = read_prompt(p.prompt, limits)
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
        tool_choice=read_tool_choice(p.tool_choice, tools, limits),
        reasoning=read_reasoning(p.reasoning),
        text=read_text(p.text, limits),
        metadata=read_metadata(p.metadata, limits),
        user=short("user", p.user),
        safety_identifier=short("safety_identifier", p.safety_identifier),
        prompt_cache_key=short("prompt_cache_key", p.prompt_cache_key),
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
        # Its template's version, instructions and messages are read into the request
        # before it is recorded (service/prompts/template.py).
        prompt=msgspec.UNSET if prompt is None else prompt,
    )
    return CreateRequest(
        response=response,
        input=items,
        stream=bool(p.stream),
        include=list(p.include or []),
        extra=extra_facts(p, tools, limits),
        secrets=mcp_secrets(p.tools or []),
    )


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


def _check_range(name: str, value: float | None, low: float, high: float) -> None:
    if value is not None and not low <= value <= high:
        raise InvalidRequest(
            f"Invalid '{name}': {value} is out of range; it must be between {low} and {high}.",
            param=name,
            code="invalid_value",
        )


def read_metadata(meta: dict[str, str] | None, limits: Limits) -> dict[str, str]:
    """`metadata` bounded by the configured number and lengths of its pairs."""
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
