"""Overhead per token: tokens/s through resplog, beside a direct reader of the engine.

The fake sglang streams flat out, read by direct clients of its own API and through
`resplog serve --engine sglang` by SSE clients.

Baselines, from the same run: two direct readers of the fake's `/generate` (`httpx`, one
chunk a read, as a plain client reads; `aiohttp` `readany`, everything buffered a read, as
resplog's adapter reads). Prints tokens/s through resplog beside each, time to the first
token beside the direct reader's, the server's CPU per token (from /proc), and the delta
events a response (read back from PostgreSQL: how the runner batched). Clients run in
`--procs` processes so that one Python client is not the bottleneck.

    .venv/bin/python bench/service_bench.py --streams 1 64 --words 500 --procs 4
    .venv/bin/python bench/service_bench.py --streams 1 8 --words 100 --rounds 1 --procs 2
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import httpx
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from adapters.engines.sglang import SglangEngine
from bench.harness import Table, cpu_seconds, database_arguments, dsn, parser, pct, serving
from tests.fakes.process import FakeProcess
from tests.fakes.prompts import make_prompt, user

TEXT = "[fake:long] go"
# What one stream measured: seconds to its first token, seconds in all, tokens.
Stream = tuple[float, float, int]


def fake_sglang(style: str, words: int, token_delay: float) -> FakeProcess:
    """The fake sglang in its own process, streaming `words`-word answers in `style`."""
    return FakeProcess(
        "tests.fakes.sglang_server",
        *("--style", style, "--long-words", str(words), "--token-delay", str(token_delay)),
    )


async def sse_stream(client: httpx.AsyncClient) -> Stream:
    body = {"model": "gpt-oss", "input": TEXT, "stream": True}
    start = time.perf_counter()
    ttft, last = 0.0, b""
    async with client.stream("POST", "/v1/responses", json=body) as r:
        async for chunk in r.aiter_bytes():
            if not ttft and b'.delta"' in chunk:
                ttft = time.perf_counter() - start
            last = (last + chunk)[-65536:]
    final = [f for f in last.split(b"\n\n") if f.startswith(b"event: response.")][-1]
    payload = json.loads(final.split(b"\ndata: ", 1)[1])
    return ttft, time.perf_counter() - start, int(payload["response"]["usage"]["output_tokens"])


def _events(buffer: bytes, raw: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """The sglang chunks complete in `buffer + raw`, and what is left of it."""
    *events, rest = (buffer + raw).split(b"\n\n")
    return [msgspec.json.decode(e[6:]) for e in events if e != b"data: [DONE]"], rest


async def httpx_once(client: httpx.AsyncClient, url: str, ids: list[int], params: dict) -> Stream:
    """A direct reader: POST /generate, one HTTP chunk (one token) a read."""
    body = {"input_ids": ids, "sampling_params": params, "stream": True, "rid": uuid.uuid4().hex}
    start = time.perf_counter()
    ttft, seen, buffer = 0.0, 0, b""
    async with client.stream("POST", url + "/generate", json=body) as response:
        async for raw in response.aiter_raw():
            chunks, buffer = _events(buffer, raw)
            for chunk in chunks:
                ttft = ttft or time.perf_counter() - start
                seen = chunk["meta_info"]["completion_tokens"]
    return ttft, time.perf_counter() - start, seen


async def aiohttp_once(
    session: aiohttp.ClientSession, url: str, ids: list[int], params: dict
) -> Stream:
    """A direct reader as lean as resplog's adapter: all buffered bytes a read."""
    body = {"input_ids": ids, "sampling_params": params, "stream": True, "rid": uuid.uuid4().hex}
    start = time.perf_counter()
    ttft, seen, buffer = 0.0, 0, b""
    async with session.post(url + "/generate", json=body) as response:
        while raw := await response.content.readany():
            chunks, buffer = _events(buffer, raw)
            for chunk in chunks:
                ttft = ttft or time.perf_counter() - start
                seen = chunk["meta_info"]["completion_tokens"]
    return ttft, time.perf_counter() - start, seen


