"""What one create costs the server, and a burst of simultaneous streaming creates.

Starts a real `resplog serve` (scripted engine, zero delay) on a fresh PostgreSQL database
(or SQLite) and measures, each beside its baseline from the same run:

- **CPU per create**: the server's user + system time (from `/proc`, its child processes
  included, so `--serve-arg=--processes --serve-arg=N` is counted whole) over N
  sequential creates, divided by N, in µs. Baseline: the same number of `GET /health`
  requests through the same server (what the HTTP stack and middlewares cost alone).
  Plain creates (`stream: false`, the whole answer in the reply) and streaming creates
  (`stream: true`, read to the end) are measured apart; the scripted answer is
  `--tokens` tokens long, so generation is part of the figure, as it is for a client.
- **Burst**: `--burst` streaming creates sent in the same instant, time to the first
  content delta of each (p50/p99 over the rounds). Baseline: one streaming create alone.

    .venv/bin/python bench/burst_bench.py --creates 300 --burst 64 --rounds 5

With `--against TREE` (a checkout of another commit, e.g. `git worktree add /tmp/before
HEAD~1`), a second server runs that tree's code (`PYTHONPATH=TREE`, same venv) on its own
database, and the two are measured side by side: batches of `--batch` requests of each kind,
and the bursts, alternate between them, so that both meet the same load on a shared box.
Figures are medians over the batches, with the ratio this tree / that tree.

    .venv/bin/python bench/burst_bench.py --against /tmp/before --batches 10 --batch 40
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


def _stat(pid: str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system time so far of `pid` and its live descendants (`serve --processes N`
    serves in children), threads included: fields 14 and 15 of each one's stat."""
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
            fields = _stat(str(member))
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


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
    try:
        for name in servers:
            await burst(clients[name], args.burst, args.tokens)  # warm up
        for _ in range(args.batches):
            for send in kinds:
                for name, server in servers.items():
                    pid = server.process.pid
                    got = await cpu_per_request(pid, clients[name], args.batch, send, args.tokens)
                    cpu[name][send].append(got)
        for _ in range(args.rounds):
            for name in servers:
                await asyncio.sleep(0.5)
                bursts[name] += await burst(clients[name], args.burst, args.tokens)
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
    for label, p in (("p50", 50.0), ("p99", 99.0)):
        b, a = (pct(bursts[n], p) * 1e3 for n in (before, after))
        print(
            f"| {args.burst} streams together, first delta {label} (ms) | {b:.1f} | {a:.1f} "
            f"| {a / b:.2f} |"
        )


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--creates", type=int, default=300)
    p.add_argument("--burst", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=8, help="scripted answer length")
    p.add_argument("--sqlite", action="store_true")
    p.add_argument("--serve-arg", action="append", default=[], help="extra `serve` argument")
    p.add_argument(
        "--against", type=_tree, metavar="TREE", help="compare with a server of TREE's code"
    )
    p.add_argument("--batches", type=int, default=10, help="alternating batches (--against)")
    p.add_argument("--batch", type=int, default=40, help="requests per batch (--against)")
    args = p.parse_args()
    if args.against:
        await against(args)
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
            await measure(server, args)
        finally:
            stop_server(server)
            if name:
                await drop_postgres(PG, name)


def _tree(value: str) -> Path:
    return Path(value).resolve()


async def against(args: argparse.Namespace) -> None:
    tree: Path = args.against
    env = {**os.environ, "PYTHONPATH": str(tree)}
    made: list[str] = []
    servers: dict[str, Server] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name, server_env in ((tree.name, env), ("this tree", None)):
                url, db = await fresh_postgres(PG)
                made.append(db)
                log = Path(tmp) / f"{len(made)}.log"
                servers[name] = start_server(url, "bench", log, *args.serve_arg, env=server_env)
            print(f"store: postgres, tokens per answer: {args.tokens}, against {tree}")
            await compare(servers, args)
        finally:
            for server in servers.values():
                stop_server(server)
            for db in made:
                await drop_postgres(PG, db)


if __name__ == "__main__":
    asyncio.run(main())
