"""The chat-completions mapping without HTTP: Prompt -> request, chunks -> deltas."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from adapters.engines.openai_chat import ChatStream, chat_messages, chat_request
from domain.errors import EngineError
from domain.generation import (
    ArgumentsDelta,
    EndItem,
    Finished,
    FunctionCallStart,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import (
    AllowedToolsChoice,
    FormatJsonSchema,
    FunctionToolChoice,
    InputMessage,
    InputText,
    TextConfig,
)
from domain.tools import OfferedTool
from tests.fakes.prompts import (
    WEATHER,
    answer,
    call,
    make_prompt,
    reasoning,
    tool_output,
    turn,
    user,
)
from tests.fakes.responses import validated


def test_instructions_history_calls_and_outputs_become_chat_messages() -> None:
    history = [
        turn([user("Hi")], [reasoning("hidden"), answer("Hello!")], instructions="old"),
        turn(
            [user("Weather?")],
            [
                answer("Checking.", phase="commentary"),
                call("call_1", "get_weather", '{"location":"Paris"}'),
                call("call_2", "get_weather", '{"location":"Rome"}'),
            ],
        ),
    ]
    prompt = make_prompt(
        [tool_output("call_1", "20C"), tool_output("call_2", "25C", id="fco_2")],
        history=history,
        instructions="Be brief.",
    )
    assert chat_messages(prompt) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "20C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "25C"},
    ]


def test_developer_messages_are_sent_as_system() -> None:
    prompt = make_prompt([InputMessage(id="m", role="developer", content=[InputText(text="x")])])
    assert chat_messages(prompt) == [{"role": "system", "content": "x"}]


def test_the_request_streams_with_usage_and_sampling() -> None:
    body = chat_request(
        make_prompt(
            tools=[WEATHER], max_output_tokens=50, temperature=0.2, top_p=0.9, effort="low"
        ),
        "m",
    )
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["model"], body["max_tokens"], body["temperature"], body["top_p"]) == (
        "m",
        50,
        0.2,
        0.9,
    )
    assert body["reasoning_effort"] == "low"
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER.description,
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert body["tool_choice"] == "auto"


def test_penalties_are_passed_when_set() -> None:
    prompt = msgspec.structs.replace(make_prompt(), presence_penalty=0.5, frequency_penalty=-1.0)
    body = chat_request(prompt, "m")
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, -1.0)


def test_unset_parameters_are_not_sent() -> None:
    body = chat_request(make_prompt(), "m")
    for key in (
        "presence_penalty",
        "frequency_penalty",
        "max_tokens",
        "temperature",
        "top_p",
        "reasoning_effort",
        "tools",
        "response_format",
    ):
        assert key not in body


def test_tool_choices_map_to_chat() -> None:
    other = OfferedTool(name="get_time")
    named = chat_request(
        make_prompt(tools=[WEATHER, other], tool_choice=FunctionToolChoice(name="get_time")), "m"
    )
    assert named["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    allowed = AllowedToolsChoice(mode="required", tools=[{"type": "function", "name": "get_time"}])
    narrowed = chat_request(make_prompt(tools=[WEATHER, other], tool_choice=allowed), "m")
    assert narrowed["tool_choice"] == "required"
    assert [t["function"]["name"] for t in narrowed["tools"]] == ["get_time"]


def test_a_json_schema_format_becomes_response_format() -> None:
    fmt = FormatJsonSchema(name="city", schema={"type": "object"}, strict=True)
    body = chat_request(make_prompt(text=TextConfig(format=fmt)), "m")
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "city", "schema": {"type": "object"}, "strict": True},
    }


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return json.dumps({"object": "chat.completion.chunk", "choices": choices, **extra})


def feed(*chunks: str) -> tuple[ChatStream, list[Any]]:
    stream = ChatStream("upstream")
    deltas = [d for c in chunks for d in stream.on_chunk(c)]
    return stream, deltas


def test_reasoning_then_content() -> None:
    _, deltas = feed(
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "think"}),
        chunk({"content": "Hi"}),
        chunk({}, "stop"),
    )
    assert deltas == [ReasoningDelta(text="think"), EndItem(), TextDelta(text="Hi"), EndItem()]


def test_reasoning_content_wins_over_its_alias() -> None:
    _, deltas = feed(chunk({"reasoning_content": "a", "reasoning": "a"}), chunk({"reasoning": "b"}))
    assert deltas == [ReasoningDelta(text="a"), ReasoningDelta(text="b")]


def test_tool_calls_stream_by_index() -> None:
    stream, deltas = feed(
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk(
            {"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "g", "arguments": "{}"}}]}
        ),
        chunk({}, "tool_calls"),
        chunk(
            None,
            usage={
                "prompt_tokens": 9,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 8},
                "completion_tokens_details": {"reasoning_tokens": 1},
            },
        ),
    )
    assert deltas == [
        FunctionCallStart(name="f", call_id="c1"),
        ArgumentsDelta(text='{"a":'),
        ArgumentsDelta(text="1}"),
        EndItem(),
        FunctionCallStart(name="g", call_id="c2"),
        ArgumentsDelta(text="{}"),
        EndItem(),
    ]
    finished = stream.finished()
    assert finished == Finished(
        reason="stop",
        usage=TokenUsage(input_tokens=9, cached_tokens=8, output_tokens=4, reasoning_tokens=1),
    )
    response = validated([*deltas, finished])
    assert [o.call_id for o in response.output if o.type == "function_call"] == ["c1", "c2"]


def test_a_tool_call_that_resumes_after_the_next_began_is_refused() -> None:
    with pytest.raises(EngineError, match="tool call 0 continued after it ended"):
        feed(
            chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}),
            chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        )


def test_a_refusal_joins_the_message() -> None:
    _, deltas = feed(chunk({"content": "Well, "}), chunk({"refusal": "no."}), chunk({}, "stop"))
    assert deltas == [TextDelta(text="Well, "), RefusalDelta(text="no."), EndItem()]


def test_length_is_length() -> None:
    stream, deltas = feed(chunk({"content": "a"}), chunk({}, "length"))
    response = validated([*deltas, stream.finished()])
    assert response.status == "incomplete"


def test_missing_usage_is_zero_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    stream, _ = feed(chunk({"content": "a"}, "stop"))
    assert stream.finished().usage == TokenUsage()
    assert "sent no usage" in caplog.text


@pytest.mark.parametrize(
    ("data", "code", "match"),
    [
        ("nope", "engine_protocol_error", "malformed chunk"),
        (chunk({}, "exploded"), "engine_protocol_error", "unknown finish_reason"),
        (json.dumps({"error": {"message": "oops"}}), "engine_stream_error", "oops"),
        (json.dumps({"object": "error", "message": "bad"}), "engine_stream_error", "bad"),
    ],
)
def test_broken_chunks_are_engine_errors(data: str, code: str, match: str) -> None:
    with pytest.raises(EngineError, match=match) as e:
        feed(data)
    assert e.value.code == code


def test_a_stream_without_finish_reason_is_refused() -> None:
    stream, _ = feed(chunk({"content": "a"}))
    with pytest.raises(EngineError, match="without a finish_reason"):
        stream.finished()


def scored(delta: dict[str, Any], *tokens: str, finish: str | None = None) -> str:
    """A chunk whose tokens' scores come in `logprobs.content`, as vLLM sends them."""
    content = [{"token": t, "logprob": -1.0, "bytes": None, "top_logprobs": []} for t in tokens]
    choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": {"content": content}}
    return json.dumps({"object": "chat.completion.chunk", "choices": [choice]})


