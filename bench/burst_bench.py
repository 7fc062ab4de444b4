"""What one create costs the server, and a burst of simultaneous streaming creates.

Starts a real `resplog serve` (scripted engine, zero delay) on a fresh PostgreSQL database
(or SQLite) and measures, each beside its baseline from the same run:

- **CPU per create**: the server's time on a CPU (from `/proc`, in ns, its child processes
  included, so `--serve-arg=--processes --serve-arg=N` is counted whole) over N
  sequential creates, divided by N, in µs. Baseline: the same number of `GET /health`
  requests through the same server (what the HTTP stack and middlewares cost alone).
  Plain creates (`stream: false`, the whole answer in the reply) and streaming creates
  (`stream: true`, read to the end) are measured apart; the scripted answer is
  `--tokens` tokens long, so generation is part of the figure, as it is for a client.
- **Burst**: `--burst` streaming creates sent in the same instant, time to the first
  content delta of each (p50/p99 over the rounds), and the server's CPU per create in the
  burst: as counted from the burst's first write until 0.3 s after its last reply, and
  the same less what the server spends when idle (its polls and timers, measured in the
  same run) over that window. Baselines: one streaming create alone, and (the floor) a
  burst of as many `GET /health` requests, what the HTTP stack alone costs in that shape.
  The burst's client is a minimal one of raw sockets (`RawBurst`: its connections opened
  before each burst, one prepared request written on each, the chunked replies read with a
  scan for the first delta), so that the figure is the server's: on the 2-core box an
  httpx client on the same machine spends more CPU on 64 streams than the server does, and
  sends the requests one after another while it works. The same burst through httpx is printed
  beside it, for comparison, and the burst and its floor again on connections kept open
  from one burst to the next (HTTP/1.1 keep-alive, as an SDK's connection pool sends a
  client's requests): what opening and closing a connection adds to each.

    .venv/bin/python bench/burst_bench.py --creates 300 --burst 64 --rounds 5

With `--against TREE` (a checkout of another commit, e.g. `git worktree add /tmp/before
HEAD~1`), a second server runs that tree's code (`PYTHONPATH=TREE`, same venv) on its own
database, and the two are measured side by side: batches of `--batch` requests of each kind,
and the bursts, alternate between them, so that both meet the same load on a shared box.
Figures are medians over the batches, with the ratio this tree / that tree; for the bursts
also the median of the burst-by-burst ratios (each burst beside the other server's next to
it) with a 95 % bootstrap interval: a change whose interval holds 1.00 is not told apart
from what a run moves by. Between the
batches, `--batch`/10 streaming creates each, one at a time, with the engine at `--paced-ms`
a token (the first one included, as a GPU's prefill): their time to the first delta.

    .venv/bin/python bench/burst_bench.py --against /tmp/before --batches 10 --batch 40

With `--against-venv VENV` instead, both servers run this tree's code, the other one from
VENV (a virtual environment of another interpreter or build, this project installed in it
with `VENV/bin/pip install -e .`): what the interpreter under resplog changes.

    /usr/bin/python3.11 -m venv /tmp/deb && /tmp/deb/bin/pip install -e .
    .venv/bin/python bench/burst_bench.py --against-venv /tmp/deb --batches 4 --batch 60

With `--profile`, the server instead runs its bursts under Python's deterministic profiler
(`cProfile`, switched on by a signal once the server is warm, through a `sitecustomize`
the bench puts on the server's path; no resplog code knows of it) and the bench prints
what a create in a burst is made of: the function calls a create, by part of the code
(each resumption of a coroutine or generator counts as a call), and the functions with the
most time of their own. The profiler multiplies the time a call takes, so the shares are
of the profiled time; CPU per create is the plain run's figure.

    .venv/bin/python bench/burst_bench.py --profile --rounds 5

With `--sample SECONDS`, the bursts run that long under py-spy instead (a sampler: it adds
nothing to each call; `pip install py-spy`), and the bench prints the share of the samples,
as µs of a create's CPU, by the part of the code in the innermost frame and by line.
`--kept-alive` runs the bursts of `--sample` or `--profile` on kept-alive connections.

With `--collector`, `--rounds` bursts run with every run of Python's cyclic collector in the
server timed (`gc.callbacks`, in the event loop thread's CPU time, through a
`sitecustomize` the bench puts on the server's path), and the bench prints, by generation,
how many ran, the longest, and their CPU a create beside the server's CPU a create. Another
tree's server: `PYTHONPATH=TREE` in the bench's environment.

    .venv/bin/python bench/burst_bench.py --collector --rounds 20 --kept-alive

With `--alone`, requests go one at a time on one kept-alive connection, each sent once the
one before has ended, `--creates` a batch, `--rounds` rounds: `GET /health` with the client
pausing 0, 2, 5 and 10 ms after each reply (what the same request costs a process that
has slept that long: several times more after a few milliseconds), streaming creates of
`--tokens` tokens at zero delay (a create that overlaps no other), and a few of a fast
engine's 200 tokens at 1 ms a token; the server's CPU a request less its idle rate, and
the time each took. With `--against TREE` the two servers take turns.

    .venv/bin/python bench/burst_bench.py --alone --creates 300 --rounds 3 --against /tmp/before

With `--floors`, the bench records one streaming create's reply, write by write, and sends
bursts of it from two reference servers that do nothing else (bench/reference_apps.py: a
bare ASGI app under uvicorn, a minimal litestar app), taking turns with resplog's bursts,
then the same with `GET /health`: what the HTTP platform alone costs of a create. Where
granian is installed (`.venv/bin/pip install granian`; not a dependency), the same two apps
under granian, an HTTP server in Rust, take their turns too: what a front end outside
Python would save.

    .venv/bin/python bench/burst_bench.py --sample 30
    .venv/bin/python bench/burst_bench.py --floors --rounds 12
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import importlib.util
import json
import os
import pstats
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import NamedTuple

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.databases import PG, drop_postgres, fresh_postgres
from tests.e2e.conftest import Server, free_port, start_server, stop_server

TICKS = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parents[1]

# Put on the profiled server's path as `sitecustomize.py`: SIGUSR1 starts the profiler in
# the main thread (the event loop's), SIGUSR2 stops it and writes its figures.
_PROFILER = """
import os, signal
if os.environ.get("RESPLOG_BENCH_PROFILE"):
    import cProfile
    _profile = cProfile.Profile()
    signal.signal(signal.SIGUSR1, lambda *_: _profile.enable())
    def _dump(*_):
        _profile.disable()
        _profile.dump_stats(os.environ["RESPLOG_BENCH_PROFILE"])
    signal.signal(signal.SIGUSR2, _dump)
