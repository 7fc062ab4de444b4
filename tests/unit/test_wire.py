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
    InputText,
    OutputText,
)
from service.wire import Limits, parse_create_body


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
    assert (req.store, req.stream, req.background, req.tool_choice) == (True, False, False, "auto")


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


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "m", "input": "x", "bogus": 1}, "bogus", "unknown_parameter"),
        (
            {"model": "m", "input": "x", "text": {"format": {"type": "text"}, "zz": 1}},
            "text.zz",
            "unknown_parameter",
        ),
        ({"input": "x"}, "model", "missing_required_parameter"),
        ({"model": "m"}, "input", "missing_required_parameter"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature", "invalid_value"),
        ({"model": "m", "input": "x", "stream": "true"}, "stream", "invalid_value"),
        ({"model": "m", "input": "x", "temperature": 3}, "temperature", "invalid_value"),
        (
            {"model": "m", "input": "x", "max_output_tokens": 10**9},
            "max_output_tokens",
            "invalid_value",
        ),
        (
            {"model": "m", "input": "x", "max_output_tokens": 1},
            "max_output_tokens",
            "invalid_value",
        ),
        (
            {"model": "m", "input": "x", "background": True, "store": False},
            "background",
            "invalid_value",
        ),
        (
            {"model": "m", "input": "x", "previous_response_id": "abc"},
            "previous_response_id",
            "invalid_value",
        ),
        (
            {"model": "m", "input": "x", "tools": [{"type": "web_search"}]},
            "tools[0].type",
            "unsupported_parameter",
        ),
        (
            {"model": "m", "input": "x", "tools": [{"type": "function", "name": "bad name"}]},
            "tools[0].name",
            "invalid_value",
        ),
        (
            {"model": "m", "input": "x", "tool_choice": {"type": "function", "name": "nope"}},
            "tool_choice",
            "invalid_value",
        ),
        ({"model": "m", "input": "x", "tool_choice": "required"}, "tool_choice", "invalid_value"),
        (
            {"model": "m", "input": "x", "conversation": "conv_1"},
            "conversation",
            "unsupported_parameter",
        ),
        (
            {"model": "m", "input": [{"type": "item_reference", "id": "x"}]},
            "input[0].type",
            "unsupported_parameter",
        ),
        (
            {"model": "m", "input": [{"role": "robot", "content": "x"}]},
            "input[0].role",
            "invalid_value",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input[0].content[0].type",
            "unsupported_parameter",
        ),
        (
            {"model": "m", "input": [{"type": "function_call_output", "output": "x"}]},
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": "x", "extra": 1}]},
            "input[0].extra",
            "unknown_parameter",
        ),
        (
            {"model": "m", "input": "x", "metadata": {f"k{i}": "v" for i in range(17)}},
            "metadata",
            "object_above_max_properties",
        ),
        (
            {"model": "m", "input": "x", "metadata": {"k": "v" * 513}},
            "metadata.k",
            "string_above_max_length",
        ),
        ({"model": "gpt\u0000oss", "input": "x"}, "model", "invalid_value"),
        ({"model": "gpt\noss", "input": "x"}, "model", "invalid_value"),
        ({"model": "m" * 257, "input": "x"}, "model", "invalid_value"),
    ],
)
def test_bad_requests_name_the_offending_param(body: dict[str, Any], param: str, code: str) -> None:
    err = rejected(body)
    assert (err.param, err.code) == (param, code), err.message
    assert err.message


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
    assert req.tool_choice == FunctionToolChoice(name="f")
    assert req.reasoning.effort == "high" and req.text.format.name == "s"  # type: ignore[union-attr]
    assert req.extra == {"stream_options": {"include_obfuscation": False}}
    assert (req.prompt_cache_key, req.safety_identifier, req.parallel_tool_calls) == (
        "k",
        "u1",
        False,
    )