def test_scores_of_a_character_split_across_tokens_go_with_its_text() -> None:
    _, deltas = feed(
        scored({"content": "Hi"}, "Hi"),
        scored({"content": ""}, "bytes:\\xf0\\x9f"),
        scored({"content": " 🫠"}, " \\xab\\xa0"),
        chunk({}, "stop"),
    )
    texts = [d for d in deltas if isinstance(d, TextDelta)]
    assert [(d.text, len(d.logprobs)) for d in texts] == [("Hi", 1), (" 🫠", 2)]


def test_an_answer_cut_inside_a_character_keeps_its_last_tokens_scores() -> None:
    """The answer stops (here at `max_tokens`) before the character's text completes: the
    held scores go in a last delta with no text, and the output text has one a token."""
    stream, deltas = feed(
        scored({"content": "Hi"}, "Hi"),
        scored({"content": ""}, "bytes:\\xf0\\x9f"),
        scored({"content": ""}, "bytes:\\xab", finish="length"),
    )
    assert deltas == [
        TextDelta(text="Hi", logprobs=deltas[0].logprobs),
        TextDelta(text="", logprobs=deltas[1].logprobs),
        EndItem(),
    ]
    assert len(deltas[1].logprobs) == 2
    response = validated([*deltas, stream.finished()])
    [message] = response.output
    assert message.type == "message"
    [part] = message.content
    assert part.type == "output_text"
    assert part.text == "Hi"
    assert [lp.token for lp in part.logprobs or []] == ["Hi", "bytes:\\xf0\\x9f", "bytes:\\xab"]


def test_scores_of_reasoning_tokens_are_not_the_answers() -> None:
    """An upstream may score reasoning tokens too (the Responses API scores output text
    only): a textless one among them is not carried over to the answer."""
    _, deltas = feed(
        scored({"reasoning_content": "hm"}, "hm"),
        scored({"content": ""}, "bytes:\\xe2"),
        scored({"content": "Yes"}, "Yes"),
        chunk({}, "stop"),
    )
    [text] = [d for d in deltas if isinstance(d, TextDelta)]
    assert [lp["token"] for lp in text.logprobs] == ["Yes"]
