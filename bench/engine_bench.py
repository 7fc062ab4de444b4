"""Engine adapter overhead: the fake sglang streaming at full speed, read by a raw httpx
client vs through `SglangEngine` (harmony parse + deltas + the `emit` event builder).

    .venv/bin/python -m bench.engine_bench [--streams 1 64] [--words 500] [--style cumulative]

Prints tokens/s for each path and concurrency, their ratio, and time-to-first-token
p50/p99 (and what the adapter adds to it). Both paths read the same server, so the ratio
is the adapter's cost on top of the bytes; the server runs in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass

import httpx
import msgspec

from adapters.engines.sglang import SglangEngine
from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import create
from domain.events import RequestFacts
from domain.generation import Finished
from domain.objects import ResponseObject
from tests.fakes.process import FakeProcess
from tests.fakes.prompts import make_prompt, user


@dataclass
class Stream:
    ttft: float
    seconds: float
    tokens: int


async def raw_stream(client: httpx.AsyncClient, url: str, ids: list[int], params: dict) -> Stream:
    """The floor: POST /generate, split the raw body into events, decode each chunk's JSON
    (msgspec, untyped) and read its completion_tokens."""
    body = {"input_ids": ids, "sampling_params": params, "stream": True, "rid": uuid.uuid4().hex}
    start = time.perf_counter()
    ttft, seen, buffer = 0.0, 0, b""
    async with client.stream("POST", url + "/generate", json=body) as response:
        async for raw in response.aiter_raw():
            *events, buffer = (buffer + raw).split(b"\n\n")
            for event in events:
                if event == b"data: [DONE]":
                    continue
                chunk = msgspec.json.decode(event[6:])
                if not ttft:
                    ttft = time.perf_counter() - start
                seen = chunk["meta_info"]["completion_tokens"]
    return Stream(ttft, time.perf_counter() - start, seen)


async def engine_stream(engine: SglangEngine, prompt_text: str) -> Stream:
    """The adapter: generate(), every delta folded into OpenAI events by `emit`."""
    created = ResponseObject(id="resp_bench", created_at=0, status="in_progress", model="m")
    state = create(created, RequestFacts(owner="bench", input=[])).state
    start = time.perf_counter()
    ttft, tokens = 0.0, 0
    async for delta in engine.generate(make_prompt([user(prompt_text)])):
        if not ttft:
            ttft = time.perf_counter() - start
        if isinstance(delta, Finished):
            state = finish(state, delta, now=0).state
            tokens = delta.usage.output_tokens
        else:
            state = emit(state, delta).state
    return Stream(ttft, time.perf_counter() - start, tokens)


def pct(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


async def measure(make, concurrency: int, rounds: int) -> dict[str, float]:
    results: list[Stream] = []
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        results += await asyncio.gather(*(make() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    ttfts = [r.ttft * 1000 for r in results]
    tokens = sum(r.tokens for r in results)
    return {
        "tokens_per_s": tokens / wall,
        "cpu_us_per_token": cpu / tokens * 1e6,
        "ttft_p50_ms": pct(ttfts, 50),
        "ttft_p99_ms": pct(ttfts, 99),
        "streams": len(results),
        "tokens_per_stream": results[0].tokens,
    }


async def bench(url: str, streams: list[int], rounds: int) -> list[dict[str, object]]:
    text = "[fake:long] go"
    rows = []
    async with SglangEngine(url) as engine:
        prompt = make_prompt([user(text)])
        ids = engine.renderer.render(prompt)
        params = engine.sampling_params(prompt, len(ids))
        async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=1024)) as c:
            await raw_stream(c, url, ids, params)  # warm both paths
            await engine_stream(engine, text)
            for n in streams:
                k = max(1, rounds // n) if n > 1 else rounds
                raw = await measure(lambda: raw_stream(c, url, ids, params), n, k)
                eng = await measure(lambda: engine_stream(engine, text), n, k)
                rows.append({"concurrency": n, "raw": raw, "engine": eng})
    return rows


def report(rows: list[dict[str, object]], args: argparse.Namespace) -> str:
    per_stream = rows[0]["raw"]["tokens_per_stream"]  # type: ignore[index]
    lines = [
        f"fake sglang style={args.style}, {per_stream} tokens/stream, "
        f"token delay {args.token_delay * 1000:g} ms",
        "",
        "| streams | raw tok/s | engine tok/s | engine/raw | client CPU µs/token raw / engine "
        "| raw TTFT p50/p99 ms | engine TTFT p50/p99 ms | added TTFT p50/p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        raw, eng = row["raw"], row["engine"]
        assert isinstance(raw, dict)
        assert isinstance(eng, dict)
        lines.append(
            f"| {row['concurrency']} | {raw['tokens_per_s']:,.0f} | {eng['tokens_per_s']:,.0f} "
            f"| {eng['tokens_per_s'] / raw['tokens_per_s']:.2f} "
            f"| {raw['cpu_us_per_token']:.0f} / {eng['cpu_us_per_token']:.0f} "
            f"| {raw['ttft_p50_ms']:.2f} / {raw['ttft_p99_ms']:.2f} "
            f"| {eng['ttft_p50_ms']:.2f} / {eng['ttft_p99_ms']:.2f} "
            f"| {eng['ttft_p50_ms'] - raw['ttft_p50_ms']:+.2f} / "
            f"{eng['ttft_p99_ms'] - raw['ttft_p99_ms']:+.2f} |"
        )
    return "\n".join(lines)


def fake_sglang(style: str, words: int, token_delay: float) -> FakeProcess:
    """The fake sglang in its own process, streaming `words`-word answers in `style`."""
    return FakeProcess(
        "tests.fakes.sglang_server",
        "--style",
        style,
        "--long-words",
        str(words),
        "--token-delay",
        str(token_delay),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 64])
    p.add_argument("--words", type=int, default=500, help="length of the streamed answer")
    p.add_argument("--style", default="cumulative", choices=["cumulative", "incremental"])
    p.add_argument("--rounds", type=int, default=128, help="streams per measurement (about)")
    p.add_argument("--token-delay", type=float, default=0.0, help="seconds per token (0: flat out)")
    args = p.parse_args()
    fake = fake_sglang(args.style, args.words, args.token_delay)
    try:
        rows = asyncio.run(bench(fake.url, args.streams, args.rounds))
    finally:
        fake.stop()
    print(report(rows, args))


if __name__ == "__main__":
    main()