"""

# Put on the server's path as `sitecustomize.py` for `--collector`: every collection of the
# cyclic collector timed in the thread's CPU time (it runs in the thread that allocated,
# the event loop's), by generation; SIGUSR1 starts over, SIGUSR2 writes the figures.
_COLLECTOR = """
import gc, json, os, signal, time
if os.environ.get("RESPLOG_BENCH_GC"):
    _seen, _began = {}, [0.0]
    def _timed(phase, info):
        if phase == "start":
            _began[0] = time.thread_time()
            return
        spent = time.thread_time() - _began[0]
        count, total, longest = _seen.get(info["generation"], (0, 0.0, 0.0))
        _seen[info["generation"]] = (count + 1, total + spent, max(longest, spent))
    gc.callbacks.append(_timed)
    signal.signal(signal.SIGUSR1, lambda *_: _seen.clear())
    def _dump(*_):
        with open(os.environ["RESPLOG_BENCH_GC"], "w") as out:
            json.dump(_seen, out)
    signal.signal(signal.SIGUSR2, _dump)
"""


def _stat(pid: str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _on_cpu(pid: int) -> float:
    """Seconds `pid` has run so far: the sum of its threads' `schedstat`, the scheduler's
    own count in nanoseconds (`stat`'s user and system times move in 10 ms ticks, 156 µs a
    create in a burst of 64). A thread that exits takes its count with it; `serve`'s
    threads live as long as the process. `stat`'s ticks where the kernel keeps no
    `schedstat`."""
    try:
        return (
            sum(
                int((task / "schedstat").read_text().split()[0])
                for task in Path(f"/proc/{pid}/task").iterdir()
            )
            / 1e9
        )
    except (OSError, ValueError, IndexError):
        fields = _stat(str(pid))
        return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_seconds(pid: int) -> float:
    """CPU time so far of `pid` and its live descendants (`serve --processes N` serves in
    children), threads included (`_on_cpu`)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat(entry.name)[1])
            except (OSError, IndexError):  # exited while we looked
                continue
    tree, total = {pid}, 0.0
    grew = True
    while grew:  # pids wrap, so a child's may be below its parent's: go until nothing joins
        joining = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= joining
        grew = bool(joining)
    for member in tree:
        try:
            total += _on_cpu(member)
        except OSError:  # exited meanwhile
            continue
    return total


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


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


async def burst(client: httpx.AsyncClient, size: int, tokens: int) -> list[float]:
    start = asyncio.Event()

    async def one() -> float:
        await start.wait()
        return await first_delta(client, tokens)

    tasks = [asyncio.create_task(one()) for _ in range(size)]
    await asyncio.sleep(0.05)  # every task waits on the event before the burst begins
    start.set()
    return list(await asyncio.gather(*tasks))


class RawBurst:
    """Streaming creates sent together over raw HTTP/1.1 connections, each reply read to its
    end: what a burst costs the server, with as little of the client's own CPU as possible
    (a load generator such as wrk works the same way).

    Each burst opens its connections first, then writes one prepared request on every one
    in the same loop turn, so that the server sees them together, as it sees requests from
    many clients; the connections close after the burst. With `kept`, the connections stay
    open from one burst to the next, as an SDK's pool keeps them (HTTP/1.1 keep-alive): a
    burst's window then holds no connection's opening or closing."""

    def __init__(
        self,
        base_url: str,
        tokens: int,
        *,
        health: bool = False,
        kept: bool = False,
        delay_ms: float = 0,
    ) -> None:
        """`health`: each request a `GET /health` instead (the burst's floor: what the
        HTTP stack alone costs in the same shape), timed to the end of its reply.
        `delay_ms`: the engine's time to each token of the creates (0: none)."""
        host, port = base_url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.health = health
        self.kept = kept
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

    async def writes(self) -> list[bytes]:
        """The body of one streaming create's reply, write by write."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(self.request)
            await reader.readuntil(b"\r\n\r\n")
            return [chunk async for chunk in _chunks(reader)]
        finally:
            writer.close()

    async def connect(self, size: int) -> None:
        """With `kept`: the connections the bursts reuse, opened before the first."""
        while len(self.open) < size:
            self.open.append(await asyncio.open_connection(self.host, self.port))

    async def burst(self, size: int) -> list[float]:
        """Seconds from each request's write to its first content delta."""
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
    """What `raw_bursts` measured: every first delta's seconds, and each burst's server CPU
    a create (µs), as counted and less the server's idle rate over the burst's window."""

    firsts: list[float]
    cpu: list[float]
    less_idle: list[float]


