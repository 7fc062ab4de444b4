"""SglangEngine against the fake sglang: each protocol fact of docs/engines.md it relies on."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest

from adapters.engines._http import Timeouts
from adapters.engines.harmony import HarmonyParser, gpt_oss_encoding
from adapters.engines.sglang import SglangEngine
from adapters.wiring import build_engine
from domain.errors import EngineError
from domain.generation import AnyDelta, Finished, FunctionCallStart, Prompt, TextDelta
from service.settings import Settings
from tests.fakes.plugin import API_KEY
from tests.fakes.process import FakeProcess
from tests.fakes.prompts import WEATHER, call, make_prompt, tool_output, turn, user
from tests.fakes.responses import validated
from tests.fakes.sglang_server import SAMPLING_KEYS
from tests.fakes.transcripts import TRANSCRIPTS, long_answer

STYLES = ["fake_sglang", "fake_sglang_incremental", "fake_sglang_legacy"]


@pytest.fixture(params=STYLES)
def any_sglang(request: pytest.FixtureRequest) -> FakeProcess:
    """The fake in each streaming style: 0.5.23 cumulative, incremental, 0.5.2 ids-delta."""
    fake: FakeProcess = request.getfixturevalue(request.param)
    return fake


@contextlib.asynccontextmanager
async def engine(fake: FakeProcess, **kw: Any) -> AsyncIterator[SglangEngine]:
    async with SglangEngine(fake.url, **kw) as e:
        yield e


async def run(e: SglangEngine, prompt: Prompt) -> list[AnyDelta]:
    return [d async for d in e.generate(prompt)]


def ask(text: str, **kw: Any) -> Prompt:
    return make_prompt([user(text)], tools=[WEATHER], **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- start-up, info, health ------------------------------------------------------------


async def test_start_learns_the_served_model_and_context(fake_sglang: FakeProcess) -> None:
    async with engine(fake_sglang) as e:
        assert e.models() == ["gpt-oss-120b"]
        assert e.model_type == "gpt_oss"
        assert e.context_length == 131072
        assert await e.ready()


async def test_a_configured_model_name_is_what_it_serves(fake_sglang: FakeProcess) -> None:
    async with engine(fake_sglang, model="gpt-oss") as e:
        assert e.models() == ["gpt-oss"]


async def test_0_5_2_without_model_info_falls_back_to_get_model_info(
    fake_sglang_legacy: FakeProcess,
) -> None:
    async with engine(fake_sglang_legacy) as e:
        assert e.models() == ["openai/gpt-oss-120b"]  # 0.5.2 has only model_path


async def test_without_either_info_endpoint_v1_models_names_it(fake_sglang: FakeProcess) -> None:
    fake_sglang.configure(no_model_info=True)
    async with engine(fake_sglang) as e:
        assert e.models() == ["gpt-oss-120b"]


async def test_ready_is_false_while_sglang_is_unhealthy(fake_sglang: FakeProcess) -> None:
    fake_sglang.configure(healthy=False)
    async with engine(fake_sglang) as e:
        assert not await e.ready()


async def test_ready_is_false_when_nothing_listens() -> None:
    e = SglangEngine(f"http://127.0.0.1:{free_port()}")
    try:
        assert not await e.ready()
    finally:
        await e.aclose()


async def test_start_fails_clearly_when_nothing_listens() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    e = SglangEngine(url)
    try:
        with pytest.raises(EngineError, match=f"cannot connect to sglang at {url}") as err:
            await e.start()
        assert err.value.code == "engine_unavailable"
        with pytest.raises(EngineError, match="cannot connect") as err:
            await run(e, ask("Hi"))
        assert err.value.code == "engine_unavailable"
    finally:
        await e.aclose()


async def test_the_api_key_is_sent_as_a_bearer_token(fake_sglang_keyed: FakeProcess) -> None:
    async with engine(fake_sglang_keyed, api_key=API_KEY) as e:
        deltas = await run(e, ask("Hi"))
        assert isinstance(deltas[-1], Finished)


async def test_a_missing_api_key_is_unauthorized(fake_sglang_keyed: FakeProcess) -> None:
    e = SglangEngine(fake_sglang_keyed.url)
    try:
        assert await e.ready()  # /health is not protected
        with pytest.raises(EngineError, match="HTTP 401: Unauthorized") as err:
            await e.start()
        assert err.value.code == "engine_unauthorized"
    finally:
        await e.aclose()


# --- the request -----------------------------------------------------------------------


async def test_the_request_is_rendered_ids_with_known_sampling_params(
    fake_sglang: FakeProcess,
) -> None:
    prompt = ask("Hi", temperature=0.7, top_p=0.9, max_output_tokens=64)
    async with engine(fake_sglang) as e:
        await run(e, prompt)
        body = fake_sglang.log()["requests"][-1]
        assert body["input_ids"] == e.renderer.render(prompt)
    assert body["stream"] is True
    assert re.fullmatch(r"[0-9a-f]{32}", body["rid"])
    params = body["sampling_params"]
    assert set(params) <= SAMPLING_KEYS
    assert params == {
        "max_new_tokens": 64,
        "stop_token_ids": [200002, 200012],
        "skip_special_tokens": False,
        "temperature": 0.7,
        "top_p": 0.9,
    }


async def test_penalties_are_sent_only_when_set(fake_sglang: FakeProcess) -> None:
    """The Open Responses `presence_penalty` and `frequency_penalty`: sglang's own
    sampling keys of the same names, left out at 0 (sglang's default)."""
    prompt = msgspec.structs.replace(ask("Hi"), presence_penalty=0.5, frequency_penalty=-1.0)
    async with engine(fake_sglang) as e:
        await run(e, prompt)
        await run(e, ask("Hi"))
    first, plain = (r["sampling_params"] for r in fake_sglang.log()["requests"][-2:])
    assert (first["presence_penalty"], first["frequency_penalty"]) == (0.5, -1.0)
    assert set(first) <= SAMPLING_KEYS
    assert "presence_penalty" not in plain and "frequency_penalty" not in plain


async def test_without_max_output_tokens_the_budget_is_the_configured_default(
    fake_sglang: FakeProcess,
) -> None:
    async with engine(fake_sglang, max_new_tokens=1000) as e:
        await run(e, ask("Hi"))
    assert fake_sglang.log()["requests"][-1]["sampling_params"]["max_new_tokens"] == 1000


async def test_the_budget_is_capped_by_the_context_length(fake_sglang: FakeProcess) -> None:
    """sglang refuses `prompt + max_new_tokens >= context`: the budget stops one short."""
    fake_sglang.configure(context_length=300)
    async with engine(fake_sglang) as e:
        prompt = ask("Hi", max_output_tokens=5000)
        deltas = await run(e, prompt)
        room = 300 - len(e.renderer.render(prompt)) - 1
    assert fake_sglang.log()["requests"][-1]["sampling_params"]["max_new_tokens"] == room
    assert isinstance(deltas[-1], Finished)


async def test_speculative_decodings_draft_tokens_are_kept_out_of_the_budget(
    fake_sglang: FakeProcess,
) -> None:
    """With EAGLE sglang counts `speculative_num_draft_tokens` into the prompt before its
    context checks; `/server_info` says how many, and the budget leaves them room."""
    fake_sglang.configure(context_length=300, speculative_draft_tokens=16)
    async with engine(fake_sglang) as e:
        prompt = ask("Hi", max_output_tokens=5000)
        deltas = await run(e, prompt)
        room = 300 - 16 - len(e.renderer.render(prompt)) - 1
        assert (e.draft_tokens, e.context_window("gpt-oss-120b")) == (16, 300 - 16 - 1)
    assert fake_sglang.log()["requests"][-1]["sampling_params"]["max_new_tokens"] == room
    assert isinstance(deltas[-1], Finished)


async def test_a_prompt_that_fits_only_without_the_drafts_is_context_length_exceeded(
    fake_sglang: FakeProcess,
) -> None:
    async with engine(fake_sglang) as e:
        prompt = ask("Hi")
        n = len(e.renderer.render(prompt))
        fake_sglang.configure(context_length=n + 8, speculative_draft_tokens=16)
        await e.start()  # learns the new settings
        with pytest.raises(EngineError, match="16 kept for draft tokens") as err:
            await run(e, prompt)
    assert err.value.code == "context_length_exceeded"
    assert fake_sglang.log()["requests"] == []


async def test_a_prompt_longer_than_the_context_is_refused(fake_sglang: FakeProcess) -> None:
    fake_sglang.configure(context_length=50)
    async with engine(fake_sglang) as e:
        with pytest.raises(EngineError, match="holds 50") as err:
            await run(e, ask("Hi"))
    assert err.value.code == "context_length_exceeded"
    assert fake_sglang.log()["requests"] == []


async def test_unknown_sampling_params_are_a_400_that_says_which(fake_sglang: FakeProcess) -> None:
    class Sloppy(SglangEngine):
        def sampling_params(self, prompt: Prompt, prompt_tokens: int) -> dict[str, Any]:
            return {**super().sampling_params(prompt, prompt_tokens), "max_tokens": 5}

    async with Sloppy(fake_sglang.url) as e:
        with pytest.raises(EngineError, match=r"HTTP 400: Unknown sampling parameter\(s\): max_t"):
            await run(e, ask("Hi"))


async def test_top_p_0_is_sent_as_top_k_1(fake_sglang: FakeProcess) -> None:
    """resplog accepts top_p 0 (as OpenAI does); sglang refuses it, so the likeliest token
    alone is asked as top_k 1."""
    async with engine(fake_sglang) as e:
        deltas = await run(e, ask("Hi", top_p=0.0))
    params = fake_sglang.log()["requests"][-1]["sampling_params"]
    assert params["top_k"] == 1 and "top_p" not in params
    assert set(params) <= SAMPLING_KEYS
    assert isinstance(deltas[-1], Finished)


class _Raw(SglangEngine):
    """Sends `sampling_params` as a test sets them, past the adapter's own care."""

    params: dict[str, Any] = {}

    def sampling_params(self, prompt: Prompt, prompt_tokens: int) -> dict[str, Any]:
        return {**super().sampling_params(prompt, prompt_tokens), **self.params}


@pytest.mark.parametrize(
    ("params", "drafts", "code", "match"),
    [
        ({"top_p": 0.0}, 0, "engine_bad_request", r"top_p must be in \(0, 1\], got 0.0"),
        ({"temperature": -1.0}, 0, "engine_bad_request", "temperature must be a non-negative"),
        (
            {"max_new_tokens": 131072},
            0,
            "context_length_exceeded",
            "Requested token count exceeds the model's maximum context length of 131072",
        ),
        ({}, 131072, "context_length_exceeded", r"The input \(\d+ tokens\) is longer than"),
    ],
)
async def test_sglangs_in_stream_refusals_are_a_400_or_context_length_exceeded(
    any_sglang: FakeProcess, params: dict[str, Any], drafts: int, code: str, match: str
) -> None:
    """sglang streams what its checks refuse as an error chunk with `code: 400` after the
    200: the same failure as a 400 answer, and the context checks as such."""
    any_sglang.configure(speculative_draft_tokens=drafts)
    e = _Raw(any_sglang.url)
    e.params = params
    try:
        await e.start()
        e.draft_tokens = 0  # as an adapter that did not know of them
        with pytest.raises(EngineError, match=match) as err:
            await run(e, ask("Hi"))
    finally:
        await e.aclose()
    assert err.value.code == code
    assert any_sglang.log()["aborts"] == []  # sglang ended it: nothing to abort


# --- the stream ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scenario",
    ["reasoning_final", "function_call", "preamble_tool_call", "unicode", "no_reasoning"],
)
async def test_each_transcript_streams_as_harmony_parses_it(
    any_sglang: FakeProcess, scenario: str
) -> None:
    async with engine(any_sglang) as e:
        deltas = await run(e, ask(f"[fake:{scenario}] go"))
        tokens = e.renderer.encoding.encode(TRANSCRIPTS[scenario], allowed_special="all")
        expected = HarmonyParser(e.renderer.encoding).feed(tokens)
    text = "".join(getattr(d, "text", "") for d in deltas[:-1])
    assert text == "".join(getattr(d, "text", "") for d in expected)
    assert [type(d) for d in deltas if not hasattr(d, "text")][:-1] == [
        type(d) for d in expected if not hasattr(d, "text")
    ]
    finished = deltas[-1]
    assert isinstance(finished, Finished)
    assert finished.reason == "stop"
    assert finished.usage.output_tokens == len(tokens)  # the stop token included
    assert validated(deltas).status == "completed"


