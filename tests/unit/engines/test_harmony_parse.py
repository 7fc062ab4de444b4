"""Parsing gpt-oss output token ids into semantic deltas, per authored transcript."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from adapters.engines.harmony import HarmonyParser
from domain.errors import EngineError
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    EndItem,
    Finished,
    FunctionCallStart,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
)
from tests.fakes.responses import validated
from tests.fakes.transcripts import (
    FUNCTION_CALL,
    NO_REASONING,
    PREAMBLE_TOOL_CALL,
    REASONING_FINAL,
    UNICODE,
    long_answer,
)

STOP = Finished(reason="stop", usage=TokenUsage())


def ids(encoding: Any, transcript: str) -> list[int]:
    return list(encoding.encode(transcript, allowed_special="all"))


def parse(encoding: Any, transcript: str) -> list[AnyDelta]:
    return HarmonyParser(encoding).feed(ids(encoding, transcript))


def merged(deltas: list[AnyDelta]) -> list[AnyDelta]:
    """Adjacent text deltas of one kind joined, to compare token-by-token parsing."""
    out: list[AnyDelta] = []
    for d in deltas:
        last = out[-1] if out else None
        same = type(d) is type(last) and getattr(d, "phase", None) == getattr(last, "phase", None)
        if same and isinstance(d, ReasoningDelta | TextDelta | ArgumentsDelta):
            out[-1] = msgspec.structs.replace(d, text=last.text + d.text)  # type: ignore[union-attr]
        else:
            out.append(d)
    return out


def test_reasoning_then_final_answer(encoding: Any) -> None:
    assert parse(encoding, REASONING_FINAL) == [
        ReasoningDelta(text="The user says hello. I should greet them back briefly."),
        EndItem(),
        TextDelta(text="Hello! How can I help you today?", phase="final_answer"),
        EndItem(),
    ]


def test_a_function_call(encoding: Any) -> None:
    deltas = parse(encoding, FUNCTION_CALL)
    assert deltas[2:] == [
        FunctionCallStart(name="get_weather"),
        ArgumentsDelta(text='{"location":"Tokyo"}'),
        EndItem(),
    ]
    assert isinstance(deltas[0], ReasoningDelta)


def test_a_preamble_then_a_tool_call(encoding: Any) -> None:
    deltas = parse(encoding, PREAMBLE_TOOL_CALL)
    assert deltas[2:] == [
        TextDelta(text="Let me check the weather in Paris and Rome.", phase="commentary"),
        EndItem(),
        FunctionCallStart(name="get_weather"),
        ArgumentsDelta(text='{"location":"Paris"}'),
        EndItem(),
    ]


def test_an_answer_without_reasoning(encoding: Any) -> None:
    assert parse(encoding, NO_REASONING) == [
        TextDelta(text="Just the answer.", phase="final_answer"),
        EndItem(),
    ]


@pytest.mark.parametrize(
    "transcript", [REASONING_FINAL, FUNCTION_CALL, PREAMBLE_TOOL_CALL, UNICODE, long_answer(50)]
)
def test_token_by_token_gives_the_same_text_as_all_at_once(encoding: Any, transcript: str) -> None:
    parser = HarmonyParser(encoding)
    one_by_one = [d for t in ids(encoding, transcript) for d in parser.feed([t])]
    assert merged(one_by_one) == parse(encoding, transcript)


def test_characters_split_across_tokens_come_out_whole(encoding: Any) -> None:
    parser = HarmonyParser(encoding)
    texts = [
        d.text for t in ids(encoding, UNICODE) for d in parser.feed([t]) if isinstance(d, TextDelta)
    ]
    assert "".join(texts) == "こんにちは 🎉 — ça va?"
    assert all("\ufffd" not in t for t in texts)


def test_reasoning_tokens_are_the_analysis_messages_tokens(encoding: Any) -> None:
    parser = HarmonyParser(encoding)
    parser.feed(ids(encoding, REASONING_FINAL))
    analysis = REASONING_FINAL.split("<|start|>")[0]
    assert parser.reasoning_tokens == len(ids(encoding, analysis))
    assert parser.tokens == len(ids(encoding, REASONING_FINAL))


def test_a_message_cut_off_stays_open_and_counts(encoding: Any) -> None:
    tokens = ids(encoding, REASONING_FINAL)
    parser = HarmonyParser(encoding)
    deltas = parser.feed(tokens[:6])  # inside the analysis message
    assert deltas
    assert not any(isinstance(d, EndItem) for d in deltas)
    assert parser.reasoning_tokens == 0
    assert parser.open_reasoning_tokens == 6


@pytest.mark.parametrize("transcript", [REASONING_FINAL, FUNCTION_CALL, PREAMBLE_TOOL_CALL])
def test_each_transcript_makes_a_valid_openai_response(encoding: Any, transcript: str) -> None:
    response = validated([*parse(encoding, transcript), STOP])
    assert response.status == "completed"
    assert response.output[0].type == "reasoning"


def test_a_tool_call_response_carries_the_call(encoding: Any) -> None:
    response = validated([*parse(encoding, PREAMBLE_TOOL_CALL), STOP])
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message", "function_call"]
    message, fc = response.output[1], response.output[2]
    assert message.type == "message"
    assert message.phase == "commentary"
    assert fc.type == "function_call"
    assert fc.name == "get_weather"
    assert fc.arguments == '{"location":"Paris"}'


@pytest.mark.parametrize("cut", [3, 14, 20, 30])
def test_a_cut_off_generation_still_makes_a_valid_response(encoding: Any, cut: int) -> None:
    tokens = ids(encoding, PREAMBLE_TOOL_CALL)[:cut]
    deltas = HarmonyParser(encoding).feed(tokens)
    response = validated([*deltas, Finished(reason="length", usage=TokenUsage())])
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    cut_mid_item = bool(deltas) and not isinstance(deltas[-1], EndItem)
    statuses = [item.status for item in response.output]
    assert (
        statuses == ["completed"] * (len(statuses) - cut_mid_item) + ["incomplete"] * cut_mid_item
    )


def test_a_recipient_other_than_functions_is_passed_on_whole(encoding: Any) -> None:
    transcript = "<|channel|>analysis to=browser.search code<|message|>{}<|call|>"
    assert parse(encoding, transcript)[0] == FunctionCallStart(name="browser.search")


def test_output_that_is_not_harmony_is_an_engine_error(encoding: Any) -> None:
    with pytest.raises(EngineError, match="not valid harmony") as e:
        parse(encoding, "<|channel|>final<|message|>Hi<|end|><|channel|>final")
    assert e.value.code == "engine_output_invalid"
