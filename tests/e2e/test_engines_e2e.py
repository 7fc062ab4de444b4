"""The real engine adapters end to end: `resplog serve --engine sglang|openai-chat` against
the faithful fake servers, driven by the official openai SDK, on PostgreSQL."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest

from adapters.engines.harmony import gpt_oss_encoding
from tests.e2e.conftest import Server, start_server, stop_server
from tests.fakes.plugin import *  # noqa: F403
from tests.fakes.process import FakeProcess

WEATHER: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    }
]


def _serve(fresh_pg: Any, tmp: Path, *engine: str) -> Iterator[Server]:
    srv = start_server(fresh_pg(), "postgres", tmp / "server.log", engine=engine)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def sglang_resplog(
    fake_sglang_server: FakeProcess, fresh_pg: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    yield from _serve(
        fresh_pg,
        tmp_path_factory.mktemp("sglang"),
        "--engine",
        "sglang",
        "--engine-url",
        fake_sglang_server.url,
    )


@pytest.fixture(scope="module")
def chat_resplog(
    fake_chat_server: FakeProcess, fresh_pg: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    yield from _serve(
        fresh_pg,
        tmp_path_factory.mktemp("chat"),
        "--engine",
        "openai-chat",
        "--engine-url",
        fake_chat_server.url,
        # The image URL a test hands to the upstream: named, so not resolved (this box
        # may have no DNS; adapters/tools/images.py).
        "--mcp-hosts",
        "public,example.com",
    )


_opened: list[openai.OpenAI] = []


def sdk(server: Server) -> openai.OpenAI:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    _opened.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """Close every SDK client a test opened (a socket left to the collector would warn)."""
    yield
    while _opened:
        _opened.pop().close()


def served_model(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def wait_terminal(client: openai.OpenAI, rid: str) -> Any:
    for _ in range(400):
        r = client.responses.retrieve(rid)
        if r.status not in ("queued", "in_progress"):
            return r
        time.sleep(0.05)
    raise AssertionError(f"{rid} did not finish")


def test_gpt_oss_function_tool_round_trip_through_sglang(
    sglang_resplog: Server, fake_sglang: FakeProcess
) -> None:
    client = sdk(sglang_resplog)
    model = served_model(client)
    first = client.responses.create(
        model=model, tools=WEATHER, input="What's the weather in Tokyo? [fake:function_call]"
    )
    kinds = [item.type for item in first.output]
    assert kinds == ["reasoning", "function_call"]
    call = first.output[1]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"location": "Tokyo"}
    second = client.responses.create(
        model=model,
        tools=WEATHER,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "20C sunny"}],
    )
    assert second.output_text == "It is 20°C and sunny in Tokyo."
    requests = fake_sglang.log()["requests"]
    assert len(requests) == 2
    assert all(r["sampling_params"]["skip_special_tokens"] is False for r in requests)


def test_gpt_oss_reasoning_gets_a_summary_from_a_second_generation(
    sglang_resplog: Server, fake_sglang: FakeProcess
) -> None:
    """`reasoning.summary` on gpt-oss: its analysis channel has no summary, so sglang is
    asked again, with the analysis text, and the final channel of that generation is the
    reasoning item's summary."""
    client = sdk(sglang_resplog)
    fake_sglang.reset()
    made = client.responses.create(
        model=served_model(client), input="Hello there", reasoning={"summary": "detailed"}
    )
    item: Any = made.output[0]
    assert item.type == "reasoning" and item.content and len(item.summary) == 1
    assert item.summary[0].text and made.output_text
    requests = fake_sglang.log()["requests"]
    assert len(requests) == 2
    asked = gpt_oss_encoding().decode(requests[1]["input_ids"])
    assert "Summarize it in a short paragraph" in asked
    assert item.content[0].text in asked