async def test_usage_counts_prompt_output_cache_and_reasoning(fake_sglang: FakeProcess) -> None:
    async with engine(fake_sglang) as e:
        prompt = ask("Hi")
        await run(e, prompt)
        deltas = await run(e, prompt)  # the same prompt again: sglang's prefix cache hits
        n_prompt = len(e.renderer.render(prompt))
    usage = deltas[-1].usage  # type: ignore[union-attr]
    analysis = TRANSCRIPTS["reasoning_final"].split("<|start|>")[0]
    assert usage.input_tokens == n_prompt
    assert usage.cached_tokens == n_prompt - 1
    assert usage.reasoning_tokens == len(
        e.renderer.encoding.encode(analysis, allowed_special="all")
    )
    assert usage.output_tokens > usage.reasoning_tokens


async def test_a_tool_result_continues_the_turn(fake_sglang: FakeProcess) -> None:
    question = user("[fake:function_call] Weather in Tokyo?")
    async with engine(fake_sglang) as e:
        first = await run(e, make_prompt([question], tools=[WEATHER]))
        fc = validated(first).output[-1]
        assert fc.type == "function_call"
        follow = make_prompt(
            [tool_output("call_1", '{"temp": 20}')],
            tools=[WEATHER],
            history=[turn([question], [call("call_1", fc.name, fc.arguments)])],
        )
        deltas = await run(e, follow)
    answer = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    assert answer == "It is 20°C and sunny in Tokyo."


