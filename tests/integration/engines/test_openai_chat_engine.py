"""OpenAIChatEngine against the fake chat-completions server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.engines._http import Timeouts
from adapters.engines.openai_chat import OpenAIChatEngine
from adapters.tools.images import ImageHosts
from domain.errors import EngineError
from domain.generation import AnyDelta, Finished, Prompt, ReasoningDelta, TextDelta, TokenUsage
from domain.objects import InputImage, InputMessage
from tests.fakes.process import FakeProcess
from tests.fakes.prompts import WEATHER, answer, make_prompt, turn, user
from tests.fakes.responses import validated


@contextlib.asynccontextmanager
async def engine(fake: FakeProcess, **kw: Any) -> AsyncIterator[OpenAIChatEngine]:
    async with OpenAIChatEngine(fake.url, **kw) as e:
        yield e


async def run(e: OpenAIChatEngine, prompt: Prompt) -> list[AnyDelta]:
    return [d async for d in e.generate(prompt)]


def ask(text: str, **kw: Any) -> Prompt:
    return make_prompt([user(text)], tools=[WEATHER], model="tiny-chat", **kw)


async def test_start_lists_the_served_models(fake_chat: FakeProcess) -> None:
    async with engine(fake_chat) as e:
        assert e.models() == ["tiny-chat"]
        assert await e.ready()


async def test_a_base_url_ending_in_v1_works_too(fake_chat: FakeProcess) -> None:
    async with engine(fake_chat) as e, OpenAIChatEngine(fake_chat.url + "/v1/") as f:
        assert e.base_url == f.base_url


async def test_a_model_the_upstream_does_not_serve_is_refused(fake_chat: FakeProcess) -> None:
    e = OpenAIChatEngine(fake_chat.url, model="gpt-5")
    try:
        with pytest.raises(EngineError, match="does not serve 'gpt-5'") as err:
            await e.start()
        assert err.value.code == "model_not_found"
    finally:
        await e.aclose()


async def test_the_request_carries_history_tools_and_usage_option(fake_chat: FakeProcess) -> None:
    prompt = make_prompt(
        [user("Again")],
        history=[turn([user("Hi")], [answer("Hello!")])],
        tools=[WEATHER],
        instructions="Be brief.",
        max_output_tokens=20,
        model="another-name",
    )
    async with engine(fake_chat) as e:
        await run(e, prompt)
    body = fake_chat.log()["requests"][-1]
    assert body["model"] == "tiny-chat"  # the prompt's model is not served: the default is
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 20
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["tools"][0]["function"]["name"] == "get_weather"


async def test_extra_body_fields_are_sent_as_is(fake_chat: FakeProcess) -> None:
    async with engine(fake_chat, extra_body={"min_tokens": 3, "top_k": 5}) as e:
        await run(e, ask("Hi"))
    body = fake_chat.log()["requests"][-1]
    assert (body["min_tokens"], body["top_k"]) == (3, 5)


async def test_plain_text_makes_a_completed_response(fake_chat: FakeProcess) -> None:
    async with engine(fake_chat) as e:
        deltas = await run(e, ask("Hi"))
    response = validated(deltas, "tiny-chat")
    assert response.status == "completed"
    assert response.output_text == "Hello! How can I help you today?"


@pytest.mark.parametrize("scenario", ["reasoning", "reasoning_field"])
async def test_reasoning_becomes_a_reasoning_item(fake_chat: FakeProcess, scenario: str) -> None:
    async with engine(fake_chat) as e:
        deltas = await run(e, ask(f"[fake:{scenario}]"))
    reasoning = "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
    assert reasoning == "The user greets me; reply kindly."
    response = validated(deltas, "tiny-chat")
    assert [o.type for o in response.output] == ["reasoning", "message"]
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 6


async def test_tool_calls_become_function_calls(fake_chat: FakeProcess) -> None:
    async with engine(fake_chat) as e:
        deltas = await run(e, ask("[fake:tool_calls]"))
    response = validated(deltas, "tiny-chat")
    calls = [o for o in response.output if o.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("call_a1", "get_weather", '{"location": "Paris"}'),
        ("call_b2", "get_weather", '{"location": "Rome"}'),
    ]
    assert response.status == "completed"


async def test_usage_comes_from_the_final_chunk(fake_chat: FakeProcess) -> None:
    fake_chat.configure(cached_tokens=3)
    async with engine(fake_chat) as e:
        deltas = await run(e, ask("Hi"))
    assert deltas[-1] == Finished(
        reason="stop",
        usage=TokenUsage(input_tokens=4, cached_tokens=3, output_tokens=7, reasoning_tokens=0),
    )


async def test_max_tokens_cuts_with_length(fake_chat: FakeProcess) -> None:
    async with engine(fake_chat) as e:
        deltas = await run(e, ask("[fake:long]", max_output_tokens=10))
    finished = deltas[-1]
    assert isinstance(finished, Finished)
    assert finished.reason == "length"
    assert finished.usage.output_tokens == 10
    assert validated(deltas, "tiny-chat").status == "incomplete"


async def test_each_chunk_is_yielded_as_parsed_however_much_a_read_brings(
    fake_chat: FakeProcess,
) -> None:
    async with engine(fake_chat) as e:
        stream = e.generate(ask("[fake:long]"))
        deltas = [await anext(stream)]
        await asyncio.sleep(0.2)  # the rest of the answer waits in one buffer
        deltas += [d async for d in stream]
    texts = [d.text for d in deltas if isinstance(d, TextDelta)]
    assert texts == [f" w{i}" for i in range(200)]  # nothing merged: batching is the runner's
    assert isinstance(deltas[-1], Finished)


async def test_closing_the_iterator_closes_the_stream_and_generation_stops(
    fake_chat: FakeProcess,
) -> None:
    fake_chat.configure(token_delay=0.01)
    async with engine(fake_chat) as e:
        stream = e.generate(ask("[fake:long]"))
        assert isinstance(await anext(stream), TextDelta)
        await stream.aclose()
    log = fake_chat.wait_for(lambda log: log["disconnected"])
    (cid,) = log["disconnected"]
    assert log["finished"][cid] == "disconnected"


@pytest.mark.parametrize(
    ("scenario", "code", "match"),
    [
        ("error_400", "engine_bad_request", "HTTP 400: This model's maximum context length"),
        ("error_500", "engine_http_error", "HTTP 500: Internal Server Error"),
        ("stream_error", "engine_stream_error", "engine crashed"),
        ("drop", "engine_disconnected", "dropped the connection mid-stream"),
    ],
)
async def test_failures_are_engine_errors_that_say_what(
    fake_chat: FakeProcess, scenario: str, code: str, match: str
) -> None:
    async with engine(fake_chat) as e:
        with pytest.raises(EngineError, match=match) as err:
            await run(e, ask(f"[fake:{scenario}]"))
    assert err.value.code == code


async def test_a_stall_times_out(fake_chat: FakeProcess) -> None:
    async with engine(fake_chat, timeouts=Timeouts(between_tokens=0.3)) as e:
        with pytest.raises(EngineError, match="between tokens") as err:
            await run(e, ask("[fake:stall]"))
    assert err.value.code == "engine_timeout"
    assert fake_chat.wait_for(lambda log: log["disconnected"])["disconnected"]


async def test_nothing_listening_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OpenAIChatEngine(f"http://127.0.0.1:{port}", model="m")
    try:
        assert not await e.ready()
        with pytest.raises(EngineError, match="cannot connect") as err:
            await run(e, ask("Hi"))
        assert err.value.code == "engine_unavailable"
    finally:
        await e.aclose()


async def test_a_wrong_api_key_is_unauthorized() -> None:
    fake = FakeProcess("tests.fakes.chat_server", "--api-key", "right")
    try:
        async with engine(fake, api_key="right") as e:
            assert isinstance((await run(e, ask("Hi")))[-1], Finished)
        e = OpenAIChatEngine(fake.url, api_key="wrong")
        try:
            with pytest.raises(EngineError, match="HTTP 401: Incorrect API key") as err:
                await e.start()
            assert err.value.code == "engine_unauthorized"
        finally:
            await e.aclose()
    finally:
        fake.stop()


async def test_an_image_on_a_host_the_rule_refuses_never_reaches_the_upstream(
    fake_chat: FakeProcess,
) -> None:
    # vLLM fetches an `image_url` itself: one naming this box's loopback (or a cloud's
    # metadata address) would have it reach what the client cannot.
    fake_chat.reset()
    async with engine(fake_chat, check_images=ImageHosts().check) as e:
        for url in ("http://127.0.0.1:9/x.png", "http://[64:ff9b::a9fe:a9fe]/latest/"):
            sneaky = InputMessage(id="msg_i", role="user", content=[InputImage(image_url=url)])
            prompt = make_prompt([sneaky], model="tiny-chat")
            with pytest.raises(EngineError) as refused:
                await run(e, prompt)
            assert refused.value.code == "invalid_prompt"
            with pytest.raises(EngineError):
                await e.count_tokens(prompt)
    assert fake_chat.log()["requests"] == []
