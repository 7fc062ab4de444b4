"""Everything the installed `openai` SDK can send decodes: each field of its create,
count, compact, WebSocket `response.create` and conversation params, and each alternative
inside them (every input item and tool type, every literal value), built from the SDK's own
TypedDicts. What is refused is refused for one of the reasons the docs give (`REFUSALS`),
never because a shape is new to this server. A new SDK release that adds a shape fails here
until it is served or set aside.
"""

from __future__ import annotations

import collections.abc as cabc
import json
import re
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin

import msgspec
import pytest
from openai.types.conversations import conversation_create_params, item_create_params
from openai.types.responses import (
    input_token_count_params,
    response_compact_params,
    response_create_params,
    responses_client_event_param,
)
from typing_extensions import is_typeddict

from adapters.http.sockets import _create_of
from domain.errors import InvalidRequest
from service.settings import Settings
from service.wire.conversations import parse_add_items, parse_create_conversation
from service.wire.decode import parse_compact_body, parse_create_body, parse_input_tokens_body
from service.wire.limits import Limits

# The refusals the docs give (docs/api.md, "Refused with 400"; docs/mcp.md;
# docs/conversations.md), as the start of their messages.
REFUSALS = {
    "image context compression; an access program but the standard one": (
        r"Unsupported value for '(image\.context_compression|access_programs\.cyber)'"
    ),
    "no Files API (a file_id)": r"Invalid '[^']*file_id': this server has no Files API",
    "MCP servers by server_url only (connectors)": r"Unsupported MCP server at ",
    "a tool_choice naming a tool the request does not have": r".*among the request's tools",
    "tool_choice 'required' without tools": r"tool_choice 'required' needs at least one tool",
    "an item reference in a conversation": r"Invalid 'items\[0\]': an item reference cannot",
    "Codex's compaction trigger, which is no item, in a conversation": (
        r"Invalid value for 'items\[0\]\.type': Invalid value 'compaction_trigger'"
    ),
}
# A string field that must look like an id to be read at all.
IDS = {"conversation": "conv_0123456789", "previous_response_id": "resp_0123456789"}
SEQUENCES = (list, cabc.Iterable, cabc.Sequence)  # what `get_origin` gives for each spelling
MAPPINGS = (dict, cabc.Mapping)


def _unwrapped(t: Any) -> Any:
    while get_origin(t) in (Required, NotRequired, typing.Annotated):
        t = get_args(t)[0]
    return t


def _alternatives(t: Any) -> list[Any]:
    """Each type a value of `t` may take (one `Literal` per value; `None` left out)."""
    t = _unwrapped(t)
    if get_origin(t) in (Union, types.UnionType):
        return [a for arg in get_args(t) if arg is not type(None) for a in _alternatives(arg)]
    if get_origin(t) is Literal:
        return [Literal[v] for v in get_args(t)]
    return [t]


def variants(t: Any, depth: int = 0) -> list[Any]:
    """Values of `t` that between them take every alternative at every level: for a
    TypedDict, every key filled (the first variant of each), then one key at a time set to
    each of its other variants."""
    out: list[Any] = []
    for alt in _alternatives(t):
        if get_origin(alt) is Literal:
            out.append(get_args(alt)[0])
        elif is_typeddict(alt):
            out += _dict_variants(alt, depth) if depth < 8 else []
        elif get_origin(alt) in SEQUENCES:
            inner = variants(get_args(alt)[0], depth + 1) if depth < 8 else []
            out += [[v] for v in inner] or [[]]
        elif get_origin(alt) in MAPPINGS or alt in (dict, object):
            out.append({})
        else:
            out.append({str: "x", int: 16, float: 0.5, bool: False}.get(alt))
    return out


def _dict_variants(td: Any, depth: int) -> list[dict[str, Any]]:
    per_key = {
        key: variants(hint, depth + 1)
        for key, hint in typing.get_type_hints(td, include_extras=True).items()
    }
    full = {key: IDS.get(key, vs[0]) for key, vs in per_key.items() if vs}
    return [full] + [{**full, key: v} for key, vs in per_key.items() for v in vs[1:]]


Parse = Callable[[bytes], object]
LIMITS = Limits()
SURFACES: dict[str, tuple[Any, Parse, dict[str, Any]]] = {
    "responses.create": (
        response_create_params.ResponseCreateParamsStreaming,
        lambda b: parse_create_body(b, LIMITS),
        {"model": "m", "input": "hi"},
    ),
    "responses.input_tokens.count": (
        input_token_count_params.InputTokenCountParams,
        lambda b: parse_input_tokens_body(b, LIMITS, "m"),
        {"model": "m", "input": "hi"},
    ),
    "responses.compact": (
        response_compact_params.ResponseCompactParams,
        lambda b: parse_compact_body(b, LIMITS),
        {"model": "m", "input": "hi"},
    ),
    "responses.connect: response.create": (
        responses_client_event_param.ResponseCreate,
        lambda b: _create_of(msgspec.json.decode(b), Settings()),
        {"type": "response.create", "model": "m", "input": "hi"},
    ),
    "conversations.create": (
        conversation_create_params.ConversationCreateParams,
        lambda b: parse_create_conversation(b, LIMITS),
        {},
    ),
    "conversations.items.create": (
        item_create_params.ItemCreateParams,
        lambda b: parse_add_items(b, LIMITS),
        {"items": []},
    ),
}
# Query parameters of the items call, not its body.
QUERY = {"conversations.items.create": {"include"}}