async def test_max_output_tokens_cuts_with_length(any_sglang: FakeProcess) -> None:
    async with engine(any_sglang) as e:
        deltas = await run(e, ask("[fake:long]", max_output_tokens=25))
    finished = deltas[-1]
    assert isinstance(finished, Finished)
    assert finished.reason == "length"
    assert finished.usage.output_tokens == 25
    response = validated(deltas)
    assert response.status == "incomplete"
    assert response.output[-1].status == "incomplete"


async def test_a_function_call_cut_off_mid_arguments_is_well_formed(
    fake_sglang: FakeProcess,
) -> None:
    async with engine(fake_sglang) as e:
        tokens = e.renderer.encoding.encode(TRANSCRIPTS["function_call"], allowed_special="all")
        deltas = await run(e, ask("[fake:function_call]", max_output_tokens=len(tokens) - 3))
    assert any(isinstance(d, FunctionCallStart) for d in deltas)
    response = validated(deltas)
    assert response.output[-1].type == "function_call"
    assert response.output[-1].status == "incomplete"


async def test_several_ids_per_chunk_are_parsed(fake_sglang: FakeProcess) -> None:
    fake_sglang.configure(tokens_per_chunk=7)
    async with engine(fake_sglang) as e:
        deltas = await run(e, ask("[fake:preamble_tool_call]"))
    assert validated(deltas).output[-1].arguments == '{"location":"Paris"}'  # type: ignore[union-attr]


