"""resplog end to end on a real engine: `resplog serve --engine openai-chat` in front of
vLLM (CPU, tiny random-weight Llama), driven by the official openai SDK, on PostgreSQL.

`ignore_eos` (sent to vLLM with `--engine-extra-body`) keeps the random model from ending
early, so every length below is the budget's."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.realengine.conftest import MODEL, metric, running_after

pytestmark = pytest.mark.realengine


@pytest.fixture(scope="module")
def resplog(vllm: str, fresh_pg: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp: Path = tmp_path_factory.mktemp("resplog-vllm")
    srv = start_server(
        fresh_pg(),
        "postgres",
        tmp / "server.log",
        engine=(
            "--engine",
            "openai-chat",
            "--engine-url",
            vllm,
            "--engine-extra-body",
            json.dumps({"ignore_eos": True}),
        ),
    )
    yield srv
    stop_server(srv)


@pytest.fixture
def client(resplog: Server) -> Iterator[openai.OpenAI]:
    """The SDK's client, closed after the test: a pooled connection left open is a
    ResourceWarning, an error under this suite's warnings filter, whenever it is collected."""
    with openai.OpenAI(base_url=f"{resplog.base_url}/v1", api_key="unused", max_retries=0) as c:
        yield c


def test_streaming_with_usage_and_a_budget_that_runs_out(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]
    events = list(
        client.responses.create(model=MODEL, input="Hello there", stream=True, max_output_tokens=24)
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert any(e.type == "response.output_text.delta" for e in events)
    final = events[-1].response  # type: ignore[union-attr]
    assert events[-1].type == "response.incomplete"
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.output_tokens == 24 and final.usage.input_tokens > 0
    assert final.usage.total_tokens == final.usage.input_tokens + 24
    assert client.responses.retrieve(final.id) == final


def test_cancel_stops_the_engine(client: openai.OpenAI, vllm: str) -> None:
    budget = 3000
    before = metric(vllm, "vllm:generation_tokens_total")
    r = client.responses.create(
        model=MODEL, input="Go on", background=True, max_output_tokens=budget
    )
    with client.responses.retrieve(r.id, stream=True) as stream:  # closed when left
        for event in stream:
            if event.type == "response.output_text.delta":
                break
    assert client.responses.cancel(r.id).status == "cancelled"
    assert running_after(vllm, within=30) == 0
    generated = metric(vllm, "vllm:generation_tokens_total") - before
    assert generated < budget / 2, f"vLLM generated {generated} tokens for a cancelled response"


def test_32_concurrent_streams(resplog: Server) -> None:
    aclient = openai.AsyncOpenAI(base_url=f"{resplog.base_url}/v1", api_key="unused", max_retries=0)

    async def one(i: int) -> tuple[list[int], Any]:
        stream = await aclient.responses.create(
            model=MODEL, input=f"Stream {i}", stream=True, max_output_tokens=16
        )
        events = [e async for e in stream]
        return [e.sequence_number for e in events], events[-1]

    async def all_of_them() -> list[tuple[list[int], Any]]:
        async with aclient:
            return await asyncio.gather(*(one(i) for i in range(32)))

    start = time.monotonic()
    results = asyncio.run(all_of_them())
    assert time.monotonic() - start < 600
    for seqs, last in results:
        assert seqs == list(range(len(seqs)))
        assert last.type == "response.incomplete"
        assert last.response.usage.output_tokens == 16


def test_input_tokens_is_what_the_engine_then_counts(client: openai.OpenAI) -> None:
    """Counted by vLLM's `/tokenize` from the very chat request a create sends."""
    body: Any = {"model": MODEL, "input": "Count me, please.", "instructions": "Be brief."}
    counted = client.responses.input_tokens.count(**body)
    made = client.responses.create(**body, max_output_tokens=16)
    assert made.usage is not None and counted.input_tokens == made.usage.input_tokens


def test_json_schema_is_decoded_under_the_schema(client: openai.OpenAI) -> None:
    """vLLM's guided decoding (`response_format`) keeps even random weights to the schema.
    The document the answer opens with validates (`ignore_eos`, which this suite sends to
    keep random weights from stopping early, lets the model go on once it is complete)."""
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    made = client.responses.create(
        model=MODEL,
        input="Answer in JSON.",
        max_output_tokens=48,
        text={
            "format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
        },
    )
    value, _ = json.JSONDecoder().raw_decode(made.output_text.lstrip())
    assert isinstance(value, dict) and set(value) == {"ok"} and isinstance(value["ok"], bool)


def test_logprobs_come_from_the_engine(client: openai.OpenAI) -> None:
    made = client.responses.create(
        model=MODEL,
        input="Hello there",
        max_output_tokens=16,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    part: Any = made.output[-1].content[0]  # type: ignore[union-attr]
    assert made.usage is not None and len(part.logprobs) == made.usage.output_tokens
    assert all(lp.logprob <= 0 and len(lp.top_logprobs) == 2 for lp in part.logprobs)