def test_structured_output_is_constrained_decoding_on_sglang(
    sglang_resplog: Server, fake_sglang: FakeProcess
) -> None:
    """`client.responses.parse(text_format=...)` on gpt-oss: sglang gets the schema as
    `sampling_params.json_schema` and a prompt that opens the final channel, so its grammar
    covers the answer alone; the stand-in plays back what such a grammar forces."""

    class City(pydantic.BaseModel):
        name: str
        population: int
        capital: bool

    client = sdk(sglang_resplog)
    fake_sglang.reset()
    parsed = client.responses.parse(
        model=served_model(client), input="Describe Paris.", text_format=City
    )
    assert parsed.output_parsed == City(name="constrained", population=1, capital=True)
    sent = fake_sglang.log()["requests"][-1]
    schema = json.loads(sent["sampling_params"]["json_schema"])
    assert schema["properties"]["population"] == {"title": "Population", "type": "integer"}
    assert (
        gpt_oss_encoding()
        .decode(sent["input_ids"])
        .endswith("<|start|>assistant<|channel|>final<|message|>")
    )
    assert [i.type for i in parsed.output] == ["message"]  # no analysis before the answer
    loose: Any = {"format": {"type": "json_object"}}
    made = client.responses.create(model=served_model(client), input="Paris?", text=loose)
    assert json.loads(made.output_text) == {}  # any object; the stand-in's is empty
    sent = fake_sglang.log()["requests"][-1]
    assert sent["sampling_params"]["json_schema"] == '{"type":"object"}'
    counted = client.responses.input_tokens.count(
        model=served_model(client), input="Paris?", text=loose
    )
    assert counted.input_tokens == len(sent["input_ids"])  # the opened channel counts
    # With tools on offer the output stays free (the model may call them instead).
    client.responses.create(
        model=served_model(client),
        input="Weather? [fake:function_call]",
        tools=WEATHER,
        text={"format": {"type": "json_object"}},
    )
    assert "json_schema" not in fake_sglang.log()["requests"][-1]["sampling_params"]


def test_gpt_oss_answer_logprobs_come_from_sglang(
    sglang_resplog: Server, fake_sglang: FakeProcess
) -> None:
    """sglang is asked for logprobs (`return_logprob`, `top_logprobs_num`, with text), and
    the answer's tokens carry them: only the final channel's, none of the analysis."""
    client = sdk(sglang_resplog)
    fake_sglang.reset()
    events = list(
        client.responses.create(
            model=served_model(client),
            input="Hello there",
            include=["message.output_text.logprobs"],
            top_logprobs=2,
            stream=True,
        )
    )
    sent = fake_sglang.log()["requests"][-1]
    assert (sent["return_logprob"], sent["top_logprobs_num"]) == (True, 2)
    assert "return_logprob" not in sent["sampling_params"]
    final: Any = events[-1].response  # type: ignore[union-attr]
    part = final.output[-1].content[0]
    assert part.text == "Hello! How can I help you today?"
    assert "".join(lp.token for lp in part.logprobs) == part.text
    assert all(len(lp.top_logprobs) == 2 for lp in part.logprobs)
    assert {lp.logprob for lp in part.logprobs} <= {0.0, -0.5, -1.0}  # the stand-in's scores
    streamed = [
        lp.token for e in events if e.type == "response.output_text.delta" for lp in e.logprobs
    ]  # type: ignore[union-attr]
    assert "".join(streamed) == part.text
    plain = client.responses.create(model=served_model(client), input="Hello there")
    assert "return_logprob" not in fake_sglang.log()["requests"][-1]
    assert plain.output[-1].content[0].logprobs == []  # type: ignore[union-attr]


def test_usage_is_what_sglang_reported(sglang_resplog: Server, fake_sglang: FakeProcess) -> None:
    client = sdk(sglang_resplog)
    model = served_model(client)
    one = client.responses.create(model=model, input="Hello there")
    two = client.responses.create(model=model, input="Hello again", previous_response_id=one.id)
    log = fake_sglang.log()
    prompts = [len(r["input_ids"]) for r in log["requests"]]
    assert one.usage is not None and two.usage is not None
    assert [one.usage.input_tokens, two.usage.input_tokens] == prompts
    assert two.usage.input_tokens_details.cached_tokens > 0  # the prefix cache hit on turn 2
    assert one.usage.output_tokens_details.reasoning_tokens > 0
    assert one.usage.total_tokens == one.usage.input_tokens + one.usage.output_tokens