async def test_each_chunk_is_yielded_as_parsed_however_much_a_read_brings(
    fake_sglang: FakeProcess,
) -> None:
    async with engine(fake_sglang) as e:
        stream = e.generate(ask("[fake:reasoning_final]"))
        deltas = [await anext(stream)]
        await asyncio.sleep(0.2)  # the rest of the answer waits in one buffer
        deltas += [d async for d in stream]
        tokens = e.renderer.encoding.encode(TRANSCRIPTS["reasoning_final"], allowed_special="all")
        parser = HarmonyParser(e.renderer.encoding)
        one_by_one = [d for t in tokens for d in parser.feed([t])]  # one id per chunk
    assert deltas[:-1] == one_by_one  # nothing merged: batching is the runner's
    assert isinstance(deltas[-1], Finished)


# --- cancellation ----------------------------------------------------------------------


async def test_closing_the_iterator_aborts_the_request_on_sglang(fake_sglang: FakeProcess) -> None:
    fake_sglang.configure(token_delay=0.01)
    async with engine(fake_sglang) as e:
        stream = e.generate(ask("[fake:long]"))
        assert isinstance(await anext(stream), AnyDelta.__args__)  # type: ignore[attr-defined]
        await stream.aclose()
    rid = fake_sglang.log()["requests"][-1]["rid"]
    log = fake_sglang.wait_for(lambda log: log["finished"].get(rid) == "abort")
    assert rid in log["aborted"]
    assert log["finished"][rid] == "abort"
    assert rid not in log["live"]