def bodies(surface: str) -> Iterator[tuple[str, Any, bytes]]:
    params, _, base = SURFACES[surface]
    for key, hint in typing.get_type_hints(params, include_extras=True).items():
        if key in QUERY.get(surface, set()) or key == "stream":
            continue
        for value in [IDS[key]] if key in IDS else variants(hint):
            yield key, value, msgspec.json.encode({**base, key: value})


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_every_shape_the_sdk_sends_is_taken_or_refused_for_a_documented_reason(
    surface: str,
) -> None:
    parse = SURFACES[surface][1]
    tried, refused = 0, []
    for key, value, body in bodies(surface):
        tried += 1
        try:
            parse(body)
        except InvalidRequest as exc:
            if not any(re.match(r, exc.message) for r in REFUSALS.values()):
                refused.append(f"{key}={msgspec.json.encode(value)[:200]!r}: {exc.message}")
    assert tried > 2, "the SDK's params gave no shapes to try"
    assert not refused, "\n".join(refused)


def test_the_sweep_reaches_every_input_item_and_tool_type() -> None:
    """The variants do reach into the unions: every input item type and tool type of the
    SDK is among the create bodies tried."""
    sent = [
        msgspec.json.decode(b) for k, _, b in bodies("responses.create") if k in ("input", "tools")
    ]
    items = {
        i.get("type") for s in sent for i in s.get("input", []) if isinstance(s["input"], list)
    }
    tools = {t.get("type") for s in sent for t in s.get("tools", [])}
    assert {"function_call_output", "web_search_call", "mcp_call", "program_output"} <= items
    assert {"function", "mcp", "namespace", "apply_patch", "shell"} <= tools


# --- the Open Responses spec's request body (tests/fixtures/openresponses/request.json) ------

SPEC = json.loads((Path(__file__).parents[1] / "fixtures/openresponses/request.json").read_text())
SCHEMAS: dict[str, Any] = SPEC["components"]["schemas"]


def _resolved(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SCHEMAS[schema["$ref"].rpartition("/")[2]]
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(_resolved(part))
        schema = {**merged, **{k: v for k, v in schema.items() if k != "allOf"}}
    return schema


def spec_variants(schema: dict[str, Any], depth: int = 0) -> list[Any]:
    """`variants` for a JSON schema: every `anyOf`/`oneOf` branch, every enum value."""
    schema = _resolved(schema)
    if depth > 9:
        return []
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [v for branch in schema[key] for v in spec_variants(branch, depth + 1)]
    if "enum" in schema:
        return list(schema["enum"])
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        per_key = {k: spec_variants(v, depth + 1) for k, v in schema.get("properties", {}).items()}
        full = {key: vs[0] for key, vs in per_key.items() if vs}
        return [full] + [{**full, key: v} for key, vs in per_key.items() for v in vs[1:]]
    if kind == "array":
        return [[v] for v in spec_variants(schema.get("items", {}), depth + 1)] or [[]]
    return {"string": ["x"], "integer": [16], "number": [0.5], "boolean": [False]}.get(
        str(kind), [] if kind == "null" else [{}]
    )


def test_every_shape_the_open_responses_spec_allows_is_taken_or_refused_for_a_reason() -> None:
    """The other contract: every field of the spec's `CreateResponseBody`, and every
    alternative inside it, decodes, or is refused for a documented reason (REFUSALS; an
    image or file part with no data, which the spec leaves optional; video, which no
    engine here can see)."""
    spec_refusals = [
        *REFUSALS.values(),
        r"Invalid '[^']*\.(image_url|file_data)': expected a data URL",
        r"Invalid '[^']*\.type': input_video content is not supported",
    ]
    body = _resolved(SPEC["request_body"])
    tried, refused = 0, []
    for key, schema in body["properties"].items():
        values = [IDS[key]] if key in IDS else spec_variants(schema)
        for value in values if key != "stream" else []:
            tried += 1
            try:
                parse_create_body(
                    msgspec.json.encode({"model": "m", "input": "hi", key: value}), LIMITS
                )
            except InvalidRequest as exc:
                if not any(re.match(r, exc.message) for r in spec_refusals):
                    refused.append(f"{key}={msgspec.json.encode(value)[:200]!r}: {exc.message}")
    assert tried > 50, tried
    assert not refused, "\n".join(refused)
