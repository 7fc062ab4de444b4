"""What one create costs the server, and a burst of simultaneous streaming creates.

Starts a real `resplog serve` (scripted engine, zero delay) on a fresh PostgreSQL database
(or SQLite) and measures, each beside its baseline from the same run:

- **CPU per create**: the server process's user + system time (from `/proc`) over N
  sequential creates, divided by N, in µs. Baseline: the same number of `GET /health`
  requests through the same server (what the HTTP stack and middlewares cost alone).
  Plain creates (`stream: false`, the whole answer in the reply) and streaming creates
  (`stream: true`, read to the end) are measured apart; the scripted answer is
  `--tokens` tokens long, so generation is part of the figure, as it is for a client.
- **Burst**: `--burst` streaming creates sent in the same instant, time to the first
  content delta of each (p50/p99 over the rounds). Baseline: one streaming create alone.

    .venv/bin/python bench/burst_bench.py --creates 300 --burst 64 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.databases import PG, drop_postgres, fresh_postgres
from tests.e2e.conftest import Server, start_server, stop_server

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system time of `pid` and its threads so far (fields 14 and 15 of stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def body(tokens: int, stream: bool) -> dict[str, object]:
    return {
        "model": "scripted",
        "input": "bench",
        "stream": stream,
        "metadata": {"scripted_tokens": str(tokens)},
    }


async def first_delta(client: httpx.AsyncClient, tokens: int) -> float:
    """Seconds from sending a streaming create to its first content delta (read to the end)."""
    t0 = time.perf_counter()
    seen = 0.0
    async with client.stream("POST", "/v1/responses", json=body(tokens, True)) as r:
        r.raise_for_status()
        async for chunk in r.aiter_bytes():
            if not seen and b'.delta"' in chunk:
                seen = time.perf_counter() - t0
    return seen


async def cpu_per_request(
    pid: int, client: httpx.AsyncClient, n: int, send: str, tokens: int
) -> float:
    """µs of server CPU per request, over `n` sequential requests of the kind `send` names."""
    await asyncio.sleep(0.3)  # let the previous phase's background work settle
    before = cpu_seconds(pid)
    for _ in range(n):
        if send == "health":
            (await client.get("/health")).raise_for_status()
        elif send == "plain":
            (await client.post("/v1/responses", json=body(tokens, False))).raise_for_status()
        else:
            await first_delta(client, tokens)
    await asyncio.sleep(0.3)  # count the group commit that follows the last reply
    return (cpu_seconds(pid) - before) / n * 1e6


async def burst(client: httpx.AsyncClient, size: int, tokens: int) -> list[float]:
    start = asyncio.Event()

    async def one() -> float:
        await start.wait()
        return await first_delta(client, tokens)

    tasks = [asyncio.create_task(one()) for _ in range(size)]
    await asyncio.sleep(0.05)  # every task waits on the event before the burst begins
    start.set()
    return list(await asyncio.gather(*tasks))


async def measure(server: Server, args: argparse.Namespace) -> None:
    pid = server.process.pid
    limits = httpx.Limits(max_connections=args.burst + 4, max_keepalive_connections=args.burst + 4)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120, limits=limits) as client:
        await burst(client, args.burst, args.tokens)  # warm up: connections, pools, caches
        health = await cpu_per_request(pid, client, args.creates, "health", args.tokens)
        plain = await cpu_per_request(pid, client, args.creates, "plain", args.tokens)
        streamed = await cpu_per_request(pid, client, args.creates, "stream", args.tokens)
        print(f"\nserver CPU per request, {args.creates} sequential requests each:")
        print("| request | µs per request | over GET /health |")
        print("|---|---|---|")
        print(f"| baseline: GET /health | {health:,.0f} | 1.00x |")
        print(f"| create, stream: false | {plain:,.0f} | {plain / health:.2f}x |")
        print(f"| create, stream: true | {streamed:,.0f} | {streamed / health:.2f}x |")

        alone = [await first_delta(client, args.tokens) for _ in range(args.rounds * 10)]
        bursts: list[float] = []
        for _ in range(args.rounds):
            await asyncio.sleep(0.5)
            bursts += await burst(client, args.burst, args.tokens)
    print(f"\ntime to first delta, {args.rounds} rounds:")
    print("| streams started together | p50 ms | p99 ms |")
    print("|---|---|---|")
    print(f"| baseline: 1 | {statistics.median(alone) * 1e3:.1f} | {pct(alone, 99) * 1e3:.1f} |")
    print(f"| {args.burst} | {statistics.median(bursts) * 1e3:.1f} | {pct(bursts, 99) * 1e3:.1f} |")


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--creates", type=int, default=300)
    p.add_argument("--burst", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=8, help="scripted answer length")
    p.add_argument("--sqlite", action="store_true")
    p.add_argument("--serve-arg", action="append", default=[], help="extra `serve` argument")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        name = None
        if args.sqlite:
            url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        else:
            url, name = await fresh_postgres(PG)
        server = start_server(url, "bench", Path(tmp) / "server.log", *args.serve_arg)
        try:
            store = "sqlite" if args.sqlite else "postgres"
            print(f"store: {store}, tokens per answer: {args.tokens}")
            await measure(server, args)
        finally:
            stop_server(server)
            if name:
                await drop_postgres(PG, name)


if __name__ == "__main__":
    asyncio.run(main())
