"""Strict decoding of create requests into domain terms, with OpenAI's error params."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from domain.errors import InvalidRequest
from domain.objects import (
    FunctionCallOutput,
    FunctionToolChoice,
    InputFunctionCall,
    InputMessage,
    InputReasoning,
    InputText,
    OutputText,
    ReasoningText,
    Refusal,
    SummaryText,
    TextConfig,
)
from service.wire.decode import parse_create_body
from service.wire.limits import Limits
from service.wire.schema import create_body_components
from service.wire.set_aside import SET_ASIDE_TYPES


def parse(body: dict[str, Any] | bytes, limits: Limits | None = None) -> Any:
    raw = body if isinstance(body, bytes) else msgspec.json.encode(body)
    return parse_create_body(raw, limits or Limits())


def rejected(body: dict[str, Any] | bytes, limits: Limits | None = None) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse(body, limits)
    return info.value


def test_a_string_input_becomes_one_user_message() -> None:
    req = parse({"model": "m", "input": "hi"})
    assert req.input == [InputMessage(id="", role="user", content=[InputText(text="hi")])]
    r = req.response
    assert (r.store, req.stream, r.background, r.tool_choice) == (True, False, False, "auto")


def test_easy_messages_typed_items_and_tool_outputs_are_normalized() -> None:
    req = parse(
        {
            "model": "m",
            "input": [
                {"role": "assistant", "content": "earlier answer"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "q"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ],
        }
    )
    assert req.input[0].content == [OutputText(text="earlier answer")]
    assert isinstance(req.input[2], InputFunctionCall)
    assert req.input[3] == FunctionCallOutput(id="", call_id="c1", output="42")


BIG = "x" * (Limits().max_text_chars + 1)


def item(**fields: Any) -> dict[str, Any]:
    return {"input": [fields]}


def msg(content: Any, **fields: Any) -> dict[str, Any]:
    return {"input": [{"role": "user", "content": content, **fields}]}


# Every kind of bad input with the exact 400 it gets: (case, body, param, code, message).
# A body is merged over {"model": "m", "input": "x"}; a top-level None there drops the key.
# These were recorded from the hand-written decoder before the tagged-union rewrite, so the
# rewrite is pinned to answer each of them word for word.
BAD: list[tuple[str, dict[str, Any] | bytes, str | None, str, str]] = [
    (
        "invalid_json",
        b"{nope",
        None,
        "invalid_json",
        "We could not parse the JSON body of your request: "
        "JSON is malformed: object keys must be strings (byte 1)",
    ),
    ("body_not_object", b"[1, 2]", None, "invalid_json", "The request body must be a JSON object."),
    (
        "prompt_without_id",
        {"prompt": {"version": "1"}},
        "prompt.id",
        "missing_required_parameter",
        "Missing required parameter: 'prompt.id'.",
    ),
    (
        "conversation_and_previous_response",
        {"conversation": "conv_1", "previous_response_id": "resp_1"},
        "conversation",
        "mutually_exclusive_parameters",
        "Mutually exclusive parameters: Ensure you are only providing one of: "
        "'previous_response_id' or 'conversation'.",
    ),
    (
        "conversation_bad_id",
        {"conversation": {"id": "resp_1"}},
        "conversation",
        "invalid_value",
        "Invalid 'conversation': 'resp_1'. Expected an ID that begins with 'conv'.",
    ),
    (
        "prompt_variable_file_id",
        {"prompt": {"id": "pmpt_1", "variables": {"doc": {"type": "input_file", "file_id": "f"}}}},
        "prompt.variables.doc.file_id",
        "unsupported_parameter",
        "Invalid 'prompt.variables.doc.file_id': this server has no Files API; send the bytes "
        "inline (a data URL in image_url or file_data).",
    ),
    (
        "image_compression_required",
        {"image": {"context_compression": "enabled"}},
        "image.context_compression",
        "unsupported_value",
        "Unsupported value for 'image.context_compression': 'enabled'; this server does not "
        "compress image context.",
    ),
    (
        "image_unknown_option",
        {"image": {"quality": "high"}},
        "image.quality",
        "unknown_parameter",
        "Unknown parameter: 'image.quality'.",
    ),
    (
        "access_program_daybreak",
        {"access_programs": {"cyber": "daybreak_red"}},
        "access_programs.cyber",
        "unsupported_value",
        "Unsupported value for 'access_programs.cyber': 'daybreak_red'; this server has no "
        "access program but the standard one.",
    ),
    (
        "access_programs_not_object",
        {"access_programs": "x"},
        "access_programs",
        "invalid_type",
        "Invalid 'access_programs': expected an object.",
    ),
    ("unknown_field", {"bogus": 1}, "bogus", "unknown_parameter", "Unknown parameter: 'bogus'."),
    (
        "unknown_nested_field",
        {"text": {"format": {"type": "text"}, "zz": 1}},
        "text.zz",
        "unknown_parameter",
        "Unknown parameter: 'text.zz'.",
    ),
    (
        "unknown_reasoning_field",
        {"reasoning": {"effort": "low", "zz": 1}},
        "reasoning.zz",
        "unknown_parameter",
        "Unknown parameter: 'reasoning.zz'.",
    ),
    (
        "missing_model",
        {"model": None},
        "model",
        "missing_required_parameter",
        "Missing required parameter: 'model'.",
    ),
    (
        "empty_model",
        {"model": ""},
        "model",
        "missing_required_parameter",
        "Missing required parameter: 'model'.",
    ),
    (
        "model_wrong_type",
        {"model": 5},
        "model",
        "invalid_value",
        "Invalid value for 'model': Expected `str`, got `int`.",
    ),
    (
        "model_nul",
        {"model": "gpt\u0000oss"},
        "model",
        "invalid_value",
        "Invalid 'model': at most 256 printable characters.",
    ),
    (
        "model_too_long",
        {"model": "m" * 257},
        "model",
        "invalid_value",
        "Invalid 'model': at most 256 printable characters.",
    ),
    (
        "missing_input",
        {"input": None},
        "input",
        "missing_required_parameter",
        "Missing required parameter: 'input'.",
    ),
    (
        "input_wrong_type",
        {"input": 5},
        "input",
        "invalid_value",
        "Invalid value for 'input': Expected `str | array | null`, got `int`.",
    ),
    (
        "temperature_wrong_type",
        {"temperature": "hot"},
        "temperature",
        "invalid_value",
        "Invalid value for 'temperature': Expected `float | null`, got `str`.",
    ),
    (
        "stream_wrong_type",
        {"stream": "true"},
        "stream",
        "invalid_value",
        "Invalid value for 'stream': Expected `bool | null`, got `str`.",
    ),
    (
        "max_output_tokens_float",
        {"max_output_tokens": 1.5},
        "max_output_tokens",
        "invalid_value",
        "Invalid value for 'max_output_tokens': Expected `int | null`, got `float`.",
    ),
    (
        "truncation_bad_literal",
        {"truncation": "sometimes"},
        "truncation",
        "invalid_value",
        "Invalid value for 'truncation': Invalid enum value 'sometimes'.",
    ),
    (
        "service_tier_bad_literal",
        {"service_tier": "gold"},
        "service_tier",
        "invalid_value",
        "Invalid value for 'service_tier': Invalid enum value 'gold'.",
    ),
    (
        "include_wrong_type",
        {"include": "x"},
        "include",
        "invalid_value",
        "Invalid value for 'include': Expected `array | null`, got `str`.",
    ),
    (
        "temperature_out_of_range",
        {"temperature": 3},
        "temperature",
        "invalid_value",
        "Invalid 'temperature': 3.0 is out of range; it must be between 0 and 2.",
    ),
    (
        "top_p_out_of_range",
        {"top_p": -0.5},
        "top_p",
        "invalid_value",
        "Invalid 'top_p': -0.5 is out of range; it must be between 0 and 1.",
    ),
    (
        "top_logprobs_out_of_range",
        {"top_logprobs": 21},
        "top_logprobs",
        "invalid_value",
        "Invalid 'top_logprobs': 21 is out of range; it must be between 0 and 20.",
    ),
    (
        "max_output_tokens_above_limit",
        {"max_output_tokens": 10**9},
        "max_output_tokens",
        "invalid_value",
        "Invalid 'max_output_tokens': 1000000000 is out of range; "
        "it must be between 16 and 131072.",
    ),
    (
        "max_output_tokens_below_16",
        {"max_output_tokens": 1},
        "max_output_tokens",
        "invalid_value",
        "Invalid 'max_output_tokens': 1 is out of range; it must be between 16 and 131072.",
    ),
    (
        "max_tool_calls_zero",
        {"max_tool_calls": 0},
        "max_tool_calls",
        "invalid_value",
        "Invalid 'max_tool_calls': 0 is out of range; it must be between 1 and 1024.",
    ),
    (
        "background_without_store",
        {"background": True, "store": False},
        "background",
        "invalid_value",
        "Background responses require store=true.",
    ),
    (
        "previous_response_id_bad",
        {"previous_response_id": "abc"},
        "previous_response_id",
        "invalid_value",
        "Invalid 'previous_response_id': 'abc'. Expected an ID that begins with 'resp'.",
    ),
    (
        "instructions_too_long",
        {"instructions": BIG},
        "instructions",
        "string_above_max_length",
        "Invalid 'instructions': string too long (1048577 characters; the limit is 1048576).",
    ),
    (
        "input_string_too_long",
        {"input": BIG},
        "input",
        "string_above_max_length",
        "Invalid 'input': string too long (1048577 characters; the limit is 1048576).",
    ),
    (
        "user_too_long",
        {"user": "u" * 513},
        "user",
        "string_above_max_length",
        "Invalid 'user': string too long (max 512 characters).",
    ),
    (
        "safety_identifier_too_long",
        {"safety_identifier": "u" * 513},
        "safety_identifier",
        "string_above_max_length",
        "Invalid 'safety_identifier': string too long (max 512 characters).",
    ),
    (
        "prompt_cache_key_too_long",
        {"prompt_cache_key": "k" * 513},
        "prompt_cache_key",
        "string_above_max_length",
        "Invalid 'prompt_cache_key': string too long (max 512 characters).",
    ),
    (
        "tool_unknown_type",
        {"tools": [{"type": "web_serch"}]},
        "tools[0].type",
        "invalid_value",
        "Invalid value for 'tools[0].type': Invalid value 'web_serch'.",
    ),
    (
        "tool_missing_type",
        {"tools": [{"name": "f"}]},
        "tools[0].type",
        "missing_required_parameter",
        "Missing required parameter: 'tools[0].type'.",
    ),
    (
        "tool_not_object",
        {"tools": [5]},
        "tools[0]",
        "invalid_value",
        "Invalid value for 'tools[0]': Expected `object`, got `int`.",
    ),
    (
        "tool_bad_name",
        {"tools": [{"type": "function", "name": "bad name"}]},
        "tools[0].name",
        "invalid_value",
        "Invalid 'tools[0].name': 'bad name' must match ^[a-zA-Z0-9_-]{1,64}$.",
    ),
    (
        "tool_missing_name",
        {"tools": [{"type": "function"}]},
        "tools[0].name",
        "missing_required_parameter",
        "Missing required parameter: 'tools[0].name'.",
    ),
    (
        "tool_unknown_field",
        {"tools": [{"type": "function", "name": "f", "zz": 1}]},
        "tools[0].zz",
        "unknown_parameter",
        "Unknown parameter: 'tools[0].zz'.",
    ),
    (
        "tool_duplicate_name",
        {"tools": [{"type": "function", "name": "f"}] * 2},
        "tools[1].name",
        "invalid_value",
        "Duplicate tool name 'f' at tools[1].",
    ),
    (
        "tool_schema_too_large",
        {"tools": [{"type": "function", "name": "f", "parameters": {"d": "x" * 70000}}]},
        "tools[0].parameters",
        "invalid_value",
        "Invalid 'tools[0].parameters': larger than 65536 bytes.",
    ),
    (
        "text_format_schema_too_large",
        {"text": {"format": {"type": "json_schema", "name": "s", "schema": {"d": "x" * 70000}}}},
        "text.format.schema",
        "invalid_value",
        "Invalid 'text.format.schema': larger than 65536 bytes.",
    ),
    (
        "allowed_tools_too_large",
        {
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "auto",
                "tools": [{"type": "function", "name": "f", "pad": "x" * 70000}],
            },
        },
        "tool_choice.tools",
        "invalid_value",
        "Invalid 'tool_choice.tools': larger than 65536 bytes.",
    ),
    (
        "tool_description_too_long",
        {"tools": [{"type": "function", "name": "f", "description": BIG}]},
        "tools[0].description",
        "string_above_max_length",
        "Invalid 'tools[0].description': "
        "string too long (1048577 characters; the limit is 1048576).",
    ),
    (
        "too_many_tools",
        {"tools": [{"type": "function", "name": f"f{i}"} for i in range(129)]},
        "tools",
        "array_above_max_length",
        "Too many tools: 129 (the limit is 128).",
    ),
    (
        "tool_choice_bad_string",
        {"tool_choice": "sometimes"},
        "tool_choice",
        "invalid_value",
        "Invalid value for 'tool_choice': Invalid enum value 'sometimes'.",
    ),
    (
        "tool_choice_unknown_function",
        {"tool_choice": {"type": "function", "name": "nope"}},
        "tool_choice",
        "invalid_value",
        "Invalid 'tool_choice': function 'nope' is not among the request's tools.",
    ),
    (
        "tool_choice_bad_type",
        {"tool_choice": {"type": "web_search"}},
        "tool_choice.type",
        "invalid_value",
        "Invalid value for 'tool_choice.type': Invalid value 'web_search'.",
    ),
    (
        "tool_choice_required_without_tools",
        {"tool_choice": "required"},
        "tool_choice",
        "invalid_value",
        "tool_choice 'required' needs at least one tool.",
    ),
    (
        "tool_choice_allowed_not_among_tools",
        {
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "auto",
                "tools": [{"type": "function", "name": "g"}],
            },
        },
        "tool_choice.tools[0]",
        "invalid_value",
        "Invalid 'tool_choice.tools[0]': not a tool among the request's tools.",
    ),
    (
        "text_format_bad_type",
        {"text": {"format": {"type": "xml"}}},
        "text.format.type",
        "invalid_value",
        "Invalid value for 'text.format.type': Invalid value 'xml'.",
    ),
    (
        "text_format_json_schema_missing_name",
        {"text": {"format": {"type": "json_schema", "schema": {}}}},
        "text.format.name",
        "missing_required_parameter",
        "Missing required parameter: 'text.format.name'.",
    ),
    (
        "reasoning_bad_effort",
        {"reasoning": {"effort": "maximal"}},
        "reasoning.effort",
        "invalid_value",
        "Invalid value for 'reasoning.effort': Invalid enum value 'maximal'.",
    ),
    (
        "metadata_too_many_pairs",
        {"metadata": {f"k{i}": "v" for i in range(17)}},
        "metadata",
        "object_above_max_properties",
        "Invalid 'metadata': too many pairs (17; the limit is 16).",
    ),
    (
        "metadata_key_too_long",
        {"metadata": {"k" * 65: "v"}},
        "metadata",
        "string_above_max_length",
        f"Invalid 'metadata': key '{'k' * 65}' is longer than 64 characters.",
    ),
    (
        "metadata_value_too_long",
        {"metadata": {"k": "v" * 513}},
        "metadata.k",
        "string_above_max_length",
        "Invalid 'metadata.k': value is longer than 512 characters.",
    ),
    (
        "metadata_value_not_string",
        {"metadata": {"k": 1}},
        "metadata[...]",
        "invalid_value",
        "Invalid value for 'metadata[...]': Expected `str`, got `int`.",
    ),
    (
        "too_many_input_items",
        {"input": [{"role": "user", "content": "a"}] * 4097},
        "input",
        "array_above_max_length",
        "Invalid 'input': too many items (4097; the limit is 4096).",
    ),
    (
        "item_not_object",
        {"input": [5]},
        "input[0]",
        "invalid_value",
        "Invalid value for 'input[0]': Expected `object`, got `int`.",
    ),
    (
        "item_bad_type",
        item(type="bogus"),
        "input[0].type",
        "invalid_value",
        "Invalid 'input[0].type': unsupported input item type 'bogus'.",
    ),
    (
        "item_type_not_string",
        item(type=5),
        "input[0].type",
        "invalid_value",
        "Invalid 'input[0].type': unsupported input item type 5.",
    ),
    (
        "item_type_null",
        item(type=None, role="user", content="x"),
        "input[0].type",
        "invalid_value",
        "Invalid 'input[0].type': unsupported input item type None.",
    ),
    (
        "item_without_type_or_role",
        item(content="x"),
        "input[0].type",
        "invalid_value",
        "Invalid 'input[0].type': unsupported input item type None.",
    ),
    (
        "item_reference_without_id",
        item(type="item_reference"),
        "input[0].id",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].id'.",
    ),
    (
        "item_unknown_field",
        msg("x", extra=1),
        "input[0].extra",
        "unknown_parameter",
        "Unknown parameter: 'input[0].extra'.",
    ),
    (
        "item_reference_with_an_empty_id",
        item(type="item_reference", id=""),
        "input[0].id",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].id'.",
    ),
    (
        "item_id_too_long",
        msg("x", id="i" * 129),
        "input[0].id",
        "invalid_value",
        "Invalid 'input[0].id': expected a string of 1 to 128 characters.",
    ),
    (
        "item_id_not_string",
        msg("x", id=5),
        "input[0].id",
        "invalid_value",
        "Invalid 'input[0].id': expected a string of 1 to 128 characters.",
    ),
    (
        "message_bad_role",
        item(role="robot", content="x"),
        "input[0].role",
        "invalid_value",
        "Invalid 'input[0].role': 'robot' is not one of user, assistant, system, developer.",
    ),
    (
        "message_missing_role",
        item(type="message", content="x"),
        "input[0].role",
        "invalid_value",
        "Invalid 'input[0].role': None is not one of user, assistant, system, developer.",
    ),
    (
        "message_role_not_string",
        item(type="message", role=5, content="x"),
        "input[0].role",
        "invalid_value",
        "Invalid 'input[0].role': 5 is not one of user, assistant, system, developer.",
    ),
    (
        "message_missing_content",
        item(role="user"),
        "input[0].content",
        "invalid_value",
        "Invalid 'input[0].content': expected a string or an array of content parts.",
    ),
    (
        "message_content_null",
        item(role="user", content=None),
        "input[0].content",
        "invalid_value",
        "Invalid 'input[0].content': expected a string or an array of content parts.",
    ),
    (
        "message_content_wrong_type",
        msg(5),
        "input[0].content",
        "invalid_value",
        "Invalid 'input[0].content': expected a string or an array of content parts.",
    ),
    (
        "message_content_too_long",
        msg(BIG),
        "input[0].content",
        "string_above_max_length",
        "Invalid 'input[0].content': string too long (1048577 characters; the limit is 1048576).",
    ),
    (
        "part_not_object",
        msg([5]),
        "input[0].content[0]",
        "invalid_value",
        "Invalid 'input[0].content[0]': expected a content part object.",
    ),
    (
        "part_bad_type",
        msg([{"type": "video"}]),
        "input[0].content[0].type",
        "invalid_value",
        "Invalid 'input[0].content[0].type': unsupported content part type 'video'.",
    ),
    (
        "part_missing_type",
        msg([{"text": "x"}]),
        "input[0].content[0].type",
        "invalid_value",
        "Invalid 'input[0].content[0].type': unsupported content part type None.",
    ),
    (
        "part_input_image_bad_url",
        msg([{"type": "input_image", "image_url": "ftp://x"}]),
        "input[0].content[0].image_url",
        "invalid_value",
        "Invalid 'input[0].content[0].image_url': expected a data URL "
        "(data:image/...;base64,...) or an http(s) URL.",
    ),
    (
        "part_input_file_without_data",
        msg([{"type": "input_file"}]),
        "input[0].content[0].file_data",
        "invalid_value",
        "Invalid 'input[0].content[0].file_data': expected a data URL (data:<type>;base64,...).",
    ),
    (
        "part_input_audio",
        msg([{"type": "input_audio"}]),
        "input[0].content[0].type",
        "unsupported_parameter",
        "Invalid 'input[0].content[0].type': input_audio content is not supported by this server.",
    ),
    (
        "part_missing_text",
        msg([{"type": "input_text"}]),
        "input[0].content[0].text",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].content[0].text'.",
    ),
    (
        "part_text_null",
        msg([{"type": "output_text", "text": None}]),
        "input[0].content[0].text",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].content[0].text'.",
    ),
    (
        "part_text_not_string",
        msg([{"type": "input_text", "text": 5}]),
        "input[0].content[0].text",
        "invalid_value",
        "Invalid 'input[0].content[0].text': expected a string, got int.",
    ),
    (
        "part_text_too_long",
        msg([{"type": "input_text", "text": BIG}]),
        "input[0].content[0].text",
        "string_above_max_length",
        "Invalid 'input[0].content[0].text': "
        "string too long (1048577 characters; the limit is 1048576).",
    ),
    (
        "part_missing_refusal",
        msg([{"type": "refusal"}]),
        "input[0].content[0].refusal",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].content[0].refusal'.",
    ),
    (
        "function_call_missing_call_id",
        item(type="function_call", name="f", arguments="{}"),
        "input[0].call_id",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].call_id'.",
    ),
    (
        "function_call_missing_name",
        item(type="function_call", call_id="c", arguments="{}"),
        "input[0].name",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].name'.",
    ),
    (
        "function_call_missing_arguments",
        item(type="function_call", call_id="c", name="f"),
        "input[0].arguments",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].arguments'.",
    ),
    (
        "function_call_arguments_not_string",
        item(type="function_call", call_id="c", name="f", arguments={}),
        "input[0].arguments",
        "invalid_value",
        "Invalid 'input[0].arguments': expected a string, got dict.",
    ),
    (
        "function_call_name_list",
        item(type="function_call", call_id="c", name=[], arguments="{}"),
        "input[0].name",
        "invalid_value",
        "Invalid 'input[0].name': expected a string, got list.",
    ),
    (
        "function_call_unknown_field",
        item(type="function_call", call_id="c", name="f", arguments="{}", output="x"),
        "input[0].output",
        "unknown_parameter",
        "Unknown parameter: 'input[0].output'.",
    ),
    (
        "output_missing_call_id",
        item(type="function_call_output", output="x"),
        "input[0].call_id",
        "missing_required_parameter",
        "Missing required parameter: 'input[0].call_id'.",
    ),
    (
        "output_call_id_float",
        item(type="function_call_output", call_id=1.5, output="x"),
        "input[0].call_id",
        "invalid_value",
        "Invalid 'input[0].call_id': expected a string, got float.",
    ),
    (
        "output_missing_output",
        item(type="function_call_output", call_id="c"),
        "input[0].output",
        "invalid_value",
        "Invalid 'input[0].output': expected a string or an array of input_text parts.",
    ),
    (
        "output_wrong_type",
        item(type="function_call_output", call_id="c", output=5),
        "input[0].output",
        "invalid_value",
        "Invalid 'input[0].output': expected a string or an array of input_text parts.",
    ),
    (
        "output_too_long",
        item(type="function_call_output", call_id="c", output=BIG),
        "input[0].output",
        "string_above_max_length",
        "Invalid 'input[0].output': string too long (1048577 characters; the limit is 1048576).",
    ),
    (
        "output_part_bad_type",
        item(type="function_call_output", call_id="c", output=[{"type": "video"}]),
        "input[0].output[0].type",
        "invalid_value",
        "Invalid 'input[0].output[0].type': unsupported content part type 'video'.",
    ),
    (
        "output_part_input_audio",
        item(type="function_call_output", call_id="c", output=[{"type": "input_audio"}]),
        "input[0].output[0].type",
        "unsupported_parameter",
        "Invalid 'input[0].output[0].type': input_audio content is not supported by this server.",
    ),
    (
        "output_part_not_object",
        item(type="function_call_output", call_id="c", output=["x"]),
        "input[0].output[0]",
        "invalid_value",
        "Invalid 'input[0].output[0]': expected a content part object.",
    ),
    (
        "reasoning_summary_not_list",
        item(type="reasoning", summary="x"),
        "input[0]",
        "invalid_value",
        "Invalid 'input[0]': Expected `array`, got `str`",
    ),
    (
        "reasoning_summary_part_not_object",
        item(type="reasoning", summary=[5]),
        "input[0]",
        "invalid_value",
        "Invalid 'input[0]': Expected `object`, got `int` - at `$[0]`",
    ),
    (
        "reasoning_summary_part_missing_text",
        item(type="reasoning", summary=[{"type": "summary_text"}]),
        "input[0]",
        "invalid_value",
        "Invalid 'input[0]': Object missing required field `text` - at `$[0]`",
    ),
    (
        "reasoning_summary_part_bad_type",
        item(type="reasoning", summary=[{"type": "x", "text": "a"}]),
        "input[0]",
        "invalid_value",
        "Invalid 'input[0]': Invalid value 'x' - at `$[0].type`",
    ),
    (
        "reasoning_content_part_bad_type",
        item(type="reasoning", content=[{"type": "summary_text", "text": "a"}]),
        "input[0]",
        "invalid_value",
        "Invalid 'input[0]': Invalid value 'summary_text' - at `$[0].type`",
    ),
    (
        "reasoning_unknown_field",
        item(type="reasoning", summary=[], zz=1),
        "input[0].zz",
        "unknown_parameter",
        "Unknown parameter: 'input[0].zz'.",
    ),
    (
        "model_newline",
        {"model": "gpt\noss"},
        "model",
        "invalid_value",
        "Invalid 'model': at most 256 printable characters.",
    ),
]


@pytest.mark.parametrize(
    ("body", "param", "code", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD],
)
def test_every_bad_input_gets_its_pinned_openai_error(
    body: dict[str, Any] | bytes, param: str | None, code: str, message: str
) -> None:
    if isinstance(body, dict):
        body = {k: v for k, v in {"model": "m", "input": "x", **body}.items() if v is not None}
    err = rejected(body)
    assert (err.param, err.code, err.message) == (param, code, message)


def test_malformed_json_and_non_objects_are_rejected() -> None:
    assert rejected(b"{nope").code == "invalid_json"
    assert rejected(b"[1, 2]").code == "invalid_json"


def test_limits_are_configurable() -> None:
    tight = Limits(max_input_items=2, max_text_chars=5, max_tools=1)
    assert (
        rejected({"model": "m", "input": [{"role": "user", "content": "a"}] * 3}, tight).param
        == "input"
    )
    assert rejected({"model": "m", "input": "too long"}, tight).param == "input"
    tools = [{"type": "function", "name": n} for n in ("a", "b")]
    assert rejected({"model": "m", "input": "x", "tools": tools}, tight).param == "tools"


def test_accepted_options_are_mapped() -> None:
    req = parse(
        {
            "model": "m",
            "input": "x",
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {"type": "function", "name": "f"},
            "reasoning": {"effort": "high"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
            "stream_options": {"include_obfuscation": False},
            "prompt_cache_key": "k",
            "safety_identifier": "u1",
            "parallel_tool_calls": False,
        }
    )
    r = req.response
    assert r.tool_choice == FunctionToolChoice(name="f")
    assert r.reasoning.effort == "high" and r.text.format.name == "s"  # type: ignore[union-attr]
    assert r.text.format.strict is False  # type: ignore[union-attr]  # unset: OpenAI's default
    assert req.extra == {"stream_options": {"include_obfuscation": False}}
    assert (r.prompt_cache_key, r.safety_identifier, r.parallel_tool_calls) == (
        "k",
        "u1",
        False,
    )


def test_penalties_of_the_open_responses_body_are_echoed_and_bounded() -> None:
    r = parse({"model": "m", "input": "x", "presence_penalty": 0.5, "frequency_penalty": -2})
    assert (r.response.presence_penalty, r.response.frequency_penalty) == (0.5, -2.0)
    for name in ("presence_penalty", "frequency_penalty"):
        assert rejected({"model": "m", "input": "x", name: 2.5}).param == name


def test_image_and_access_options_at_what_the_server_does_anyway_are_kept_as_ignored() -> None:
    body = {
        "model": "m",
        "input": "x",
        "image": {"context_compression": "disabled"},
        "access_programs": {"cyber": "standard"},
    }
    assert parse(body).extra == {"ignored": {k: body[k] for k in ("image", "access_programs")}}
    assert parse({"model": "m", "input": "x", "image": {}}).extra == {"ignored": {"image": {}}}


def test_reasoning_context_and_mode_are_echoed_only_when_sent() -> None:
    """openai-python `Reasoning.context` and `.mode` (and the effort `max`): echoed as sent
    (the engines' use of them: docs/engines.md); absent from a response that sent none, so
    the responses of earlier versions read the same."""
    asked = {"effort": "max", "context": "all_turns", "mode": "pro", "summary": "auto"}
    r = parse({"model": "m", "input": "x", "reasoning": asked}).response
    assert msgspec.to_builtins(r.reasoning) == asked
    plain = parse({"model": "m", "input": "x", "reasoning": {"effort": "low"}}).response
    assert msgspec.to_builtins(plain.reasoning) == {"effort": "low", "summary": None}
    assert rejected({"model": "m", "input": "x", "reasoning": {"mode": "m" * 65}}).param == (
        "reasoning.mode"
    )
    assert rejected({"model": "m", "input": "x", "reasoning": {"context": "some"}}).param == (
        "reasoning.context"
    )


def test_unset_sampling_settings_echo_openai_defaults_and_set_ones_echo_as_sent() -> None:
    """The Open Responses schema wants numbers: the response echoes what the engine is
    given, the client's values or OpenAI's defaults; unset verbosity stays unset."""
    r = parse({"model": "m", "input": "x"}).response
    sampling = (r.temperature, r.top_p, r.presence_penalty, r.frequency_penalty, r.top_logprobs)
    assert sampling == (1.0, 1.0, 0.0, 0.0, 0)
    assert "verbosity" not in msgspec.to_builtins(r.text)
    r = parse(
        {"model": "m", "input": "x", "temperature": 0, "top_p": 0.5, "top_logprobs": 3}
    ).response
    assert (r.temperature, r.top_p, r.top_logprobs) == (0.0, 0.5, 3)
    assert parse({"model": "m", "input": "x", "text": {}}).response.text == TextConfig()


def test_accepted_item_forms_map_to_domain_items() -> None:
    """What the decoder accepts beyond the plain forms: text-part aliases, extra fields on
    content parts (a passed-back output_text carries annotations), ignored status, kept phase,
    client ids kept, tool output parts joined, lenient reasoning fields."""
    req = parse(
        {
            "model": "m",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a"},
                        {"type": "output_text", "text": "b", "annotations": [], "zz": 1},
                        {"type": "refusal", "refusal": "no"},
                    ],
                },
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "developer",
                    "content": "d",
                    "status": "completed",
                    "phase": "commentary",
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "c",
                    "name": "f",
                    "arguments": "{}",
                    "status": "done",
                },
                {
                    "type": "function_call_output",
                    "call_id": "c",
                    "output": [
                        {"type": "input_text", "text": "4"},
                        {"type": "refusal", "refusal": "r"},
                        {"type": "output_text", "text": "2"},
                    ],
                },
                {
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "s"}],
                    "content": [{"text": "t"}],
                    "encrypted_content": 5,
                },
                {"type": "reasoning", "summary": None, "encrypted_content": "enc"},
                {"role": "assistant", "content": "earlier", "id": None},
            ],
        }
    )
    assert req.input == [
        InputMessage(
            id="",
            role="user",
            content=[InputText(text="a"), OutputText(text="b"), Refusal(refusal="no")],
        ),
        InputMessage(
            id="msg_1", role="developer", content=[InputText(text="d")], phase="commentary"
        ),
        InputFunctionCall(id="fc_1", call_id="c", name="f", arguments="{}"),
        FunctionCallOutput(id="", call_id="c", output="42"),
        InputReasoning(
            id="",
            summary=[SummaryText(text="s")],
            content=[ReasoningText(text="t")],
            encrypted_content=None,
        ),
        InputReasoning(id="", encrypted_content="enc"),
        InputMessage(id="", role="assistant", content=[OutputText(text="earlier")]),
    ]


def test_the_published_schema_discriminates_input_items_and_parts_on_type() -> None:
    """/openapi.json is built from this schema: the tagged unions show up as discriminators,
    and the items decode sets aside under their own types, never as its `set_aside`."""
    defs = create_body_components()
    items = defs["CreateResponseBody"]["properties"]["input"]["anyOf"][1]["items"]
    mapping = items["discriminator"]["mapping"]
    aside = {t for t, ref in mapping.items() if ref.endswith("/SetAsideItemParam")}
    assert aside == SET_ASIDE_TYPES
    assert defs["SetAsideItemParam"]["properties"]["type"]["enum"] == sorted(SET_ASIDE_TYPES)
    assert sorted(set(mapping) - aside) == [
        "compaction",
        "custom_tool_call",
        "custom_tool_call_output",
        "function_call",
        "function_call_output",
        "item_reference",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "message",
        "reasoning",
    ]
    parts = defs["MessageParam"]["properties"]["content"]["anyOf"][1]["items"]
    assert sorted(parts["discriminator"]["mapping"]) == [
        "input_file",
        "input_image",
        "input_text",
        "output_text",
        "refusal",
        "text",
    ]


@pytest.mark.parametrize("kind", [[], {}, ["message"]])
def test_a_non_string_item_type_is_a_400(kind: Any) -> None:
    """The hand-written decoder looked such a type up in a dict and answered 500."""
    err = rejected({"model": "m", "input": [{"type": kind}]})
    assert (err.param, err.code, err.message) == (
        "input[0].type",
        "invalid_value",
        f"Invalid 'input[0].type': unsupported input item type {kind!r}.",
    )


@pytest.mark.parametrize(("value", "got"), [("", "str"), (0, "int"), (False, "bool")])
def test_a_falsy_non_array_reasoning_summary_is_refused(value: Any, got: str) -> None:
    """The hand-written decoder read these as an empty list; msgspec (like openai-python's
    `ResponseReasoningItemParam`, where `summary` is an array) refuses them. null still
    reads as empty."""
    err = rejected(item(type="reasoning", summary=value) | {"model": "m"})
    assert err.message == f"Invalid 'input[0]': Expected `array`, got `{got}`"
    assert parse(item(type="reasoning", summary=None) | {"model": "m"}).input[0].summary == []


def test_two_input_items_with_one_id_are_refused_in_openai_words() -> None:
    """The input items list pages by id: an id that names two items would never advance."""
    items = [
        {"type": "message", "role": "user", "content": "a", "id": "msg_1"},
        {"type": "message", "role": "user", "content": "b", "id": "msg_2"},
        {"type": "function_call_output", "call_id": "c", "output": "o", "id": "msg_1"},
    ]
    err = rejected({"model": "m", "input": items})
    assert (err.param, err.code, err.message) == (
        "input[2].id",
        "invalid_value",
        "Duplicate item found with id msg_1. Remove duplicate items from your input and try again.",
    )
    del items[2]["id"]
    assert [i.id for i in parse({"model": "m", "input": items}).input] == ["msg_1", "msg_2", ""]


@pytest.mark.parametrize("where", ["input", "tool schema", "just past the limit"])
def test_a_body_nested_past_the_limit_is_refused_before_decoding(where: str) -> None:
    deep = "[" * 2000 + "]" * 2000  # past msgspec's own recursion limit: no RecursionError
    body = {
        "input": f'{{"model": "m", "input": {deep}}}',
        "tool schema": '{"model": "m", "input": "x", "tools": [{"type": "function", '
        f'"name": "f", "parameters": {{"d": {deep}}}}}]}}',
        "just past the limit": '{"model": "m", "input": "x", "tools": [{"type": "function", '
        f'"name": "f", "parameters": {{"d": {"[" * 129 + "]" * 129}}}}}]}}',
    }[where]
    err = rejected(body.encode())
    assert err.code == "invalid_json"
    assert "nested more than 128 levels" in err.message


def test_nesting_up_to_the_limit_is_accepted_and_brackets_inside_strings_do_not_count() -> None:
    schema = "[" * 120 + "]" * 120
    inside_string = '"' + "[" * 500 + '\\"' + "{" * 500 + '"'
    body = (
        '{"model": "m", "input": ' + inside_string + ', "tools": [{"type": "function", '
        f'"name": "f", "parameters": {{"d": {schema}}}}}]}}'
    )
    assert parse(body.encode()).response.tools[0]["parameters"] is not None
    assert rejected(body.encode(), Limits(max_json_depth=100)).code == "invalid_json"


@pytest.mark.parametrize("status", [["completed"], {"a": 1}, 3, "unknown"])
def test_a_passed_back_mcp_calls_status_of_any_json_is_dropped_not_a_500(status: Any) -> None:
    """`status` of an `mcp_call` input item is kept only when it is one of OpenAI's; a list
    or an object (unhashable) is dropped like any other value, not an error."""
    item = {"type": "mcp_call", "id": "mcp_1", "server_label": "d", "name": "find"}
    item |= {"arguments": "{}", "output": "hit", "status": status}
    req = parse_create_body(msgspec.json.encode({"model": "m", "input": [item]}), Limits())
    (call,) = req.input
    assert getattr(call, "status", None) is None


def test_an_empty_item_id_is_read_as_none() -> None:
    """A compaction's output from a server that repeated its user messages with `"id": ""`
    is accepted back: the item is recorded under an id of the server's, as if it had none."""
    (message,) = parse({"model": "m", **msg("x", id="")}).input
    assert message.id == ""
