"""Time to first delta alone and in a burst, and a create's CPU beside `GET /health`.

What a streaming create costs the server, and how soon its first delta comes, one at a
time and 64 sent in the same instant.

A real `resplog serve` (scripted engine at zero delay, `--tokens`-token answers) on a fresh
PostgreSQL database (or SQLite). Figures, each beside its baseline from the same run:

- server CPU per request (from /proc, its `--processes` children included) over
  `--creates` sequential requests: plain and streaming creates beside `GET /health` (the
  HTTP stack alone);
- a streaming create alone (one at a time on one kept-alive connection): its first delta
  and CPU;
- `--burst` streaming creates written together on raw sockets (new connections, then
  kept-alive ones), `--rounds` bursts: first delta p50/p99 beside the create alone, and
  the CPU a create less the server's idle rate beside a burst of `GET /health`.

    .venv/bin/python bench/burst_bench.py --creates 150 --burst 64 --rounds 10
    .venv/bin/python bench/burst_bench.py --creates 20 --burst 8 --rounds 2     # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import NamedTuple

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, cpu_seconds, database_arguments, median, parser, pct, serving


def body(tokens: int, stream: bool, delay_ms: float = 0) -> dict[str, object]:
    meta = {"scripted_tokens": str(tokens)}
    if delay_ms:  # the engine's time to each token, the first one included
        meta["scripted_delay_ms"] = f"{delay_ms:g}"
    return {"model": "scripted", "input": "bench", "stream": stream, "metadata": meta}


async def first_delta(client: httpx.AsyncClient, tokens: int, delay_ms: float = 0) -> float:
    """Seconds from sending a streaming create to its first content delta (read to the end)."""
    t0 = time.perf_counter()
    seen = 0.0
    async with client.stream("POST", "/v1/responses", json=body(tokens, True, delay_ms)) as r:
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


class RawBurst:
    """Streaming creates sent together over raw HTTP/1.1 connections, each reply read to its
    end: the server's cost with as little of the client's CPU as possible (as wrk does).
    A burst opens its connections first, then writes one prepared request on each in the
    same loop turn; with `kept` the connections stay open between bursts, as an SDK's pool
    keeps them."""

    def __init__(
        self,
        base_url: str,
        tokens: int,
        *,
        health: bool = False,
        kept: bool = False,
        delay_ms: float = 0,
    ) -> None:
        """`health`: each request a `GET /health` instead, timed to the end of its reply."""
        host, port = base_url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.health, self.kept = health, kept
        self.open: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        if health:
            self.request = f"GET /health HTTP/1.1\r\nhost: {host}:{port}\r\n\r\n".encode()
            return
        payload = json.dumps(body(tokens, True, delay_ms)).encode()
        self.request = (
            f"POST /v1/responses HTTP/1.1\r\nhost: {host}:{port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
        ).encode() + payload

    async def one(
        self, stream: tuple[asyncio.StreamReader, asyncio.StreamWriter], go: asyncio.Event
    ) -> float:
        """Seconds from the request's write to its first content delta (a health check's end)."""
        reader, writer = stream
        await go.wait()
        t0 = time.perf_counter()
        writer.write(self.request)
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"request refused: {head[:200]!r}")
        if self.health:  # a plain reply: its length is in the head
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            return time.perf_counter() - t0
        seen = 0.0
        async for chunk in _chunks(reader):
            if not seen and b'.delta"' in chunk:
                seen = time.perf_counter() - t0
        if not seen:
            raise RuntimeError("a stream ended without a delta")
        return seen

    async def connect(self, size: int) -> None:
        while len(self.open) < size:
            self.open.append(await asyncio.open_connection(self.host, self.port))

    async def burst(self, size: int) -> list[float]:
        if self.kept:
            await self.connect(size)
            streams = self.open[:size]
        else:
            streams = [await asyncio.open_connection(self.host, self.port) for _ in range(size)]
        try:
            go = asyncio.Event()
            tasks = [asyncio.create_task(self.one(stream, go)) for stream in streams]
            await asyncio.sleep(0.05)  # every task waits on the event before the burst begins
            go.set()
            return list(await asyncio.gather(*tasks))
        finally:
            if not self.kept:
                for _, writer in streams:
                    writer.close()

    def close(self) -> None:
        for _, writer in self.open:
            writer.close()
        self.open = []


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's chunks: one per server write, whole SSE frames."""
    while True:
        size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
        chunk = await reader.readexactly(size + 2)
        if not size:
            return
        yield chunk[:-2]


class Bursts(NamedTuple):
    """Every first delta's seconds, and each burst's server CPU a create (µs) less the
    server's idle rate over the burst's window."""

    firsts: list[float]
    cpu: list[float]


