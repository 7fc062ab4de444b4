"""sglang's chunks without HTTP: output ids in either streaming style, finish reasons and
usage, as `_SglangStream` reads them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.engines.harmony import HarmonyParser
from adapters.engines.sglang import OutputIds, _drafts_of, _SglangStream
from domain.errors import EngineError
from domain.generation import EndItem, Finished, TextDelta, TokenUsage
from tests.fakes.transcripts import REASONING_FINAL

chunks_of = st.lists(st.integers(0, 5), min_size=1, max_size=40)


def splits(tokens: list[int], sizes: list[int]) -> list[list[int]]:
    out, pos = [], 0
    for size in sizes:
        out.append(tokens[pos : pos + size])
        pos += size
    out.append(tokens[pos:])
    return out


@given(tokens=st.lists(st.integers(0, 200_000), max_size=60), sizes=chunks_of)
def test_cumulative_chunks_yield_each_id_once(tokens: list[int], sizes: list[int]) -> None:
    ids, got, seen = OutputIds(), [], 0
    for step in splits(tokens, sizes):
        seen += len(step)
        got += ids.new(tokens[:seen], seen)
    assert got == tokens


@given(tokens=st.lists(st.integers(0, 200_000), max_size=60), sizes=chunks_of)
def test_incremental_chunks_yield_each_id_once(tokens: list[int], sizes: list[int]) -> None:
    ids, got, seen = OutputIds(), [], 0
    for step in splits(tokens, sizes):
        seen += len(step)
        got += ids.new(step, seen)
    assert got == tokens


def test_the_style_is_latched_once_unambiguous() -> None:
    ids = OutputIds()
    assert ids.new([7], 1) == [7]
    assert ids.mode is None  # one id: both styles read it the same
    assert ids.new([7, 8], 2) == [8]
    assert ids.mode == "cumulative"
    with pytest.raises(ValueError, match="latched: cumulative"):
        ids.new([9], 3)  # an incremental chunk after cumulative ones


def test_a_chunk_that_fits_neither_style_is_refused() -> None:
    ids = OutputIds()
    ids.new([1, 2], 2)
    with pytest.raises(ValueError, match="fits neither"):
        ids.new([1, 2, 3], 4)


def chunk(ids: list[int], completion: int, finish: Any = None, **meta: Any) -> str:
    info = {
        "id": "r",
        "finish_reason": finish,
        "prompt_tokens": 10,
        "cached_tokens": 4,
        "completion_tokens": completion,
        **meta,
    }
    return json.dumps({"text": "", "output_ids": ids, "meta_info": info})


@pytest.fixture
def run(encoding: Any) -> _SglangStream:
    return _SglangStream(HarmonyParser(encoding), "sglang")


@pytest.fixture
def tokens(encoding: Any) -> list[int]:
    return list(encoding.encode(REASONING_FINAL, allowed_special="all"))


def test_usage_comes_from_meta_info_with_reasoning_counted_by_harmony(
    run: _SglangStream, tokens: list[int]
) -> None:
    run.on_chunk(chunk(tokens, len(tokens), {"type": "stop", "matched": 200002}))
    analysis = run.parser.reasoning_tokens
    assert analysis > 0
    assert run.finished == Finished(
        reason="stop",
        usage=TokenUsage(
            input_tokens=10, cached_tokens=4, output_tokens=len(tokens), reasoning_tokens=analysis
        ),
    )


def test_reasoning_tokens_reported_by_sglang_win(run: _SglangStream, tokens: list[int]) -> None:
    run.on_chunk(
        chunk(tokens, len(tokens), {"type": "stop", "matched": 200002}, reasoning_tokens=3)
    )
    assert run.finished is not None
    assert run.finished.usage.reasoning_tokens == 3


def test_a_zero_from_sglang_means_it_did_not_count(run: _SglangStream, tokens: list[int]) -> None:
    run.on_chunk(
        chunk(tokens, len(tokens), {"type": "stop", "matched": 200002}, reasoning_tokens=0)
    )
    assert run.finished is not None
    assert run.finished.usage.reasoning_tokens == run.parser.reasoning_tokens > 0


def test_length_finishes_with_length(run: _SglangStream, tokens: list[int]) -> None:
    run.on_chunk(chunk(tokens[:5], 5, {"type": "length", "length": 5}))
    assert run.finished is not None
    assert run.finished.reason == "length"


def test_an_abort_chunk_gives_no_tokens_and_an_error(run: _SglangStream, tokens: list[int]) -> None:
    assert run.on_chunk(chunk(tokens[:4], 4)) != []
    with pytest.raises(EngineError, match="aborted the generation: Abort request") as e:
        run.on_chunk(chunk(tokens[:9], 9, {"type": "abort", "message": "Abort request"}))
    assert e.value.code == "engine_aborted"
    assert run.ids.consumed == 4
    assert run.ended


def test_an_error_chunk_says_what_sglang_said(run: _SglangStream) -> None:
    with pytest.raises(EngineError, match="failed the generation: boom") as e:
        run.on_chunk(json.dumps({"error": {"message": "boom", "type": "x", "code": 500}}))
    assert e.value.code == "engine_stream_error"


@pytest.mark.parametrize(
    ("message", "code", "expected"),
    [
        ("top_p must be in (0, 1], got 0.0.", 400, "engine_bad_request"),
        ("Duplicate request ID detected: 0a", "400", "engine_bad_request"),
        (
            "The input (131080 tokens) is longer than the model's context length (131072 tokens).",
            400,
            "context_length_exceeded",
        ),
        (
            "Requested token count exceeds the model's maximum context length of 131072 tokens.",
            400,
            "context_length_exceeded",
        ),
        ("The input (9 tokens) is longer than the model's context length (8 tokens).", 500, None),
        ("boom", None, None),
        ("boom", True, None),
    ],
)
def test_an_error_chunk_with_a_4xx_code_is_the_refusal_it_says(
    run: _SglangStream, message: str, code: Any, expected: str | None
) -> None:
    """sglang streams its validation's `ValueError`s as `{"error": {…, "code": 400}}`."""
    error = {"message": message, "type": "invalid_request_error", "code": code}
    with pytest.raises(EngineError, match="failed the generation") as e:
        run.on_chunk(json.dumps({"error": error}))
    assert e.value.code == (expected or "engine_stream_error")
    assert run.ended