def test_streamed_sglang_events_are_dense_and_equal_the_replay(sglang_resplog: Server) -> None:
    client = sdk(sglang_resplog)
    events = list(
        client.responses.create(
            model=served_model(client),
            stream=True,
            tools=WEATHER,
            input="Weather? [fake:preamble_tool_call]",
        )
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = {e.type for e in events}
    assert {
        "response.reasoning_text.delta",
        "response.output_text.delta",
        "response.function_call_arguments.delta",
    } <= types
    final = events[-1].response  # type: ignore[union-attr]
    assert [i.type for i in final.output] == ["reasoning", "message", "function_call"]
    assert final.output[1].phase == "commentary"
    replay = httpx.get(
        f"{sglang_resplog.base_url}/v1/responses/{final.id}/events", params={"format": "jsonl"}
    ).text.splitlines()
    assert [json.loads(line)["sequence_number"] for line in replay] == list(range(len(events)))


def test_cancel_aborts_the_sglang_request(sglang_resplog: Server, fake_sglang: FakeProcess) -> None:
    fake_sglang.configure(token_delay=0.01)
    client = sdk(sglang_resplog)
    r = client.responses.create(
        model=served_model(client), background=True, input="Say a lot [fake:long]"
    )
    fake_sglang.wait_for(lambda log: len(log["requests"]) == 1)
    time.sleep(0.2)
    cancelled = client.responses.cancel(r.id)
    assert cancelled.status == "cancelled"
    rid = fake_sglang.log()["requests"][0]["rid"]
    log = fake_sglang.wait_for(lambda log: rid in log["aborted"])
    assert rid in log["aborted"]


def test_max_output_tokens_makes_an_incomplete_response(sglang_resplog: Server) -> None:
    client = sdk(sglang_resplog)
    r = client.responses.create(
        model=served_model(client), input="Go on [fake:long]", max_output_tokens=32
    )
    assert r.status == "incomplete"
    assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage is not None and r.usage.output_tokens == 32


def test_a_server_that_dies_mid_stream_fails_the_response_and_keeps_the_partial_log(
    sglang_resplog: Server,
) -> None:
    client = sdk(sglang_resplog)
    events = list(
        client.responses.create(
            model=served_model(client), stream=True, input="Tell me [fake:drop]"
        )
    )
    assert events[-1].type == "response.failed"
    final = client.responses.retrieve(events[-1].response.id)  # type: ignore[union-attr]
    assert final.status == "failed" and final.error is not None
    assert final.error.code == "server_error" and final.error.message
    replay = httpx.get(
        f"{sglang_resplog.base_url}/v1/responses/{final.id}/events", params={"format": "jsonl"}
    ).text.splitlines()
    assert [json.loads(line)["type"] for line in replay] == [e.type for e in events]


def test_an_unknown_model_is_refused(sglang_resplog: Server) -> None:
    client = sdk(sglang_resplog)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-nonexistent", input="x")
    assert info.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_chat_upstream_tool_calls_and_usage(chat_resplog: Server, fake_chat: FakeProcess) -> None:
    client = sdk(chat_resplog)
    r = client.responses.create(
        model="tiny-chat", tools=WEATHER, input="Paris and Rome? [fake:tool_calls]"
    )
    calls = [i for i in r.output if i.type == "function_call"]
    assert [json.loads(c.arguments) for c in calls] == [{"location": "Paris"}, {"location": "Rome"}]
    assert r.output_text == "Checking both."
    sent = fake_chat.log()["requests"][0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert r.usage is not None and r.usage.input_tokens > 0 and r.usage.output_tokens > 0


def test_chat_upstream_reasoning_becomes_a_reasoning_item(chat_resplog: Server) -> None:
    client = sdk(chat_resplog)
    r = client.responses.create(model="tiny-chat", input="Hi [fake:reasoning]")
    assert [i.type for i in r.output] == ["reasoning", "message"]
    assert r.output_text == "Hello! Nice to meet you."


def test_input_tokens_is_what_sglang_is_sent(
    sglang_resplog: Server, fake_sglang: FakeProcess
) -> None:
    """The count is the harmony rendering's length: the prompt_tokens the engine reports
    for a create with the same body, continuation included."""
    client = sdk(sglang_resplog)
    model = served_model(client)
    one = client.responses.create(model=model, input="Hello there", instructions="Be brief.")
    counted = client.responses.input_tokens.count(
        model=model, input="And again?", previous_response_id=one.id
    )
    two = client.responses.create(model=model, input="And again?", previous_response_id=one.id)
    assert one.usage is not None and two.usage is not None
    assert counted.object == "response.input_tokens"
    assert counted.input_tokens == two.usage.input_tokens


def test_input_tokens_through_a_chat_upstream(chat_resplog: Server, fake_chat: FakeProcess) -> None:
    """Counted by the upstream's /tokenize; an upstream without one is a clear 400."""
    client = sdk(chat_resplog)
    model = served_model(client)
    counted = client.responses.input_tokens.count(model=model, input="one two three")
    made = client.responses.create(model=model, input="one two three")
    assert made.usage is not None and counted.input_tokens == made.usage.input_tokens
    assert fake_chat.log()["tokenize"][-1]["add_generation_prompt"] is True
    fake_chat.configure(tokenize=False)
    try:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.input_tokens.count(model=model, input="x")
        assert "cannot count tokens" in caught.value.message
    finally:
        fake_chat.configure(tokenize=True)


def test_the_upstreams_window_refuses_or_cuts_a_long_prompt(
    chat_resplog: Server, fake_chat: FakeProcess
) -> None:
    """vLLM's `/v1/models` names each model's `max_model_len` (2048 in the stand-in): a
    longer prompt is OpenAI's 400 before anything reaches the upstream's completions, and
    `truncation: "auto"` drops the oldest input to fit, counted by its `/tokenize`."""
    client = sdk(chat_resplog)
    model = served_model(client)
    long = " ".join(["w"] * 2100)
    fake_chat.reset()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input=long)
    assert caught.value.code == "context_length_exceeded"
    assert fake_chat.log()["requests"] == []
    made = client.responses.create(
        model=model,
        truncation="auto",
        input=[{"role": "user", "content": long}, {"role": "user", "content": "one two three"}],
    )
    sent = fake_chat.log()["requests"][-1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["one two three"]
    assert made.usage is not None and made.usage.input_tokens < 2048


def test_chat_upstream_logprobs_reach_the_output_text(
    chat_resplog: Server, fake_chat: FakeProcess
) -> None:
    """Asked for, logprobs are requested from the upstream (`logprobs`, `top_logprobs`) and
    its per-token entries become the `output_text`'s, alternatives and all."""
    client = sdk(chat_resplog)
    model = served_model(client)
    fake_chat.reset()
    made = client.responses.create(
        model=model, input="Hi", include=["message.output_text.logprobs"], top_logprobs=2
    )
    sent = fake_chat.log()["requests"][-1]
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    part: Any = made.output[-1].content[0]  # type: ignore[union-attr]
    assert "".join(lp.token for lp in part.logprobs) == part.text
    first = part.logprobs[0]
    assert first.logprob == -0.25 and first.bytes == list(first.token.encode())
    assert [(t.token, t.logprob) for t in first.top_logprobs] == [
        (first.token, -0.25),
        (" maybe", -1.5),
    ]
    plain = client.responses.create(model=model, input="Hi")
    assert "logprobs" not in fake_chat.log()["requests"][-1]
    assert "prompt_cache_key" not in fake_chat.log()["requests"][-1]
    # The hints an OpenAI-compatible upstream uses go with the request.
    client.responses.create(
        model=model, input="Hi", prompt_cache_key="k1", safety_identifier="u1", service_tier="flex"
    )
    hinted = fake_chat.log()["requests"][-1]
    assert (hinted["prompt_cache_key"], hinted["safety_identifier"]) == ("k1", "u1")
    assert hinted["service_tier"] == "flex"
    assert plain.output[-1].content[0].logprobs == []  # type: ignore[union-attr]


def test_a_text_only_engine_refuses_an_image_naming_the_model(sglang_resplog: Server) -> None:
    client = sdk(sglang_resplog)
    model = served_model(client)
    image: Any = {
        "type": "input_image",
        "detail": "auto",
        "image_url": "data:image/png;base64,iVBORw0KGgo=",
    }
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=model, input=[{"role": "user", "content": [image]}])
    assert f"The model '{model}' does not take image input" in caught.value.message


def test_a_chat_upstream_gets_images_as_parts_and_files_as_text(
    chat_resplog: Server, fake_chat: FakeProcess
) -> None:
    client = sdk(chat_resplog)
    notes = "data:text/plain;base64," + base64.b64encode(b"milk, eggs").decode()
    content: Any = [
        {"type": "input_text", "text": "Read these."},
        {"type": "input_image", "detail": "high", "image_url": "https://example.com/cat.png"},
        {"type": "input_file", "file_data": notes, "filename": "list.txt"},
    ]
    fake_chat.reset()
    client.responses.create(
        model=served_model(client), input=[{"role": "user", "content": content}]
    )
    sent = fake_chat.log()["requests"][0]["messages"][-1]["content"]
    assert sent == [
        {"type": "text", "text": "Read these."},
        {
            "type": "image_url",
            "image_url": {"url": "https://example.com/cat.png", "detail": "high"},
        },
        {"type": "text", "text": "[file list.txt]\nmilk, eggs"},
    ]


def _last_failure(server: Server) -> dict[str, Any]:
    """The facts of the newest `response.failed` in the server's log."""
    import asyncio

    import asyncpg

    from tests.e2e.conftest import _pg_dsn

    async def read() -> Any:
        conn = await asyncpg.connect(_pg_dsn(server.database_url))
        try:
            return await conn.fetchval(
                "SELECT facts FROM events WHERE type = 'response.failed' "
                "ORDER BY recorded_at DESC LIMIT 1"
            )
        finally:
            await conn.close()

    facts = asyncio.run(read())
    return dict(json.loads(facts))


@pytest.mark.parametrize("stream", [False, True])
def test_sglangs_in_stream_refusal_before_any_output_is_a_400(
    sglang_resplog: Server, fake_sglang: FakeProcess, stream: bool
) -> None:
    """sglang refuses a prompt its context checks reject as an error chunk after its 200
    (here: more draft tokens than resplog learned of at start, so resplog's own check let it
    through). Nothing of the response was sent yet, so the create is OpenAI's 400, plain or
    streamed; the log keeps the failed response and the engine's words."""
    client = sdk(sglang_resplog)
    model = served_model(client)
    fake_sglang.configure(speculative_draft_tokens=131072)
    try:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model=model, input="Hi", stream=stream)
        asked = fake_sglang.log()["requests"]
    finally:
        fake_sglang.reset()  # the module's server is shared with tests that take no fake
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"
    assert asked, "the engine was asked"
    facts = _last_failure(sglang_resplog)
    assert facts["reason"] == "context_length_exceeded"
    assert "is longer than the model's context length" in facts["detail"]
    assert fake_sglang.url not in caught.value.message  # the operator's detail stays in the log


def test_a_refusal_once_the_response_went_out_is_its_response_failed(
    sglang_resplog: Server, fake_sglang: FakeProcess
) -> None:
    """Where the response reached its client before the engine refused it (a background
    create answers at once; a socket streams its events from the log as they come), the
    refusal is the response's `response.failed`, the engine's address not in it."""
    client = sdk(sglang_resplog)
    model = served_model(client)
    fake_sglang.configure(speculative_draft_tokens=131072)
    try:
        queued = client.responses.create(model=model, input="Hi", background=True)
        assert queued.status in ("queued", "in_progress")
        ended = wait_terminal(client, queued.id)
        with client.responses.connect() as conn:
            conn.response.create(model=model, input="Hi")
            kinds = []
            while not kinds or kinds[-1] not in ("response.failed", "error"):
                kinds.append(json.loads(conn.recv_bytes())["type"])
    finally:
        fake_sglang.reset()
    assert ended.status == "failed" and ended.error is not None
    assert fake_sglang.url not in ended.error.message
    assert kinds[0] == "response.created" and kinds[-1] == "response.failed"
