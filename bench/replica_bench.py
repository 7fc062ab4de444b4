"""Reads from a standby: replay and listing throughput, and the primary's CPU per read,
with `--replica-database-url` against the primary alone.

A private primary and its streaming standby (never the shared server), on this machine:
the standby's CPU is this machine's too, so the throughput says what the extra hop costs
and the primary's CPU what it is spared. `--responses` responses of `--tokens` tokens are
created (scripted engine), then two `serve` processes on the primary, one with
`--replica-database-url` at the standby and one without, each take `--seconds` of
replays in turns (`--rounds`, alternating): `--concurrency` clients each reading
`GET /v1/responses/{id}/events?format=jsonl&follow=false` of a random ended response.
Then the same for listings: `--conversations` conversations of `--items` items each,
every client reading `GET /v1/conversations/{id}/items?limit=20` of a random one (on the
standby once it has replayed the primary's WAL position of the moment asked, which the
primary is asked for: adapters/store/replica.py). Prints reads a second and the primary's
CPU milliseconds a read (its postmaster and backends, from /proc), beside the primary alone.

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


async def conversations(server: Server, count: int, items: int) -> list[str]:
    body = {"items": [{"role": "user", "content": f"item {i}"} for i in range(items)]}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        made = []
        for _ in range(count):
            reply = await http.post("/v1/conversations", json=body)
            reply.raise_for_status()
            made.append(str(reply.json()["id"]))
        return made


async def listings(server: Server, ids: list[str], concurrency: int, seconds: float) -> int:
    done = 0
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60, limits=limits) as http:
        until = time.monotonic() + seconds

        async def client() -> None:
            nonlocal done
            while time.monotonic() < until:
                cid = random.choice(ids)
                reply = await http.get(f"/v1/conversations/{cid}/items", params={"limit": 20})
                reply.raise_for_status()
                assert reply.json()["data"]
                done += 1

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return done


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
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--items", type=int, default=20)
    args = p.parse_args()
    kinds = {"replays": replays, "listings": listings}
    keys = [(kind, name) for kind in kinds for name in ("replica", "primary")]
    rates: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    cpu: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
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
            ids = {
                "replays": asyncio.run(create(servers["primary"], args.responses, args.tokens)),
                "listings": asyncio.run(
                    conversations(servers["primary"], args.conversations, args.items)
                ),
            }
            until_replayed(standby, len(ids["replays"]))
            for kind, read in kinds.items():
                for server in servers.values():  # warm: connections, partitions looked up
                    asyncio.run(read(server, ids[kind], args.concurrency, 1.0))
                for _ in range(args.rounds):
                    for name, server in servers.items():
                        before = cpu_seconds(postmaster(primary))
                        count = asyncio.run(read(server, ids[kind], args.concurrency, args.seconds))
                        spent = cpu_seconds(postmaster(primary)) - before
                        rates[kind, name].append(count / args.seconds)
                        cpu[kind, name].append(spent / max(count, 1) * 1e3)
            lagged = "lags" in servers["replica"].log_text()
        finally:
            for server in servers.values():
                stop_server(server)
    table = Table(
        f"{args.responses} ended responses of {args.tokens} tokens (replays), "
        f"{args.conversations} conversations of {args.items} items (listings, 20 a page), "
        f"{args.concurrency} clients, median of {args.rounds} turns of {args.seconds:g} s",
        "value",
    )
    for kind in kinds:
        table.add(
            f"{kind} with the standby: reads/s",
            median(rates[kind, "replica"]),
            "primary alone",
            median(rates[kind, "primary"]),
        )
        table.add(
            f"{kind} with the standby: primary CPU ms/read",
            median(cpu[kind, "replica"]),
            "primary alone",
            median(cpu[kind, "primary"]),
        )
    table.print()
    if lagged:
        print(
            "note: the standby lagged at times (the server's log says so): some listings "
            "were read on the primary"
        )


if __name__ == "__main__":
    main()