@pytest.mark.parametrize(
    ("info", "drafts"),
    [
        ({"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4}, 4),
        ({"speculative_algorithm": "EAGLE3", "speculative_num_draft_tokens": 8}, 8),
        ({"speculative_algorithm": None, "speculative_num_draft_tokens": 4}, 0),
        ({"speculative_algorithm": "NONE", "speculative_num_draft_tokens": 4}, 0),
        ({"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": None}, 0),
        ({}, 0),
    ],
)
def test_draft_tokens_count_only_with_a_speculative_algorithm(
    info: dict[str, Any], drafts: int
) -> None:
    assert _drafts_of(info) == drafts


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ("{not json", "malformed chunk"),
        (json.dumps({"text": "x", "output_ids": [1]}), "without meta_info"),
        (json.dumps({"output_ids": [1], "meta_info": {"id": "r"}}), "malformed chunk"),
        (chunk([1], 1, {"type": "weird"}), "unknown finish_reason"),
    ],
)
def test_protocol_breaks_are_engine_errors(run: _SglangStream, data: str, why: str) -> None:
    with pytest.raises(EngineError, match=why) as e:
        run.on_chunk(data)
    assert e.value.code == "engine_protocol_error"


def test_a_chunk_after_the_finish_is_refused(run: _SglangStream, tokens: list[int]) -> None:
    run.on_chunk(chunk(tokens, len(tokens), {"type": "stop", "matched": 200002}))
    with pytest.raises(EngineError, match="after the finishing one"):
        run.on_chunk(chunk(tokens, len(tokens)))


def test_text_is_parsed_from_ids_not_from_text(run: _SglangStream, tokens: list[int]) -> None:
    deltas = run.on_chunk(chunk(tokens, len(tokens), {"type": "stop", "matched": 200002}))
    assert TextDelta(text="Hello! How can I help you today?", phase="final_answer") in deltas
    assert deltas[-1] == EndItem()


@pytest.mark.parametrize("matched", [200002, "</answer>", None])
def test_a_stop_on_a_token_or_a_string_is_stop(
    run: _SglangStream, tokens: list[int], matched: Any
) -> None:
    run.on_chunk(chunk(tokens, len(tokens), {"type": "stop", "matched": matched}))
    assert run.finished is not None
    assert run.finished.reason == "stop"


