"""Service overhead per token: the fake sglang streaming at full speed, consumed (a) directly
by raw clients and (b) through `resplog serve --engine sglang` by SSE clients.

    .venv/bin/python -m bench.service_bench --streams 1 64 --words 500 --procs 4

Two direct readers: `httpx` (one HTTP chunk, i.e. one sglang token, per read: what a
straightforward client does) and `aiohttp` (`readany`: everything buffered per read, the
way resplog's engine adapter reads). Prints tokens/s for each path and concurrency, the
ratio of resplog to each direct reader, and time to first token p50/p99 (what resplog
adds). Tokens are what sglang reports (completion_tokens), on the resplog side read from
`usage.output_tokens` of the final event. The resplog server stores every event in
PostgreSQL (a fresh database) as in production. Clients run in `--procs` processes so one
Python client process is not the bottleneck. The last two columns are the server's CPU
per token (its process's user + system time over the resplog measurement, from /proc: it
depends little on what else runs on the box) and how the runner batched: delta events per
response (p50), read back from the database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import httpx
import msgspec

from adapters.engines.sglang import SglangEngine
from bench.databases import PG, drop_postgres, fresh_postgres
from bench.engine_bench import fake_sglang, raw_stream
from bench.http_bench import pct
from tests.e2e.conftest import start_server, stop_server
from tests.fakes.prompts import make_prompt, user

TEXT = "[fake:long] go"


async def sse_stream(client: httpx.AsyncClient) -> tuple[float, float, int]:
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


async def raw_once(
    client: httpx.AsyncClient, url: str, ids: list[int], params: dict
) -> tuple[float, float, int]:
    s = await raw_stream(client, url, ids, params)
    return s.ttft, s.seconds, s.tokens


async def bulk_once(
    session: aiohttp.ClientSession, url: str, ids: list[int], params: dict
) -> tuple[float, float, int]:
    """A direct reader as lean as resplog's adapter: all buffered bytes per read."""
    body = {"input_ids": ids, "sampling_params": params, "stream": True, "rid": uuid.uuid4().hex}
    start = time.perf_counter()
    ttft, seen, buffer = 0.0, 0, b""
    async with session.post(url + "/generate", json=body) as response:
        while raw := await response.content.readany():
            *events, buffer = (buffer + raw).split(b"\n\n")
            for event in events:
                if event == b"data: [DONE]":
                    continue
                chunk = msgspec.json.decode(event[6:])
                if not ttft:
                    ttft = time.perf_counter() - start
                seen = chunk["meta_info"]["completion_tokens"]
    return ttft, time.perf_counter() - start, seen


async def run_clients(kind: str, url: str, streams: int, rounds: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=streams + 8, max_keepalive_connections=streams + 8)
    connector = aiohttp.TCPConnector(limit=streams + 8)
    async with (
        httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as client,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        if kind in ("raw", "bulk"):
            async with SglangEngine(url) as engine:
                prompt = make_prompt([user(TEXT)])
                ids = engine.renderer.render(prompt)
                params = engine.sampling_params(prompt, len(ids))

            async def one() -> tuple[float, float, int]:
                if kind == "bulk":
                    return await bulk_once(session, url, ids, params)
                return await raw_once(client, url, ids, params)
        else:

            async def one() -> tuple[float, float, int]:
                return await sse_stream(client)

        await one()  # warm
        results: list[tuple[float, float, int]] = []
        start = time.perf_counter()
        for _ in range(rounds):
            results += await asyncio.gather(*(one() for _ in range(streams)))
        wall = time.perf_counter() - start
    return {"tokens": sum(r[2] for r in results), "wall": wall, "ttft": [r[0] for r in results]}


def _proc(args: tuple[str, str, int, int]) -> dict[str, Any]:
    return asyncio.run(run_clients(*args))


def measure(kind: str, url: str, streams: int, rounds: int, procs: int) -> dict[str, float]:
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def delta_events(db: str, since: float) -> float:
    """p50 over the responses created since `since` of their delta events (one per batch
    the runner logged, per kind)."""
    url = f"{PG.rsplit('/', 1)[0]}/{db}".replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(url)
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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 64])
    p.add_argument("--words", type=int, default=500)
    p.add_argument("--rounds", type=int, default=4, help="rounds of `streams` concurrent streams")
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--style", default="incremental", choices=["cumulative", "incremental"])
    p.add_argument("--token-delay", type=float, default=0.0, help="fake's s/token (0: flat out)")
    args = p.parse_args()
    fake = fake_sglang(args.style, args.words, args.token_delay)
    url, name = asyncio.run(fresh_postgres())
    tmp = Path(tempfile.mkdtemp(prefix="resplog-svc-bench-"))
    server = start_server(
        url,
        "postgres",
        tmp / "server.log",
        engine=("--engine", "sglang", "--engine-url", fake.url, "--model", "gpt-oss"),
    )
    try:
        print(
            f"fake sglang style={args.style}, ~{args.words} words/answer, "
            f"{'full speed' if not args.token_delay else f'{args.token_delay * 1e3:g} ms/token'}; "
            f"{args.procs} client processes"
        )
        print(
            "| streams | direct tok/s (httpx / aiohttp) | through resplog tok/s "
            "| ratio to httpx / aiohttp | direct TTFT p50/p99 ms (aiohttp) "
            "| resplog TTFT p50/p99 ms | resplog CPU µs/token | delta events/response p50 |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for n in args.streams:
            rounds = args.rounds if n > 1 else args.rounds * 8
            raw = measure("raw", fake.url, n, rounds, args.procs)
            bulk = measure("bulk", fake.url, n, rounds, args.procs)
            since, cpu = time.time(), cpu_seconds(server.process.pid)
            svc = measure("resplog", server.base_url, n, rounds, args.procs)
            cpu = cpu_seconds(server.process.pid) - cpu
            batches = asyncio.run(delta_events(name, since))
            rate = svc["tokens_per_s"]
            print(
                f"| {n} | {raw['tokens_per_s']:,.0f} / {bulk['tokens_per_s']:,.0f} "
                f"| {rate:,.0f} "
                f"| {rate / raw['tokens_per_s']:.2f} / {rate / bulk['tokens_per_s']:.2f} "
                f"| {bulk['ttft_p50_ms']:.1f} / {bulk['ttft_p99_ms']:.1f} "
                f"| {svc['ttft_p50_ms']:.1f} / {svc['ttft_p99_ms']:.1f} "
                f"| {cpu / svc['tokens'] * 1e6:.1f} | {batches:.0f} |"
            )
    finally:
        stop_server(server)
        fake.stop()
        asyncio.run(drop_postgres(PG, name))


if __name__ == "__main__":
    main()