async def raw_bursts(pid: int, raw: RawBurst, size: int, rounds: int, idle_ms: float) -> Bursts:
    """`rounds` bursts, each counted from its first write until 0.3 s after its last reply
    (the group commit that follows it), less `idle_ms` a second of the window."""
    await raw.burst(size)  # warm up (and, kept alive, the connections the bursts reuse)
    got = Bursts([], [])
    for _ in range(rounds):
        await asyncio.sleep(0.5)
        before, began = cpu_seconds(pid), time.monotonic()
        got.firsts.extend(await raw.burst(size))
        await asyncio.sleep(0.3)
        spent, window = cpu_seconds(pid) - before, time.monotonic() - began
        got.cpu.append((spent - idle_ms / 1e3 * window) / size * 1e6)
    raw.close()
    return got


async def idle_rate(pid: int, windows: int = 3, seconds: float = 2.0) -> float:
    """The server's CPU while nobody asks it anything (ms a second, the median of
    `windows`): its polls and timers."""
    await asyncio.sleep(1.0)  # what the last request left (the group commit, closes) is done
    rates = []
    for _ in range(windows):
        before, began = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(seconds)
        rates.append((cpu_seconds(pid) - before) / (time.monotonic() - began) * 1e3)
    return median(rates)


async def alone(pid: int, raw: RawBurst, n: int, idle_ms: float) -> tuple[float, list[float]]:
    """`n` creates on one kept-alive connection, each sent once the one before has ended:
    µs of CPU a create less the idle rate, and each one's first delta."""
    await raw.connect(1)
    go = asyncio.Event()
    go.set()
    for _ in range(5):  # warm up
        await raw.one(raw.open[0], go)
    firsts = []
    before, began = cpu_seconds(pid), time.monotonic()
    for _ in range(n):
        firsts.append(await raw.one(raw.open[0], go))
    spent = cpu_seconds(pid) - before - idle_ms / 1e3 * (time.monotonic() - began)
    raw.close()
    return spent / n * 1e6, firsts


async def measure(base: str, pid: int, args: argparse.Namespace) -> None:
    size, n = args.burst, args.creates
    limits = httpx.Limits(max_connections=size + 4, max_keepalive_connections=size + 4)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
        for _ in range(10):  # warm up: connections, pools, caches
            await first_delta(client, args.tokens)
        health = await cpu_per_request(pid, client, n, "health", args.tokens)
        plain = await cpu_per_request(pid, client, n, "plain", args.tokens)
        streamed = await cpu_per_request(pid, client, n, "stream", args.tokens)
    idle = await idle_rate(pid)
    lone_cpu, lone = await alone(pid, RawBurst(base, args.tokens, kept=True), n, idle)
    bursts, floors = {}, {}
    for kept in (False, True):
        bursts[kept] = await raw_bursts(
            pid, RawBurst(base, args.tokens, kept=kept), size, args.rounds, idle
        )
        # A burst of GETs is short: the median over more of them.
        health_raw = RawBurst(base, 0, health=True, kept=kept)
        floors[kept] = await raw_bursts(pid, health_raw, size, args.rounds * 4, idle)

    cpu = Table(
        f"server CPU per request, {n} sequential requests each (idle: {idle:.2f} ms a second)", "µs"
    )
    cpu.add("create, stream: false", plain, "GET /health", health)
    cpu.add("create, stream: true", streamed, "GET /health", health)
    cpu.add("streaming create alone, less the idle rate", lone_cpu, "GET /health", health)
    first = Table(f"time to first delta, {size} creates together, {args.rounds} bursts", "ms")
    for kept, label in ((False, "new connections"), (True, "kept-alive connections")):
        got = bursts[kept]
        first.add(
            f"p50, {label}", median(got.firsts) * 1e3, "one create alone, p50", median(lone) * 1e3
        )
        first.add(
            f"p99, {label}", pct(got.firsts, 99) * 1e3, "one create alone, p99", pct(lone, 99) * 1e3
        )
    burst_cpu = Table(f"server CPU a create in a burst of {size}, less the idle rate", "µs")
    for kept, label in ((False, "new connections"), (True, "kept-alive connections")):
        burst_cpu.add(
            label,
            median(bursts[kept].cpu),
            f"GET /health in a burst of {size}",
            median(floors[kept].cpu),
        )
    for table in (cpu, first, burst_cpu):
        table.print()


def main() -> None:
    p = parser(__doc__)
    database_arguments(p)
    p.add_argument("--creates", type=int, default=150, help="sequential requests of each kind")
    p.add_argument("--burst", type=int, default=64, help="creates sent together")
    p.add_argument("--rounds", type=int, default=10, help="bursts of each kind")
    p.add_argument("--tokens", type=int, default=8, help="scripted answer length")
    p.add_argument("--processes", type=int, default=1, help="`serve --processes` (PostgreSQL)")
    args = p.parse_args()
    with serving(
        sqlite=args.sqlite, admin_url=args.database_url, processes=args.processes
    ) as server:
        store = "sqlite" if args.sqlite else "postgres"
        print(f"store: {store}, tokens per answer: {args.tokens}, processes: {args.processes}")
        asyncio.run(measure(server.base_url, server.process.pid, args))


if __name__ == "__main__":
    main()
