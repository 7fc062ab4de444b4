"""PgBouncer: what time to the first delta a streaming create costs through PgBouncer in
transaction mode, beside the same server straight on PostgreSQL.

A private PostgreSQL cluster (never the shared server) with PgBouncer 1.18 in front of it
(`pool_mode = transaction`, `--pool-size` server connections); three `serve` processes on
one database: straight on PostgreSQL (the baseline), through PgBouncer with
`--session-database-url` straight to PostgreSQL, and through PgBouncer alone (its tails
poll). Each takes `--requests` streaming creates, `--concurrency` at a time (scripted
engine, 5 ms a token, `--tokens` tokens), in `--rounds` turns taken in alternation, each
setup first in one of them (the machine's other load falls on all three alike); the time
from sending the request to its first `response.output_text.delta`, and to its
`response.completed`, median and p95.

    .venv/bin/python bench/pgbouncer_bench.py
    .venv/bin/python bench/pgbouncer_bench.py --requests 400 --concurrency 16
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, median, parser, pct, scripted, workdir
from tests.e2e.cluster import pgbouncer_in_front, private_postgres
from tests.e2e.conftest import RESPLOG, Server, start_server, stop_server


async def one(http: httpx.AsyncClient, tokens: int) -> tuple[float, float]:
    body = {
        "model": "scripted",
        "input": "x",
        "stream": True,
        "metadata": {"scripted_tokens": str(tokens), "scripted_delay_ms": "5"},
    }
    start = time.perf_counter()
    first = None
    async with http.stream("POST", "/v1/responses", json=body) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if first is None and line == "event: response.output_text.delta":
                first = time.perf_counter() - start
            if line == "event: response.completed":
                assert first is not None
                return first, time.perf_counter() - start
    raise SystemExit("a stream ended without response.completed")


async def measure(
    server: Server, requests: int, concurrency: int, tokens: int
) -> tuple[list[float], list[float]]:
    """One turn of `requests` creates on `server`: first-delta and completed times."""
    firsts: list[float] = []
    totals: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60, limits=limits) as http:
        for _ in range(10):  # warm-up: connections in every pool
            await one(http, tokens)

        async def run() -> None:
            async with gate:
                first, total = await one(http, tokens)
                firsts.append(first)
                totals.append(total)

        await asyncio.gather(*(run() for _ in range(requests)))
    return firsts, totals


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--tokens", type=int, default=20)
    p.add_argument("--pool-size", type=int, default=4, help="PgBouncer's default_pool_size")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    results: dict[str, tuple[list[float], list[float]]] = {}
    servers: dict[str, Server] = {}
    with (
        workdir() as tmp,
        private_postgres() as pg,
        pgbouncer_in_front(pg, pool_size=args.pool_size) as bouncer,
    ):
        subprocess.run([RESPLOG, "migrate", "--database-url", pg.url()], check=True)
        setups = {
            "direct": (pg.url(), ()),
            "pgbouncer + session URL": (
                bouncer.url(),
                ("--session-database-url", pg.url()),
            ),
            "pgbouncer alone": (bouncer.url(), ()),
        }
        try:
            for name, (url, extra) in setups.items():
                log = tmp / f"{len(servers)}.log"
                servers[name] = start_server(
                    url, "postgres", log, *extra, engine=scripted(), migrate=False
                )
                results[name] = ([], [])
            names = list(servers)
            for turn in range(args.rounds):
                for name in names[turn % 3 :] + names[: turn % 3]:  # each goes first once
                    server = servers[name]
                    firsts, totals = asyncio.run(
                        measure(server, args.requests // args.rounds, args.concurrency, args.tokens)
                    )
                    results[name][0].extend(firsts)
                    results[name][1].extend(totals)
        finally:
            for server in servers.values():
                stop_server(server)
    base_first, base_total = results["direct"]
    table = Table(
        f"Streaming creates, {args.requests} at {args.concurrency} at a time, "
        f"{args.tokens} tokens at 5 ms (PgBouncer pool of {args.pool_size})",
        "ms",
    )
    for name in ("pgbouncer + session URL", "pgbouncer alone"):
        firsts, totals = results[name]
        table.add(
            f"{name}: first delta, median",
            median(firsts) * 1e3,
            "direct",
            median(base_first) * 1e3,
        )
        table.add(
            f"{name}: first delta, p95",
            pct(firsts, 95) * 1e3,
            "direct",
            pct(base_first, 95) * 1e3,
        )
        table.add(
            f"{name}: completed, median",
            median(totals) * 1e3,
            "direct",
            median(base_total) * 1e3,
        )
    table.print()


if __name__ == "__main__":
    main()