async def test_cancelling_the_consumer_aborts_the_request(fake_sglang: FakeProcess) -> None:
    fake_sglang.configure(token_delay=0.01)
    got_one = asyncio.Event()

    async def consume(e: SglangEngine) -> None:
        async for _ in e.generate(ask("[fake:long]")):
            got_one.set()

    async with engine(fake_sglang) as e:
        task = asyncio.create_task(consume(e))
        await got_one.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    rid = fake_sglang.log()["requests"][-1]["rid"]
    assert fake_sglang.wait_for(lambda log: rid in log["aborted"])["finished"][rid] == "abort"


async def closed_early(e: SglangEngine, fake: FakeProcess) -> str:
    """Start a long generation, take one delta, close it; its rid."""
    stream = e.generate(ask("[fake:long]"))
    await anext(stream)
    await stream.aclose()
    return str(fake.log()["requests"][-1]["rid"])


async def test_with_sglangs_admin_key_an_abort_without_it_is_refused(
    fake_sglang: FakeProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """sglang's `--admin-api-key` guards `/abort_request` (ADMIN_OPTIONAL): without the
    admin key the abort never reaches the engine; the refusal is logged, the key never."""
    fake_sglang.configure(token_delay=0.01, admin_api_key="admin-secret")
    async with engine(fake_sglang) as e:
        rid = await closed_early(e, fake_sglang)
    assert "refused to abort" in caplog.text and "HTTP 401" in caplog.text
    assert rid not in fake_sglang.log()["aborted"]


async def test_the_admin_key_is_sent_on_aborts_and_the_api_key_elsewhere(
    fake_sglang: FakeProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """With both keys sglang takes only the admin key on `/abort_request` and only the api
    key elsewhere."""
    fake_sglang.configure(token_delay=0.01, api_key=API_KEY, admin_api_key="admin-secret")
    async with engine(fake_sglang, api_key=API_KEY, admin_key="admin-secret") as e:
        rid = await closed_early(e, fake_sglang)
        assert isinstance((await run(e, ask("Hi")))[-1], Finished)
    log = fake_sglang.wait_for(lambda log: log["finished"].get(rid) == "abort")
    assert rid in log["aborted"]
    assert "admin-secret" not in caplog.text


async def test_the_engine_admin_key_setting_reaches_the_aborts(fake_sglang: FakeProcess) -> None:
    """`--engine-admin-key` (`Settings.engine_admin_key`) is the engine's `admin_key`."""
    fake_sglang.configure(token_delay=0.01, admin_api_key="admin-secret")
    settings = Settings(
        engine="sglang", engine_url=fake_sglang.url, engine_admin_key="admin-secret"
    )
    e = await build_engine(settings)
    try:
        assert isinstance(e, SglangEngine)
        rid = await closed_early(e, fake_sglang)
    finally:
        await e.aclose()
    assert rid in fake_sglang.wait_for(lambda log: rid in log["aborted"])["aborted"]


async def test_a_finished_generation_is_not_aborted(fake_sglang: FakeProcess) -> None:
    async with engine(fake_sglang) as e:
        await run(e, ask("Hi"))
    assert fake_sglang.log()["aborts"] == []


async def test_abort_matches_by_prefix_so_rids_have_one_length(fake_sglang: FakeProcess) -> None:
    """Why the adapter's rids are uuid4 hex: aborting `req-1` would also stop `req-10`."""
    fake_sglang.configure(token_delay=0.02)
    tokens = gpt_oss_encoding().encode(
        "<|start|>user<|message|>[fake:long]<|end|><|start|>assistant", allowed_special="all"
    )

    async def generate(client: httpx.AsyncClient, rid: str) -> str:
        body = {
            "input_ids": tokens,
            "sampling_params": {"max_new_tokens": 500},
            "stream": True,
            "rid": rid,
        }
        async with client.stream("POST", fake_sglang.url + "/generate", json=body) as r:
            return "".join([line async for line in r.aiter_lines()])

    async with httpx.AsyncClient(timeout=30) as client:
        tasks = [asyncio.create_task(generate(client, rid)) for rid in ("req-1", "req-10", "x")]
        await fake_sglang.until(lambda log: len(log["live"]) == 3)
        await client.post(fake_sglang.url + "/abort_request", json={"rid": "req-1"})
        bodies = await asyncio.gather(*tasks[:2])
        tasks[2].cancel()
    assert all('"type": "abort"' in b and b.endswith("data: [DONE]") for b in bodies)
    assert sorted(fake_sglang.log()["aborted"]) == ["req-1", "req-10"]


async def test_a_duplicate_live_rid_is_an_engine_error(
    fake_sglang: FakeProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Fixed:
        hex = "0" * 32

    monkeypatch.setattr("adapters.engines.sglang.uuid.uuid4", Fixed)
    fake_sglang.configure(token_delay=0.01)
    async with engine(fake_sglang) as e:
        first = e.generate(ask("[fake:long]"))
        await anext(first)
        with pytest.raises(EngineError, match="Duplicate request ID") as err:
            await run(e, ask("Hi"))
        await first.aclose()
    assert err.value.code == "engine_bad_request"  # sglang's in-stream 400


# --- failures --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "code", "match"),
    [
        ("drop", "engine_disconnected", "dropped the connection mid-stream"),
        ("eof", "engine_disconnected", "ended the stream before the generation finished"),
        ("error_chunk", "engine_stream_error", "CUDA out of memory"),
        ("malformed", "engine_protocol_error", "malformed chunk"),
        ("server_abort", "engine_aborted", "KV cache exhausted"),
        ("bad_counts", "engine_protocol_error", "fits neither"),
    ],
)
async def test_a_broken_stream_is_an_engine_error_that_says_what(
    any_sglang: FakeProcess, scenario: str, code: str, match: str
) -> None:
    async with engine(any_sglang) as e:
        with pytest.raises(EngineError, match=match) as err:
            await run(e, ask(f"[fake:{scenario}]"))
    assert err.value.code == code


async def test_a_protocol_error_mid_stream_aborts_the_request(fake_sglang: FakeProcess) -> None:
    async with engine(fake_sglang) as e:
        with pytest.raises(EngineError):
            await run(e, ask("[fake:bad_counts]"))
    rid = fake_sglang.log()["requests"][-1]["rid"]
    assert rid in fake_sglang.log()["aborts"]


async def test_a_finish_without_done_still_finishes(
    fake_sglang: FakeProcess, caplog: pytest.LogCaptureFixture
) -> None:
    async with engine(fake_sglang) as e:
        deltas = await run(e, ask("[fake:no_done]"))
    assert isinstance(deltas[-1], Finished)
    assert "without sending [DONE]" in caplog.text


async def test_a_stall_between_tokens_times_out_and_aborts(fake_sglang: FakeProcess) -> None:
    async with engine(fake_sglang, timeouts=Timeouts(between_tokens=0.3)) as e:
        with pytest.raises(EngineError, match=r"sent nothing for 0\.3 s between tokens") as err:
            await run(e, ask("[fake:stall]"))
    assert err.value.code == "engine_timeout"
    rid = fake_sglang.log()["requests"][-1]["rid"]
    assert fake_sglang.wait_for(lambda log: rid in log["aborted"])["finished"][rid] == "abort"


async def test_no_first_token_times_out_and_aborts(fake_sglang: FakeProcess) -> None:
    async with engine(fake_sglang, timeouts=Timeouts(first_token=0.3)) as e:
        with pytest.raises(EngineError, match="no first token in time") as err:
            await run(e, ask("[fake:stall_first]"))
    assert err.value.code == "engine_timeout"
    rid = fake_sglang.log()["requests"][-1]["rid"]
    assert rid in fake_sglang.wait_for(lambda log: rid in log["aborted"])["aborted"]


async def test_a_server_that_never_answers_times_out_on_the_first_token() -> None:
    writers: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)  # accept, read, and never answer

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    e = SglangEngine(f"http://127.0.0.1:{port}", timeouts=Timeouts(first_token=0.3, request=0.3))
    try:
        with pytest.raises(EngineError, match="no first token in time") as err:
            await run(e, ask("Hi"))
        assert err.value.code == "engine_timeout"
    finally:
        await e.aclose()
        for writer in writers:
            writer.close()
            await writer.wait_closed()
        server.close()
        await server.wait_closed()


async def test_a_server_killed_mid_stream_is_an_engine_error(
    fake_sglang_doomed: FakeProcess,
) -> None:
    async with engine(fake_sglang_doomed) as e:
        stream = e.generate(ask("[fake:long]"))
        await anext(stream)
        fake_sglang_doomed.kill()
        with pytest.raises(EngineError) as err:
            async for _ in stream:
                pass
    assert err.value.code == "engine_disconnected"
    assert "dropped the connection" in err.value.message


async def test_many_concurrent_generations_all_finish(fake_sglang: FakeProcess) -> None:
    async with engine(fake_sglang) as e:
        results = await asyncio.gather(*(run(e, ask(f"[fake:long] {i}")) for i in range(32)))
    assert all(isinstance(r[-1], Finished) and r[-1].reason == "stop" for r in results)
    rids = {b["rid"] for b in fake_sglang.log()["requests"]}
    assert len(rids) == 32
    words = long_answer(400).split("<|message|>")[-1].removesuffix("<|return|>")
    assert all("".join(d.text for d in r if isinstance(d, TextDelta)) == words for r in results)


async def test_the_fake_aborts_a_request_whose_client_left_as_sglang_does(
    fake_sglang: FakeProcess,
) -> None:
    """No abort call: sglang notices the disconnect and aborts by itself a little later."""
    fake_sglang.configure(token_delay=0.01, disconnect_abort_after=0.2)
    tokens = gpt_oss_encoding().encode(
        "<|start|>user<|message|>[fake:long]<|end|><|start|>assistant", allowed_special="all"
    )
    params = {"max_new_tokens": 2000}
    body = {"input_ids": tokens, "sampling_params": params, "stream": True, "rid": "gone-client"}
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", fake_sglang.url + "/generate", json=body) as response,
    ):
        await anext(response.aiter_raw())
    log = await fake_sglang.until(lambda log: "gone-client" in log["finished"])
    assert log["finished"]["gone-client"] == "abort_disconnected"
    assert log["aborts"] == []


async def test_the_fake_answers_a_non_streamed_generate_with_the_whole_output(
    fake_sglang_incremental: FakeProcess,
) -> None:
    tokens = gpt_oss_encoding().encode(
        "<|start|>user<|message|>Hi<|end|><|start|>assistant", allowed_special="all"
    )
    body = {"input_ids": tokens, "sampling_params": {"max_new_tokens": 500}}
    async with httpx.AsyncClient(timeout=30) as client:
        out = (await client.post(fake_sglang_incremental.url + "/generate", json=body)).json()
    expected = gpt_oss_encoding().encode(TRANSCRIPTS["reasoning_final"], allowed_special="all")
    assert out["output_ids"] == expected
    assert out["meta_info"]["completion_tokens"] == len(expected)
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": 200002}
    # Special tokens are skipped from `text` but the channel names are plain words: why the
    # adapter parses harmony from the ids.
    assert out["text"] == (
        "analysisThe user says hello. I should greet them back briefly."
        "assistantfinalHello! How can I help you today?"
    )
