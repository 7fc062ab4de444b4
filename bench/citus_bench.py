"""resplog on Citus against one plain PostgreSQL, in one run on this machine: paced appends
through the group-commit writer (S streams x R events/s, a tailer on each: sustained
events/s, append -> visible p50/p99, the flush's time) and streaming creates through `resplog
serve` (C clients creating streamed responses back to back for T seconds: creates/s and
the time to the last event), first on a coordinator and two workers, then after a third
worker and a rebalance. Every node is a private cluster of this machine with the same
settings (fsync off); the plain PostgreSQL is one too. On a machine of a few cores the
nodes share the cores: the ratios show what distribution costs, not what it scales to.

    .venv/bin/python bench/citus_bench.py --streams 32 --rate 50 --seconds 8 --clients 8
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from adapters.store.factory import open_store
from adapters.store.migrate import citus_async, upgrade_async
from bench.harness import Table, parser, pct, workdir
from bench.store_bench import POOL, Run, group_phase, plans
from tests.e2e.citus_cluster import CitusCluster, why_not
from tests.e2e.cluster import PrivatePostgres
from tests.e2e.conftest import start_server, stop_server


@dataclass
class Creates:
    done: int
    seconds: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.done / self.seconds


async def paced(url: str, streams: int, rate: float, seconds: float) -> Run:
    store = await open_store(url, pool_size=POOL, max_overflow=8)
    try:
        work = plans(streams, int(rate * seconds))
        return await group_phase(store, "paced", work, rate=rate, interval=0.005, per_task=8)
    finally:
        await store.close()


async def creates(base: str, clients: int, seconds: float, tokens: int) -> Creates:
    """`clients` clients, each creating a streamed response and reading it to its end,
    again and again, for `seconds`."""
    latencies: list[float] = []
    body = {
        "model": "scripted",
        "input": "bench",
        "stream": True,
        "metadata": {"scripted_tokens": str(tokens)},
    }
    deadline = time.perf_counter() + seconds

    async def client(http: httpx.AsyncClient) -> None:
        while time.perf_counter() < deadline:
            begin = time.perf_counter()
            async with http.stream("POST", "/v1/responses", json=body) as answer:
                answer.raise_for_status()
                async for _ in answer.aiter_bytes():
                    pass
            latencies.append(time.perf_counter() - begin)

    t0 = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return Creates(len(latencies), time.perf_counter() - t0, latencies)


@contextlib.contextmanager
def served(url: str, tmp: Path) -> Iterator[str]:
    server = start_server(
        url, "postgres", tmp / f"serve-{time.monotonic_ns()}.log", "--engine", "scripted"
    )
    try:
        yield server.base_url
    finally:
        stop_server(server)


def measure(url: str, a: argparse.Namespace, tmp: Path) -> tuple[Run, Creates]:
    run = asyncio.run(paced(url, a.streams, a.rate, a.seconds))
    print(run.line(), flush=True)
    with served(url, tmp) as base:
        made = asyncio.run(creates(base, a.clients, a.create_seconds, a.tokens))
    print(f"creates   {made.done} in {made.seconds:.1f}s = {made.rate:.1f}/s", flush=True)
    return run, made


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--rate", type=float, default=50, help="events/s per stream (paced)")
    p.add_argument("--seconds", type=float, default=8, help="length of the paced phase")
    p.add_argument("--clients", type=int, default=8, help="concurrent streaming creates")
    p.add_argument("--create-seconds", type=float, default=8)
    p.add_argument("--tokens", type=int, default=20, help="deltas a created response streams")
    p.add_argument("--shards", type=int, default=32, help="Citus shards a table (its default)")
    args = p.parse_args()
    reason = why_not()
    if reason is not None:
        sys.exit(f"citus_bench: {reason}")
    results: dict[str, tuple[Run, Creates]] = {}
    with workdir() as tmp:
        plain = PrivatePostgres()
        plain.options = " -c max_connections=300"
        try:
            plain.start()
            url = plain.url()
            asyncio.run(upgrade_async(url))
            print("# plain PostgreSQL", flush=True)
            results["plain"] = measure(url, args, tmp)
        finally:
            plain.destroy()
        cluster = CitusCluster(2)
        try:
            url = cluster.new_database("bench", shards=args.shards)
            asyncio.run(upgrade_async(url))
            asyncio.run(citus_async(url))
            print("# Citus, coordinator + 2 workers", flush=True)
            results["two"] = measure(url, args, tmp)
            cluster.add_worker("bench")
            began = time.perf_counter()
            cluster.psql(cluster.coordinator, "SELECT citus_rebalance_start()", "bench")
            cluster.psql(cluster.coordinator, "SELECT citus_rebalance_wait()", "bench")
            print(f"# rebalanced onto a third worker in {time.perf_counter() - began:.1f}s")
            results["three"] = measure(url, args, tmp)
        finally:
            cluster.destroy()
    report(results)


def report(results: dict[str, tuple[Run, Creates]]) -> None:
    names = {"plain": "plain PostgreSQL", "two": "Citus, 2 workers", "three": "Citus, 3 workers"}
    rate = Table("Paced appends (the group-commit writer, a tailer on each stream)", "events/s")
    latency = Table("Append -> visible (paced, steady state)", "ms")
    made = Table("Streaming creates through `resplog serve`", "creates/s")
    took = Table("A streamed create, request -> last event", "ms")
    for key, against in (("two", "plain"), ("three", "plain"), ("three", "two")):
        (run, creating), (base_run, base_creating) = results[key], results[against]
        rate.add(names[key], run.steady_rate, names[against], base_run.steady_rate)
        for q in (50, 99):
            latency.add(
                f"{names[key]}, p{q}",
                pct(run.steady, q) * 1e3,
                f"{names[against]}, p{q}",
                pct(base_run.steady, q) * 1e3,
            )
        latency.add(
            f"{names[key]}, a flush", run.flush_ms, f"{names[against]}, a flush", base_run.flush_ms
        )
        made.add(names[key], creating.rate, names[against], base_creating.rate)
        took.add(
            f"{names[key]}, p50",
            statistics.median(creating.latencies) * 1e3,
            f"{names[against]}, p50",
            statistics.median(base_creating.latencies) * 1e3,
        )
    for table in (rate, latency, made, took):
        table.print()


if __name__ == "__main__":
    main()
