"""OpenAIChatEngine against a real engine: vLLM (CPU) serving a tiny random-weight Llama.

Needs `bench/realengine/setup.sh` (a separate 3.5 GB venv); deselected by default, run with
`pytest -m realengine`. Random weights write random text, but streaming, usage, stopping,
abort and batching are the engine's own.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters.engines.openai_chat import OpenAIChatEngine
from domain.generation import AnyDelta, Finished, Prompt, TextDelta
from tests.fakes.prompts import make_prompt, user
from tests.fakes.responses import validated

pytestmark = pytest.mark.realengine

HOME = Path(
    os.environ.get("REALENGINE_HOME")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "resplog/realengine"
)
MODEL = "tiny-llama"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    python, model = HOME / "venv/bin/python", HOME / "tiny-llama"
    if not python.exists() or not (model / "config.json").exists():
        pytest.fail(f"no real engine in {HOME}: run bench/realengine/setup.sh first")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "64",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"vLLM did not become healthy:\n{log.read_text()[-3000:]}")


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    values = [
        float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    ]
    assert values, f"vLLM exports no {name}"
    return sum(values)


def _running_after(url: str, within: float) -> float:
    """Requests vLLM still runs, once none do or `within` seconds have passed."""
    deadline = time.monotonic() + within
    while (running := _metric(url, "vllm:num_requests_running")) and time.monotonic() < deadline:
        time.sleep(0.2)
    return running


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
        before = _metric(vllm, "vllm:generation_tokens_total")
        stream = engine.generate(ask(max_output_tokens=budget))
        for _ in range(5):
            await anext(stream)
        await stream.aclose()
    assert _running_after(vllm, within=30) == 0
    generated = _metric(vllm, "vllm:generation_tokens_total") - before
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