async def raw_bursts(
    pid: int, raw: RawBurst, size: int, rounds: int, *, idle_ms: float = 0.0
) -> Bursts:
    """`rounds` bursts, each counted from its first write until 0.3 s after its last reply
    (the group commit that follows it). The window also holds what the server does when
    nobody asks it anything (its polls and timers, `idle_cpu`): `idle_ms` a second of it
    is taken out of `less_idle`."""
    got = Bursts([], [], [])
    for _ in range(rounds):
        await asyncio.sleep(0.5)
        before, began = cpu_seconds(pid), time.monotonic()
        got.firsts.extend(await raw.burst(size))
        await asyncio.sleep(0.3)
        spent, window = cpu_seconds(pid) - before, time.monotonic() - began
        got.cpu.append(spent / size * 1e6)
        got.less_idle.append((spent - idle_ms / 1e3 * window) / size * 1e6)
    return got


async def idle_cpu(pids: list[int], windows: int = 3, seconds: float = 5.0) -> list[float]:
    """Each server's CPU while nobody asks it anything (ms a second, the median of `windows`
    windows measured on all of them at once): its polls, timers and the event loop."""
    await asyncio.sleep(2.0)  # what the last request left (the group commit, closes) is done
    figures: list[list[float]] = [[] for _ in pids]
    for _ in range(windows):
        before = [cpu_seconds(pid) for pid in pids]
        began = time.monotonic()
        await asyncio.sleep(seconds)
        took = time.monotonic() - began
        for i, pid in enumerate(pids):
            figures[i].append((cpu_seconds(pid) - before[i]) / took * 1e3)
    return [statistics.median(each) for each in figures]


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
        (idle,) = await idle_cpu([pid])
        print(f"\nserver CPU while idle: {idle:.2f} ms a second")

        alone = [await first_delta(client, args.tokens) for _ in range(args.rounds * 10)]
        raw = RawBurst(server.base_url, args.tokens)
        await raw.burst(args.burst)  # warm up
        firsts, burst_cpu, burst_net = await raw_bursts(
            pid, raw, args.burst, args.rounds, idle_ms=idle
        )
        floor = RawBurst(server.base_url, args.tokens, health=True)
        await floor.burst(args.burst)  # warm up
        # A burst of GETs is short: the mean over more of them.
        health_firsts, health_cpu, _ = await raw_bursts(pid, floor, args.burst, args.rounds * 4)
        kept = RawBurst(server.base_url, args.tokens, kept=True)
        kept_floor = RawBurst(server.base_url, args.tokens, health=True, kept=True)
        try:
            await kept.burst(args.burst)  # warm up, and the connections the bursts keep
            kept_firsts, kept_cpu, kept_net = await raw_bursts(
                pid, kept, args.burst, args.rounds, idle_ms=idle
            )
            await kept_floor.burst(args.burst)
            kept_health_firsts, kept_health_cpu, _ = await raw_bursts(
                pid, kept_floor, args.burst, args.rounds * 4
            )
        finally:
            kept.close()
            kept_floor.close()
        through_httpx: list[float] = []
        for _ in range(args.rounds):
            await asyncio.sleep(0.5)
            through_httpx += await burst(client, args.burst, args.tokens)
    print(f"\ntime to first delta, {args.rounds} rounds:")
    print("| streams started together | p50 ms | p99 ms | server CPU per create |")
    print("|---|---|---|---|")
    print(
        f"| baseline: 1 | {statistics.median(alone) * 1e3:.1f} | {pct(alone, 99) * 1e3:.1f} "
        f"| {streamed:,.0f} µs (sequential) |"
    )
    print(
        f"| {args.burst} | {statistics.median(firsts) * 1e3:.1f} | {pct(firsts, 99) * 1e3:.1f} "
        f"| {statistics.median(burst_cpu):,.0f} µs (median of the bursts); "
        f"{statistics.median(burst_net):,.0f} µs less the idle rate |"
    )
    print(
        f"| {args.burst}, through httpx | {statistics.median(through_httpx) * 1e3:.1f} "
        f"| {pct(through_httpx, 99) * 1e3:.1f} | |"
    )
    print(
        f"| floor: {args.burst} `GET /health` together (to the end of each reply) "
        f"| {statistics.median(health_firsts) * 1e3:.1f} | {pct(health_firsts, 99) * 1e3:.1f} "
        f"| {statistics.mean(health_cpu):,.0f} µs a request (mean of {len(health_cpu)} bursts) |"
    )
    print(
        f"| {args.burst}, on kept-alive connections "
        f"| {statistics.median(kept_firsts) * 1e3:.1f} | {pct(kept_firsts, 99) * 1e3:.1f} "
        f"| {statistics.median(kept_cpu):,.0f} µs (median of the bursts); "
        f"{statistics.median(kept_net):,.0f} µs less the idle rate |"
    )
    print(
        f"| floor: {args.burst} `GET /health` together, on kept-alive connections "
        f"| {statistics.median(kept_health_firsts) * 1e3:.1f} "
        f"| {pct(kept_health_firsts, 99) * 1e3:.1f} "
        f"| {statistics.mean(kept_health_cpu):,.0f} µs a request "
        f"(mean of {len(kept_health_cpu)} bursts) |"
    )


