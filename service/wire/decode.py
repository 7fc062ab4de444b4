"""Decoding a create body into domain objects: `parse_create_body` is the one mapping from
the wire to the domain (the token-count and compaction bodies are read as the create they
would be); every rejection is an `InvalidRequest` with OpenAI's `param` and `code`."""

from __future__ import annotations

from typing import Any

import msgspec

from domain.errors import InvalidRequest
from service.wire.body import to_request
from service.wire.context import read_context_management, take_compaction_trigger
from service.wire.create_request import CreateRequest
from service.wire.depth import check_nesting
from service.wire.limits import Limits, check_size
from service.wire.rejection import rejection
from service.wire.request import CreateResponseBody
from service.wire.set_aside import SET_ASIDE, set_aside_items
from service.wire.tags import tag_easy_messages, wrap_hosted, wrap_set_aside
from service.wire.unsupported import (
    IGNORED_FIELDS,
    check_moderation,
    refuse_unsupported,
    take_defaults_only,
)

_json = msgspec.json.Decoder()


def parse_create_body(body: bytes, limits: Limits) -> CreateRequest:
    """Decode and validate a create body; raises `InvalidRequest` with OpenAI's param."""
    return _parse(read_object(body, limits), limits)


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
    raw = read_object(body, limits)
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
    raw = read_object(body, limits)
    for name in list(raw):
        if name in COMPACT_IGNORED:
            del raw[name]
        elif name not in COMPACT_FIELDS:
            raise InvalidRequest(
                f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter"
            )
    return _parse(raw, limits)


def read_object(body: bytes, limits: Limits) -> dict[str, Any]:
    """The body as a JSON object, its nesting bounded before anything decodes it."""
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
    refuse_unsupported(raw)
    check_moderation(raw.get("moderation"))
    ignored = {k: raw.pop(k) for k in IGNORED_FIELDS if raw.get(k) is not None}
    ignored |= take_defaults_only(raw)
    acted = {
        **take_compaction_trigger(raw),
        **read_context_management(raw.pop("context_management", None)),
    }
    raw = wrap_set_aside(wrap_hosted(tag_easy_messages(raw)))
    try:
        parsed = msgspec.convert(raw, CreateResponseBody)
    except msgspec.ValidationError as exc:
        raise rejection(exc, raw) from exc
    req = to_request(parsed, limits)
    aside = set_aside_items(parsed.input)
    if aside:  # kept for `input_items` and the audit; never given to an engine
        req = msgspec.structs.replace(req, extra={**req.extra, SET_ASIDE: aside})
    if acted:  # service/prompts/compaction.py acts on them; the facts keep them
        check_size("context_management", acted.get("context_management"), limits)
        req = msgspec.structs.replace(req, extra={**req.extra, **acted})
    if ignored:
        for name, value in ignored.items():
            check_size(name, value, limits)
        req = msgspec.structs.replace(req, extra={**req.extra, "ignored": ignored})
    return req
