"""OpenAIChatEngine against a real engine: vLLM (CPU) serving a tiny random-weight Llama.

Needs `bench/realengine/setup.sh` (a separate 3.5 GB venv); deselected by default, run with
`pytest -m realengine`. Random weights write random text, but streaming, usage, stopping,
abort and batching are the engine's own.
"""

from __future__ import annotations

import asyncio

import pytest

from adapters.engines.openai_chat import OpenAIChatEngine
from domain.generation import AnyDelta, Finished, Prompt, TextDelta
from tests.fakes.prompts import make_prompt, user
from tests.fakes.responses import validated
from tests.realengine.conftest import MODEL, metric, running_after

pytestmark = pytest.mark.realengine


def ask(text: str = "Hello there", **kw: object) -> Prompt:
    return make_prompt([user(text)], model=MODEL, **kw)  # type: ignore[arg-type]


async def run(engine: OpenAIChatEngine, prompt: Prompt) -> list[AnyDelta]:
    return [d async for d in engine.generate(prompt)]


async def test_streams_text_and_usage(vllm: str) -> None:
    async with OpenAIChatEngine(vllm) as engine:
        assert engine.models() == [MODEL]
        assert await engine.ready()
        deltas = await run(engine, ask(max_output_tokens=24))
    finished = deltas[-1]
    assert isinstance(finished, Finished)
    assert finished.usage.input_tokens > 0
    assert 1 <= finished.usage.output_tokens <= 24
    assert any(isinstance(d, TextDelta) for d in deltas)
    response = validated(deltas, MODEL)
    assert response.usage is not None
    assert response.usage.total_tokens == finished.usage.input_tokens + finished.usage.output_tokens


async def test_max_tokens_ends_with_length(vllm: str) -> None:
    # min_tokens keeps the random model from sampling its end token first.
    async with OpenAIChatEngine(vllm, extra_body={"min_tokens": 16}) as engine:
        deltas = await run(engine, ask(max_output_tokens=16))
    finished = deltas[-1]
    assert isinstance(finished, Finished)
    assert finished.reason == "length"
    assert finished.usage.output_tokens == 16
    assert validated(deltas, MODEL).status == "incomplete"


async def test_closing_the_stream_stops_the_engine(vllm: str) -> None:
    budget = 3000
    async with OpenAIChatEngine(vllm, extra_body={"min_tokens": budget}) as engine:
        before = metric(vllm, "vllm:generation_tokens_total")
        stream = engine.generate(ask(max_output_tokens=budget))
        for _ in range(5):
            await anext(stream)
        await stream.aclose()
    assert running_after(vllm, within=30) == 0
    generated = metric(vllm, "vllm:generation_tokens_total") - before
    assert generated < budget / 2, f"vLLM generated {generated} tokens for an aborted request"


async def test_32_concurrent_streams_all_finish(vllm: str) -> None:
    async with OpenAIChatEngine(vllm, extra_body={"min_tokens": 8}) as engine:
        results = await asyncio.gather(
            *(run(engine, ask(f"Stream {i}", max_output_tokens=8)) for i in range(32))
        )
    for deltas in results:
        finished = deltas[-1]
        assert isinstance(finished, Finished)
        assert finished.usage.output_tokens == 8
        validated(deltas, MODEL)
