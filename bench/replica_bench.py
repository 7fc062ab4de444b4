"""Replays from a standby: replay throughput, and the primary's CPU per replay, with
`--replica-database-url` against the primary alone.

A private primary and its streaming standby (never the shared server), on this machine:
the standby's CPU is this machine's too, so the throughput says what the extra hop costs
and the primary's CPU what it is spared. `--responses` responses of `--tokens` tokens are
created (scripted engine), then two `serve` processes on the primary, one with
`--replica-database-url` at the standby and one without, each take `--seconds` of
replays in turns (`--rounds`, alternating): `--concurrency` clients each reading
`GET /v1/responses/{id}/events?format=jsonl&follow=false` of a random ended response.
Prints replays a second and the primary's CPU milliseconds a replay (its postmaster and
backends, from /proc), beside the primary alone.

    .venv/bin/python bench/replica_bench.py
    .venv/bin/python bench/replica_bench.py --responses 500 --tokens 500 --concurrency 16
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, cpu_seconds, median, parser, scripted, workdir
from tests.e2e.cluster import PrivatePostgres, replicated_postgres
from tests.e2e.conftest import RESPLOG, Server, start_server, stop_server


def postmaster(cluster: PrivatePostgres) -> int:
    return int((cluster.data / "postmaster.pid").read_text().split()[0])


async def create(server: Server, count: int, tokens: int) -> list[str]:
    body = {"model": "scripted", "input": "x", "metadata": {"scripted_tokens": str(tokens)}}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        gate = asyncio.Semaphore(16)

        async def one() -> str:
            async with gate:
                reply = await http.post("/v1/responses", json=body)
                reply.raise_for_status()
                return str(reply.json()["id"])

        return list(await asyncio.gather(*(one() for _ in range(count))))


async def replays(server: Server, ids: list[str], concurrency: int, seconds: float) -> int:
    done = 0
    params = {"format": "jsonl", "follow": "false"}
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60, limits=limits) as http:
        until = time.monotonic() + seconds

        async def client() -> None:
            nonlocal done
            while time.monotonic() < until:
                rid = random.choice(ids)
                reply = await http.get(f"/v1/responses/{rid}/events", params=params)
                reply.raise_for_status()
                assert reply.text.rstrip().endswith("}")
                done += 1

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return done


def until_replayed(standby: PrivatePostgres, count: int) -> None:
    dsn = standby.dsn()
    sql = "SELECT count(*) FROM responses WHERE status = 'completed'"
    deadline = time.monotonic() + 60
    while True:
        out = subprocess.run(
            ["psql", dsn, "-Atc", sql], capture_output=True, text=True, check=True
        ).stdout
        if int(out.strip() or 0) >= count:
            return
        if time.monotonic() > deadline:
            raise SystemExit("the standby never caught up")
        time.sleep(0.1)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--responses", type=int, default=200)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rates: dict[str, list[float]] = {"replica": [], "primary": []}
    cpu: dict[str, list[float]] = {"replica": [], "primary": []}
    with workdir() as tmp, replicated_postgres() as (primary, standby):
        subprocess.run([RESPLOG, "migrate", "--database-url", primary.url()], check=True)
        flags = {"replica": ("--replica-database-url", standby.url()), "primary": ()}
        servers = {
            name: start_server(
                primary.url(), "postgres", tmp / f"{name}.log", *extra, engine=scripted()
            )
            for name, extra in flags.items()
        }
        try:
            ids = asyncio.run(create(servers["primary"], args.responses, args.tokens))
            until_replayed(standby, len(ids))
            for server in servers.values():  # warm: connections, partitions looked up
                asyncio.run(replays(server, ids, args.concurrency, 1.0))
            for _ in range(args.rounds):
                for name, server in servers.items():
                    before = cpu_seconds(postmaster(primary))
                    count = asyncio.run(replays(server, ids, args.concurrency, args.seconds))
                    spent = cpu_seconds(postmaster(primary)) - before
                    rates[name].append(count / args.seconds)
                    cpu[name].append(spent / max(count, 1) * 1e3)
        finally:
            for server in servers.values():
                stop_server(server)
    table = Table(
        f"Replays of {args.responses} ended responses of {args.tokens} tokens, "
        f"{args.concurrency} clients, median of {args.rounds} turns of {args.seconds:g} s",
        "value",
    )
    table.add(
        "with the standby: replays/s",
        median(rates["replica"]),
        "primary alone",
        median(rates["primary"]),
    )
    table.add(
        "with the standby: primary CPU ms/replay",
        median(cpu["replica"]),
        "primary alone",
        median(cpu["primary"]),
    )
    table.print()


if __name__ == "__main__":
    main()
