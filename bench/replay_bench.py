"""A replay of one long stream over HTTP: `GET /v1/responses/{id}/events`, read to its end
from a running `serve` (PostgreSQL, its log written beforehand), as SSE and as JSON Lines.
Prints the server's CPU an event replayed and the events a second, medians of `--rounds`.

    .venv/bin/python bench/replay_bench.py [--events 20000] [--rounds 9]

With `--against TREE` (a checkout of another commit, e.g. `git worktree add /tmp/before
HEAD~1`), a server of TREE's code replays the same stream from a database of its own, the
two taking turns round by round, and the bench prints the ratio this tree / that tree.
(This box's timings move by a tenth from minute to minute: compare within a run.)
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

from adapters.store.factory import open_store
from bench.burst_bench import cpu_seconds
from bench.databases import PG, drop_postgres, fresh_postgres
from domain.events import AnyEvent, ResponseCreated
from tests.e2e.conftest import Server, start_server, stop_server
from tests.integration import streams

FORMATS = {"sse": "", "jsonl": "?format=jsonl"}


def long_stream(events: int) -> tuple[str, list[AnyEvent]]:
    """A completed response of about `events` events, nearly all text deltas, owned as a
    server without keys owns what it creates."""
    appends = streams.script(deltas=max(1, events - 8), owner="anonymous")
    first = streams.events_of(appends)[0]
    assert isinstance(first, ResponseCreated)
    return first.response.id, streams.events_of(appends)


async def write(url: str, rid: str, events: list[AnyEvent]) -> None:
    store = await open_store(url)
    try:
        for at in range(0, len(events), 1000):
            await store.append(rid, at - 1, events[at : at + 1000])
    finally:
        await store.close()


async def replay(server: Server, rid: str, fmt: str) -> tuple[float, float, int]:
    """Server CPU seconds and wall seconds of one replay read to its end, and its bytes."""
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
        await asyncio.sleep(0.2)  # what the previous request left settles
        cpu = cpu_seconds(server.process.pid)
        began = time.perf_counter()
        size = 0
        async with client.stream("GET", f"/v1/responses/{rid}/events{FORMATS[fmt]}") as r:
            r.raise_for_status()
            async for chunk in r.aiter_raw():
                size += len(chunk)
        took = time.perf_counter() - began
        return cpu_seconds(server.process.pid) - cpu, took, size


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--against", type=Path, metavar="TREE", help="compare with TREE's server")
    args = p.parse_args()
    if args.events < 10 or args.rounds < 1:
        p.error("--events must be at least 10 and --rounds at least 1")
    rid, events = long_stream(args.events)
    kinds: list[tuple[str, dict[str, str] | None]] = [("this tree", None)]
    if args.against:
        kinds.insert(0, (args.against.name, {**os.environ, "PYTHONPATH": str(args.against)}))
    servers: dict[str, Server] = {}
    made: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name, env in kinds:
                url, db = await fresh_postgres(PG)
                made.append(db)
                servers[name] = start_server(url, "bench", Path(tmp) / f"{len(made)}.log", env=env)
                await write(url, rid, events)
            figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
            sizes: dict[str, int] = {}
            for fmt in FORMATS:
                for name in servers:  # warm up: pools, caches, the first pages
                    await replay(servers[name], rid, fmt)
                for _ in range(args.rounds):
                    for name, server in servers.items():
                        cpu, took, sizes[fmt] = await replay(server, rid, fmt)
                        figures.setdefault((name, fmt), []).append((cpu, took))
        finally:
            for server in servers.values():
                stop_server(server)
            for db in made:
                await drop_postgres(PG, db)
    n = len(events)
    print(f"one stream of {n:,} events replayed, {args.rounds} rounds, medians")
    names = list(servers)
    head = " | ".join(f"{name}: µs an event / events a second" for name in names)
    ratio = " | this tree / other, CPU" if len(names) == 2 else ""
    print(f"| format | bytes | {head}{ratio} |")
    print("|---|---|" + "---|" * (len(names) + (len(names) == 2)))
    for fmt in FORMATS:
        cells, cpus = [], []
        for name in names:
            cpu = statistics.median(c for c, _ in figures[(name, fmt)]) / n * 1e6
            rate = n / statistics.median(t for _, t in figures[(name, fmt)])
            cells.append(f"{cpu:.2f} / {rate:,.0f}")
            cpus.append(cpu)
        tail = f" | {cpus[1] / cpus[0]:.2f}" if len(names) == 2 else ""
        print(f"| {fmt} | {sizes[fmt]:,} | {' | '.join(cells)}{tail} |")


if __name__ == "__main__":
    asyncio.run(main())