async def compare(servers: dict[str, Server], args: argparse.Namespace) -> None:
    """The same figures for each server, in alternating batches (see the module's doc)."""
    # A client waits idle while the other server's batch runs, longer than uvicorn keeps an
    # idle connection (5 s): forget them sooner than that, or a reuse races the close.
    limits = httpx.Limits(
        max_connections=args.burst + 4,
        max_keepalive_connections=args.burst + 4,
        keepalive_expiry=1.0,
    )
    clients = {
        name: httpx.AsyncClient(base_url=server.base_url, timeout=120, limits=limits)
        for name, server in servers.items()
    }
    kinds = ("health", "plain", "stream")
    cpu: dict[str, dict[str, list[float]]] = {name: {k: [] for k in kinds} for name in servers}
    bursts: dict[str, list[float]] = {name: [] for name in servers}
    burst_cpu: dict[str, list[float]] = {name: [] for name in servers}
    alone: dict[str, list[float]] = {name: [] for name in servers}
    raws = {name: RawBurst(server.base_url, args.tokens) for name, server in servers.items()}
    try:
        for name in servers:
            await raws[name].burst(args.burst)  # warm up
        for _ in range(args.batches):
            for send in kinds:
                for name, server in servers.items():
                    pid = server.process.pid
                    got = await cpu_per_request(pid, clients[name], args.batch, send, args.tokens)
                    cpu[name][send].append(got)
            for name in servers:
                for _ in range(max(1, args.batch // 10)):
                    got = await first_delta(clients[name], 2, args.paced_ms)
                    alone[name].append(got)
        for _ in range(args.rounds):
            for name, server in servers.items():
                firsts, cpu_each, _ = await raw_bursts(
                    server.process.pid, raws[name], args.burst, 1
                )
                bursts[name] += firsts
                burst_cpu[name] += cpu_each
        idle = await idle_cpu([server.process.pid for server in servers.values()])
    finally:
        for client in clients.values():
            await client.aclose()
    before, after = servers
    print(f"\n{args.batches} alternating batches of {args.batch} requests, medians:")
    print(f"| figure | {before} | {after} | {after} / {before} |")
    print("|---|---|---|---|")
    names = {
        "health": "GET /health",
        "plain": "create, stream: false",
        "stream": "create, stream: true",
    }
    for kind in kinds:
        b, a = (statistics.median(cpu[n][kind]) for n in (before, after))
        print(f"| CPU per request, {names[kind]} (µs) | {b:,.0f} | {a:,.0f} | {a / b:.2f} |")
    b, a = idle
    print(f"| CPU a second, idle (ms; both measured at once) | {b:.2f} | {a:.2f} | {a / b:.2f} |")
    b, a = (statistics.median(burst_cpu[n]) for n in (before, after))
    print(f"| CPU per create in a burst of {args.burst} (µs) | {b:,.0f} | {a:,.0f} | {a / b:.2f} |")
    paired = [x / y for y, x in zip(burst_cpu[before], burst_cpu[after], strict=True)]
    low, mid, high = ratio_interval(paired)
    print(
        f"| the same, burst by burst (each beside the other's next to it): median ratio and"
        f" its 95 % interval | | | {mid:.2f} ({low:.2f} to {high:.2f}) |"
    )
    b, a = (statistics.median(alone[n]) * 1e3 for n in (before, after))
    print(
        f"| 1 streaming create alone, engine at {args.paced_ms:g} ms a token, first delta"
        f" p50 (ms) | {b:.1f} | {a:.1f} | {a / b:.2f} |"
    )
    for label, p in (("p50", 50.0), ("p99", 99.0)):
        b, a = (pct(bursts[n], p) * 1e3 for n in (before, after))
        print(
            f"| {args.burst} streams together, first delta {label} (ms) | {b:.1f} | {a:.1f} "
            f"| {a / b:.2f} |"
        )


def ratio_interval(ratios: list[float], resamples: int = 2000) -> tuple[float, float, float]:
    """The median of `ratios` and a 95 % bootstrap interval of it (the 2.5th and 97.5th
    percentiles of the medians of `resamples` resamplings, seeded: the same ratios print the
    same interval). A change whose interval holds 1.00 is not told apart from noise."""
    rng = random.Random(0)
    medians = sorted(
        statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples)
    )
    return (
        medians[int(0.025 * resamples)],
        statistics.median(ratios),
        medians[int(0.975 * resamples) - 1],
    )


def part_of(path: str) -> str:
    """The part of the code a profiled function is in."""
    if path.startswith("~") or path.startswith("<built-in"):
        return "builtins and C methods"
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    if path.startswith(str(ROOT)):
        rel = Path(path).relative_to(ROOT).parts
        if rel[0] == "adapters" and rel[1] in ("http", "store", "engines"):
            return {
                "http": "adapters/http (API, SSE)",
                "store": "adapters/store (log, writer)",
                "engines": "adapters/engines (the scripted engine)",
            }[rel[1]]
        if rel[0] == "adapters":
            return "adapters (cli, metrics, audit view)"
        return rel[0]
    if path.startswith("<frozen "):  # e.g. abc: isinstance against an abstract class
        return path.removeprefix("<frozen ").removesuffix(">")
    stdlib = re.search(r"/lib/python3\.\d+/([^/]+)", path)  # the module or package
    return stdlib.group(1).removesuffix(".py") if stdlib else path


def report_profile(stats: pstats.Stats, creates: int) -> None:
    """Calls a create by part, and the functions with the most time of their own."""
    entries = stats.stats  # type: ignore[attr-defined]
    calls = collections.Counter[str]()
    own = collections.Counter[str]()
    total = sum(v[2] for v in entries.values())
    for (path, _line, _name), (_prim, count, tottime, _cum, _callers) in entries.items():
        calls[part_of(path)] += count
        own[part_of(path)] += tottime
    print(f"\nprofiled: {creates} streaming creates in bursts")
    print(f"function calls a create: {sum(calls.values()) / creates:,.0f}")
    print("| part | calls a create | share of the profiled time |")
    print("|---|---|---|")
    rest = [0.0, 0.0]
    for part, count in calls.most_common():
        if count / creates < 1 and own[part] / total < 0.005:
            rest[0] += count
            rest[1] += own[part]
            continue
        print(f"| {part} | {count / creates:,.0f} | {own[part] / total:.1%} |")
    print(f"| everything else | {rest[0] / creates:,.0f} | {rest[1] / total:.1%} |")
    top = sorted(entries.items(), key=lambda kv: -kv[1][2])[:15]
    print("\n| function | calls a create | share of the profiled time |")
    print("|---|---|---|")
    for (path, line, name), (_prim, count, tottime, _cum, _callers) in top:
        where = path.removeprefix(str(ROOT) + "/").split("site-packages/")[-1]
        print(f"| `{name}` ({where}:{line}) | {count / creates:,.1f} | {tottime / total:.1%} |")


@contextlib.asynccontextmanager
async def serving(
    tmp: str, args: argparse.Namespace, env: dict[str, str] | None = None
) -> AsyncIterator[Server]:
    """A `serve` on a fresh PostgreSQL database, its log in `tmp`; stopped and dropped after."""
    url, name = await fresh_postgres(PG)
    server = start_server(url, "bench", Path(tmp) / "server.log", *args.serve_arg, env=env)
    try:
        yield server
    finally:
        stop_server(server)
        await drop_postgres(PG, name)


async def profile(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(_PROFILER)
        out = Path(tmp) / "server.prof"
        env = {**os.environ, "PYTHONPATH": tmp, "RESPLOG_BENCH_PROFILE": str(out)}
        async with serving(tmp, args, env) as server:
            raw = RawBurst(server.base_url, args.tokens, kept=args.kept_alive)
            for _ in range(3):  # warm up: connections, pools, caches
                await raw.burst(args.burst)
            await asyncio.sleep(0.5)
            server.process.send_signal(signal.SIGUSR1)
            await asyncio.sleep(0.2)
            for _ in range(args.rounds):
                await raw.burst(args.burst)
                await asyncio.sleep(0.3)  # the group commit that follows the last reply
            server.process.send_signal(signal.SIGUSR2)
            raw.close()
            await asyncio.sleep(2.0)  # the server writes its figures (well under a second)
            if not out.exists():
                raise RuntimeError(f"the server wrote no profile: {server.log_text()[-2000:]}")
            report_profile(pstats.Stats(str(out)), args.rounds * args.burst)
            if args.profile_out:
                shutil.copyfile(out, args.profile_out)


async def collector(args: argparse.Namespace) -> None:
    """The cyclic collector during bursts: how often each generation ran and the CPU it
    took, beside the server's CPU a create in the same bursts."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(_COLLECTOR)
        out = Path(tmp) / "collections.json"
        path = os.pathsep.join(p for p in (tmp, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path, "RESPLOG_BENCH_GC": str(out)}
        async with serving(tmp, args, env) as server:
            raw = RawBurst(server.base_url, args.tokens, kept=args.kept_alive)
            for _ in range(3):  # warm up: connections, pools, caches
                await raw.burst(args.burst)
            server.process.send_signal(signal.SIGUSR1)
            await asyncio.sleep(0.2)
            _, cpu, _ = await raw_bursts(server.process.pid, raw, args.burst, args.rounds)
            server.process.send_signal(signal.SIGUSR2)
            raw.close()
            await asyncio.sleep(1.0)
            seen: dict[str, list[float]] = json.loads(out.read_text())
    creates = args.rounds * args.burst
    per_create = statistics.mean(cpu)
    print(
        f"\n{args.rounds} bursts of {args.burst} streaming creates: {per_create:,.0f} µs of "
        "CPU a create (mean of the bursts)"
    )
    print("| generation | collections | longest | µs a create | of the CPU a create |")
    print("|---|---|---|---|---|")
    for generation in ("0", "1", "2"):
        count, total, longest = seen.get(generation, (0, 0.0, 0.0))
        spent = total / creates * 1e6
        print(
            f"| {generation} | {count:.0f} | {longest * 1e3:.2f} ms | {spent:.1f} | "
            f"{spent / per_create:.1%} |"
        )


def sampled_part(path: str) -> str:
    """`part_of` for py-spy's paths (shortened to the import path: `asyncio/tasks.py`)."""
    if path == "asyncio/runners.py":  # only `Runner.run`, under which uvloop runs in C
        return "the event loop (uvloop, in C: polling, sockets, handles)"
    root = path.split("/", 1)[0]
    if root in ("domain", "service", "adapters"):
        return part_of(str(ROOT / path))
    return root.removesuffix(".py") or "unnamed"


def report_samples(raw: Path, cpu_us: float) -> None:
    """Where the sampled time was, by the part of the code running (the stack's innermost
    frame: a C function counts to the Python line that called it), and the busiest lines."""
    parts = collections.Counter[str]()
    lines = collections.Counter[str]()
    torn = 0
    for row in raw.read_text(errors="replace").splitlines():
        stack, _, samples = row.rpartition(" ")
        if not samples.isdigit():
            # py-spy `--nonblocking` reads the process's memory while it runs, and now and
            # then reads a frame's name torn (stray bytes, a line break): such a row has
            # no count of its own, and is left out.
            torn += 1
            continue
        leaf = stack.split(";")[-1]
        found = re.fullmatch(r"(.*) \((.*):(\d+)\)", leaf)
        path = found.group(2) if found else ""
        parts[sampled_part(path)] += int(samples)
        lines[leaf] += int(samples)
    total = sum(parts.values())
    print(f"\n{total:,} samples; a create costs {cpu_us:,.0f} µs of CPU in these bursts")
    if torn:
        print(f"({torn} torn rows of py-spy's output left out)")
    print("| part (innermost frame) | share of the samples | µs a create |")
    print("|---|---|---|")
    for part, count in parts.most_common(16):
        print(f"| {part} | {count / total:.1%} | {count / total * cpu_us:,.0f} |")
    print("\n| line | share of the samples | µs a create |")
    print("|---|---|---|")
    for line, count in lines.most_common(15):
        print(f"| `{line}` | {count / total:.1%} | {count / total * cpu_us:,.0f} |")


async def sample(args: argparse.Namespace) -> None:
    """Bursts for `args.sample` seconds under py-spy (sampling, so every line costs what it
    costs: no profiler's cost a call), and the server's CPU a create over the same bursts."""
    spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.defpath}")
    if spy is None:
        raise SystemExit("--sample needs py-spy: .venv/bin/pip install py-spy")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "samples.txt"
        async with serving(tmp, args) as server:
            pid = server.process.pid
            raw = RawBurst(server.base_url, args.tokens, kept=args.kept_alive)
            for _ in range(3):  # warm up: connections, pools, caches
                await raw.burst(args.burst)
            command = [spy, "record", "-p", str(pid), "--nonblocking", "-r", "1000"]
            command += ["-f", "raw", "-o", str(out), "-d", str(int(args.sample) + 3)]
            spy_process = await asyncio.create_subprocess_exec(
                *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            await asyncio.sleep(1.0)  # py-spy attaches
            cpu: list[float] = []
            began = time.monotonic()
            while time.monotonic() - began < args.sample:
                cpu += (await raw_bursts(pid, raw, args.burst, 1)).cpu
            await spy_process.wait()
            raw.close()
            if args.sample_out:
                shutil.copyfile(out, args.sample_out)
            report_samples(out, statistics.median(cpu))


# `--alone`: the client's pauses between `GET /health` requests (ms), and the paced
# create: a fast engine's answer (tokens, ms a token), whose flushes the interval paces.
GAPS_MS = (0, 2, 5, 10)
PACED = (200, 1.0)


async def one_after_another(
    pid: int, raw: RawBurst, n: int, gap_ms: float = 0
) -> tuple[float, float, list[float]]:
    """`n` requests on one connection, each sent once the one before has ended and the
    client has paused `gap_ms`: the server's CPU seconds over them, the seconds they took,
    and each one's seconds to its first delta. The connection is opened afresh, since the
    other server's turn may outlast uvicorn's keep-alive (5 s)."""
    raw.close()
    await raw.connect(1)
    go = asyncio.Event()
    go.set()
    firsts: list[float] = []
    before, began = cpu_seconds(pid), time.monotonic()
    for _ in range(n):
        firsts.append(await raw.one(raw.open[0], go))
        if gap_ms:
            await asyncio.sleep(gap_ms / 1000)
    return cpu_seconds(pid) - before, time.monotonic() - began, firsts


async def one_at_a_time(servers: dict[str, Server], args: argparse.Namespace) -> None:
    """Requests that overlap none, each server in turn (`--alone`, see the module's doc)."""
    tokens, ms = PACED
    raws = {
        name: {
            "health": RawBurst(server.base_url, 0, health=True, kept=True),
            "create": RawBurst(server.base_url, args.tokens, kept=True),
            "paced": RawBurst(server.base_url, tokens, kept=True, delay_ms=ms),
        }
        for name, server in servers.items()
    }
    rows = [f"gap {gap}" for gap in GAPS_MS] + ["create", "paced"]
    cpu: dict[str, dict[str, list[float]]] = {n: {r: [] for r in rows} for n in servers}
    took: dict[str, dict[str, list[float]]] = {n: {r: [] for r in rows} for n in servers}
    firsts: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for name, server in servers.items():  # warm up
            await one_after_another(server.process.pid, raws[name]["create"], 20)
        for _ in range(args.rounds):
            for name, server in servers.items():
                pid, n = server.process.pid, args.creates
                for gap in GAPS_MS:
                    c, w, _ = await one_after_another(pid, raws[name]["health"], n, gap)
                    cpu[name][f"gap {gap}"].append(c / n)
                    took[name][f"gap {gap}"].append(w / n)
                c, w, f = await one_after_another(pid, raws[name]["create"], n)
                cpu[name]["create"].append(c / n)
                took[name]["create"].append(w / n)
                firsts[name] += f
                k = max(2, n // 30)
                c, w, _ = await one_after_another(pid, raws[name]["paced"], k)
                cpu[name]["paced"].append(c / k)
                took[name]["paced"].append(w / k)
        idle = await idle_cpu([server.process.pid for server in servers.values()])
    finally:
        for each in raws.values():
            for raw in each.values():
                raw.close()
    names = list(servers)
    labels = {
        f"gap {gap}": f"`GET /health`, the client pausing {gap} ms after each" for gap in GAPS_MS
    }
    labels["create"] = f"streaming create ({args.tokens} tokens at once)"
    labels["paced"] = f"streaming create ({tokens} tokens at {ms:g} ms a token)"
    print(f"\none request at a time, {args.creates} a batch, medians of {args.rounds} rounds")
    print(
        "(CPU less the idle rate over the same time; idle: "
        + ", ".join(
            f"{name} {rate:.2f} ms a second" for name, rate in zip(names, idle, strict=True)
        )
        + ")"
    )
    head = " | ".join(f"{name}: µs CPU / ms each" for name in names)
    print(f"| request | {head} |" + (" CPU ratio |" if len(names) == 2 else ""))
    print("|---|" + "---|" * len(names) + ("---|" if len(names) == 2 else ""))
    for row in rows:
        figures = []
        for name, rate in zip(names, idle, strict=True):
            c, w = statistics.median(cpu[name][row]), statistics.median(took[name][row])
            figures.append(((c - rate / 1e3 * w) * 1e6, w * 1e3))
        cells = " | ".join(f"{c:,.0f} / {w:.2f}" for c, w in figures)
        ratio = f" {figures[1][0] / figures[0][0]:.2f} |" if len(names) == 2 else ""
        print(f"| {labels[row]} | {cells} |{ratio}")
    cells = " | ".join(f"{statistics.median(firsts[n]) * 1e3:.2f} ms" for n in names)
    print(
        f"| first delta of the create at once, p50 | {cells} |" + (" |" if len(names) == 2 else "")
    )


# The reference servers `--floors` measures resplog against (bench/reference_apps.py), by
# app and HTTP server; granian's only where it is installed (not a dependency).
REFERENCES = {
    ("asgi", "uvicorn"): "uvicorn alone: a bare ASGI app",
    ("litestar", "uvicorn"): "litestar: an app of two routes (the create's reply a `Stream`)",
    ("asgi", "granian"): "granian (Rust) alone: the bare ASGI app",
    ("litestar", "granian"): "litestar under granian: the same app of two routes",
}


def start_reference(kind: str, server: str, writes: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    script = Path(__file__).with_name("reference_apps.py")
    command = [sys.executable, str(script), kind, str(port), str(writes)]
    process = subprocess.Popen([*command, *([server] if server != "uvicorn" else [])])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the {kind} reference server ({server}) exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the {kind} reference server ({server}) did not listen")


async def floors(args: argparse.Namespace) -> None:
    """Bursts of the same reply from resplog and from the reference servers, alternating
    round by round, and bursts of `GET /health` the same way: what the HTTP platform alone
    costs of resplog's CPU a request."""
    refs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with serving(tmp, args) as server:
            writes = await RawBurst(server.base_url, args.tokens).writes()
            recorded = Path(tmp) / "writes.json"
            recorded.write_text(json.dumps([w.decode() for w in writes]))
            bases = {"resplog (`serve`, PostgreSQL)": (server.process.pid, server.base_url)}
            granian = importlib.util.find_spec("granian") is not None
            if not granian:
                print("granian is not installed: its rows are left out (pip install granian)")
            try:
                for (kind, http), label in REFERENCES.items():
                    if http == "granian" and not granian:
                        continue
                    process, base = start_reference(kind, http, recorded)
                    refs.append(process)
                    bases[label] = (process.pid, base)
                creates = await _alternate(bases, args, health=False)
                health = await _alternate(bases, args, health=True)
            finally:
                for process in refs:
                    process.terminate()
                    process.wait()
    sizes = ", ".join(f"{len(w):,}" for w in writes)
    print(
        f"\nthe same reply ({len(writes)} writes of {sizes} bytes), {args.rounds} bursts of "
        f"{args.burst} from each server, alternating:"
    )
    _floor_table(creates, "first delta")
    print(f"\n`GET /health`, {args.rounds * 4} bursts of {args.burst} from each, alternating:")
    _floor_table(health, "reply")


async def _alternate(
    bases: dict[str, tuple[int, str]], args: argparse.Namespace, *, health: bool
) -> dict[str, tuple[list[float], list[float]]]:
    """Each server's first deltas (or replies) and CPU a request, over bursts that take
    turns between the servers."""
    targets = {
        label: (pid, RawBurst(base, args.tokens, health=health))
        for label, (pid, base) in bases.items()
    }
    got: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label in targets}
    for _pid, target in targets.values():
        for _ in range(3):  # warm up: connections, pools, caches
            await target.burst(args.burst)
    for _ in range(args.rounds * (4 if health else 1)):  # a burst of GETs is short
        for label, (pid, target) in targets.items():
            firsts, cpu, _ = await raw_bursts(pid, target, args.burst, 1)
            got[label][0].extend(firsts)
            got[label][1].extend(cpu)
    return got


def _floor_table(figures: dict[str, tuple[list[float], list[float]]], what: str) -> None:
    print(f"| server | {what} p50 ms | p99 ms | CPU a request | of resplog's |")
    print("|---|---|---|---|---|")
    ours = statistics.median(next(iter(figures.values()))[1])
    for label, (firsts, cpu) in figures.items():
        print(
            f"| {label} | {statistics.median(firsts) * 1e3:.1f} | {pct(firsts, 99) * 1e3:.1f} "
            f"| {statistics.median(cpu):,.0f} µs | {statistics.median(cpu) / ours:.0%} |"
        )


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--creates", type=int, default=300)
    p.add_argument("--burst", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=8, help="scripted answer length")
    p.add_argument("--sqlite", action="store_true")
    p.add_argument("--serve-arg", action="append", default=[], help="extra `serve` argument")
    other = p.add_mutually_exclusive_group()
    other.add_argument(
        "--against", type=_tree, metavar="TREE", help="compare with a server of TREE's code"
    )
    other.add_argument(
        "--against-venv",
        type=_venv,
        metavar="VENV",
        help="compare with this tree's server run from VENV (another interpreter or build)",
    )
    p.add_argument("--batches", type=int, default=10, help="alternating batches (--against)")
    p.add_argument("--batch", type=int, default=40, help="requests per batch (--against)")
    p.add_argument(
        "--paced-ms",
        type=float,
        default=20,
        help="the engine's ms a token for the creates timed alone (--against)",
    )
    p.add_argument(
        "--profile", action="store_true", help="what a create is made of (see the module's doc)"
    )
    p.add_argument(
        "--profile-out", metavar="PATH", help="with --profile: keep the raw pstats file there"
    )
    p.add_argument(
        "--floors",
        action="store_true",
        help="resplog beside servers that send the same reply and do nothing else",
    )
    p.add_argument(
        "--sample",
        type=float,
        metavar="SECONDS",
        help="bursts for SECONDS under py-spy: where a create's CPU goes, line by line",
    )
    p.add_argument(
        "--sample-out",
        metavar="PATH",
        help="with --sample: keep py-spy's raw stacks there (one line a stack: frames, count)",
    )
    p.add_argument(
        "--collector",
        action="store_true",
        help="bursts with the cyclic collector's runs timed (see the module's doc)",
    )
    p.add_argument(
        "--alone",
        action="store_true",
        help="requests one at a time: GET /health after pauses, a create at once and paced",
    )
    p.add_argument(
        "--kept-alive",
        action="store_true",
        help="with --sample, --profile or --collector: the bursts reuse their connections "
        "(keep-alive), as a pool does",
    )
    args = p.parse_args()
    if args.sample:
        await sample(args)
        return
    if args.floors:
        await floors(args)
        return
    if args.profile:
        await profile(args)
        return
    if args.collector:
        await collector(args)
        return
    if args.against or args.against_venv:
        await against(args, one_at_a_time if args.alone else compare)
        return
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
            if args.alone:
                await one_at_a_time({"this tree": server}, args)
            else:
                await measure(server, args)
        finally:
            stop_server(server)
            if name:
                await drop_postgres(PG, name)


def _tree(value: str) -> Path:
    return Path(value).resolve()


def _venv(value: str) -> Path:
    venv = Path(value).resolve()
    if not (venv / "bin" / "resplog").is_file():
        raise argparse.ArgumentTypeError(
            f"{venv}/bin/resplog not found: install resplog there ({value}/bin/pip install -e .)"
        )
    return venv


async def against(
    args: argparse.Namespace,
    measured: Callable[[dict[str, Server], argparse.Namespace], Awaitable[None]],
) -> None:
    """This tree's server beside another tree's (`--against`), or beside itself run from
    another virtual environment (`--against-venv`: another interpreter or build), both
    `measured` (`compare`, or `one_at_a_time`)."""
    ours = str(Path(sys.executable).with_name("resplog"))
    env: dict[str, str] | None = None
    if args.against_venv:
        venv: Path = args.against_venv
        theirs, label = str(venv / "bin" / "resplog"), f"{venv.name} (venv)"
        mine = f"this venv ({Path(sys.executable).parents[1].name})"
    else:
        tree: Path = args.against
        theirs, label, mine = ours, tree.name, "this tree"
        env = {**os.environ, "PYTHONPATH": str(tree)}
    made: list[str] = []
    servers: dict[str, Server] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name, command, server_env in ((label, theirs, env), (mine, ours, None)):
                url, db = await fresh_postgres(PG)
                made.append(db)
                log = Path(tmp) / f"{len(made)}.log"
                servers[name] = start_server(
                    url, "bench", log, *args.serve_arg, env=server_env, resplog=command
                )
            print(f"store: postgres, tokens per answer: {args.tokens}, against {label}")
            await measured(servers, args)
        finally:
            for server in servers.values():
                stop_server(server)
            for db in made:
                await drop_postgres(PG, db)


if __name__ == "__main__":
    asyncio.run(main())