def test_intermediate_chunks_without_text_and_unknown_meta_keys_are_fine(
    run: _SglangStream, tokens: list[int], encoding: Any
) -> None:
    """0.5.23 defers `text` (null) on intermediate cumulative chunks; meta_info grows keys."""
    data = json.loads(chunk(tokens[:6], 6, weight_version="default", num_retractions=0))
    data["text"] = None
    assert run.on_chunk(json.dumps(data)) == HarmonyParser(encoding).feed(tokens[:6])
    assert run.ids.consumed == 6


@pytest.mark.parametrize("kept", ["all so far", "only new"])
def test_logprobs_of_the_answer_line_up_with_its_tokens(
    encoding: Any, tokens: list[int], kept: str
) -> None:
    """Whether sglang sends every token's score so far in each chunk or only the new ones,
    the final channel's text carries one entry per token, and the analysis none."""
    run = _SglangStream(HarmonyParser(encoding), "sglang", logprobs=True)
    scores = [[-0.1 * i, t, encoding.decode([t])] for i, t in enumerate(tokens)]
    tops = [[[-0.1 * i, t, encoding.decode([t])], [-9.0, 0, "!"]] for i, t in enumerate(tokens)]
    texts: list[TextDelta] = []
    for step in range(0, len(tokens), 7):
        new = tokens[step : step + 7]
        end = step + len(new)
        lo = 0 if kept == "all so far" else step
        meta = {"output_token_logprobs": scores[lo:end], "output_top_logprobs": tops[lo:end]}
        ids = tokens[:end] if kept == "all so far" else new
        out = run.on_chunk(chunk(ids, end, **meta))
        texts += [d for d in out if isinstance(d, TextDelta)]
    answer = [d for d in texts if d.phase == "final_answer"]
    entries = [e for d in answer for e in d.logprobs]
    assert "".join(e["token"] for e in entries) == "".join(d.text for d in answer)
    assert all(
        e["top_logprobs"][1] == {"token": "!", "logprob": -9.0, "bytes": [33]} for e in entries
    )
    assert not [d for d in texts if d.phase != "final_answer" and d.logprobs]


@pytest.mark.parametrize("cut", [False, True])
def test_a_character_split_across_chunks_keeps_every_tokens_score(encoding: Any, cut: bool) -> None:
    """ " 🫠" is three tokens, the space and the emoji's first bytes, then two more bytes;
    streamed a token a chunk, the last two have no text. Their scores go with the
    character's text, or, when the answer is cut off inside it, in a last delta with no
    text: a score per answer token."""
    answer_ids = encoding.encode("Hi 🫠 ok", allowed_special="all")
    header = encoding.encode("<|channel|>final<|message|>", allowed_special="all")
    if cut:
        answer_ids = answer_ids[: answer_ids.index(104) + 1]  # up to one of the two textless
    tokens = [*header, *answer_ids]
    run = _SglangStream(HarmonyParser(encoding), "sglang", logprobs=True)
    texts: list[TextDelta] = []
    for n in range(1, len(tokens) + 1):
        scores = [[-0.5 * i, t, encoding.decode([t])] for i, t in enumerate(tokens[:n])]
        finish = {"type": "length", "length": n} if n == len(tokens) else None
        out = run.on_chunk(chunk(tokens[:n], n, finish, output_token_logprobs=scores))
        texts += [d for d in out if isinstance(d, TextDelta)]
    entries = [e for d in texts for e in d.logprobs]
    assert [e["logprob"] for e in entries] == [-0.5 * i for i in range(len(header), len(tokens))]
    assert "".join(d.text for d in texts) == ("Hi " if cut else "Hi 🫠 ok")
    assert (texts[-1].text, len(texts[-1].logprobs)) == (("", 1) if cut else (" ok", 1))
    # Each entry's bytes are its token's own: joined, the UTF-8 of every token so far.
    joined = bytes(b for e in entries for b in e["bytes"])
    assert joined == ("Hi 🫠".encode()[:-1] if cut else "Hi 🫠 ok".encode())
    assert [(e["token"], e["bytes"]) for e in entries[1:3]] == [(" ", [32, 240, 159]), ("", [171])]