async def run_clients(kind: str, url: str, streams: int, rounds: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=streams + 8, max_keepalive_connections=streams + 8)
    connector = aiohttp.TCPConnector(limit=streams + 8)
    async with (
        httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as client,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        if kind == "resplog":

            async def one() -> Stream:
                return await sse_stream(client)
        else:
            async with SglangEngine(url) as engine:
                prompt = make_prompt([user(TEXT)])
                ids = engine.renderer.render(prompt)
                params = engine.sampling_params(prompt, len(ids))

            async def one() -> Stream:
                if kind == "aiohttp":
                    return await aiohttp_once(session, url, ids, params)
                return await httpx_once(client, url, ids, params)

        await one()  # warm
        results: list[Stream] = []
        start = time.perf_counter()
        for _ in range(rounds):
            results += await asyncio.gather(*(one() for _ in range(streams)))
        wall = time.perf_counter() - start
    return {"tokens": sum(r[2] for r in results), "wall": wall, "ttft": [r[0] for r in results]}


def _proc(args: tuple[str, str, int, int]) -> dict[str, Any]:
    return asyncio.run(run_clients(*args))


def measure(kind: str, url: str, streams: int, rounds: int, procs: int) -> dict[str, float]:
    """Tokens, tokens/s and time to first token (ms) of `streams` concurrent streams,
    `rounds` times, the clients spread over `procs` processes."""
    procs = max(1, min(procs, streams))
    shares = [streams // procs + (i < streams % procs) for i in range(procs)]
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        parts = pool.map(_proc, [(kind, url, n, rounds) for n in shares])
    ttft = [t for p in parts for t in p["ttft"]]
    return {
        "tokens": sum(p["tokens"] for p in parts),
        "tokens_per_s": sum(p["tokens"] / p["wall"] for p in parts),
        "ttft_p50_ms": pct(ttft, 50) * 1e3,
        "ttft_p99_ms": pct(ttft, 99) * 1e3,
    }


async def delta_events(url: str, since: float) -> float:
    """p50, over the responses created since `since`, of their delta events."""
    conn = await asyncpg.connect(dsn(url))
    try:
        rows = await conn.fetch(
            "SELECT count(*) AS n FROM responses r JOIN events e ON e.stream_id = r.id "
            "WHERE r.created_at >= $1 AND e.type LIKE '%.delta' GROUP BY r.id",
            since,
        )
    finally:
        await conn.close()
    return pct([float(r["n"]) for r in rows], 50)


def main() -> None:
    p = parser(__doc__)
    database_arguments(p, sqlite=False)
    p.add_argument("--streams", type=int, nargs="+", default=[1, 64])
    p.add_argument("--words", type=int, default=500, help="length of the streamed answer")
    p.add_argument("--rounds", type=int, default=4, help="rounds of `streams` concurrent streams")
    p.add_argument("--procs", type=int, default=4, help="client processes")
    p.add_argument("--style", default="incremental", choices=["cumulative", "incremental"])
    p.add_argument("--token-delay", type=float, default=0.0, help="fake's s/token (0: flat out)")
    args = p.parse_args()
    fake = fake_sglang(args.style, args.words, args.token_delay)
    engine = ("--engine", "sglang", "--engine-url", fake.url, "--model", "gpt-oss")
    try:
        with serving(admin_url=args.database_url, engine=engine) as server:
            pace = f"{args.token_delay * 1e3:g} ms/token" if args.token_delay else "flat out"
            print(f"fake sglang {args.style}, ~{args.words} words an answer, {pace}")
            for n in args.streams:
                rounds = args.rounds if n > 1 else args.rounds * 8
                direct = measure("httpx", fake.url, n, rounds, args.procs)
                lean = measure("aiohttp", fake.url, n, rounds, args.procs)
                since, cpu = time.time(), cpu_seconds(server.process.pid)
                svc = measure("resplog", server.base_url, n, rounds, args.procs)
                cpu = cpu_seconds(server.process.pid) - cpu
                batches = asyncio.run(delta_events(server.database_url, since))
                table = Table(f"{n} concurrent streams", "value")
                rate = svc["tokens_per_s"]
                table.add("tokens/s through resplog", rate, "direct, httpx", direct["tokens_per_s"])
                table.add("tokens/s through resplog", rate, "direct, aiohttp", lean["tokens_per_s"])
                table.add(
                    "first token p50 ms", svc["ttft_p50_ms"], "direct, aiohttp", lean["ttft_p50_ms"]
                )
                table.add(
                    "first token p99 ms", svc["ttft_p99_ms"], "direct, aiohttp", lean["ttft_p99_ms"]
                )
                table.add("server CPU µs a token", cpu / svc["tokens"] * 1e6)
                table.add("delta events a response, p50", batches)
                table.print()
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
