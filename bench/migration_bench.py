"""What migration 0008 (the log partitioned by day) costs a running log: how long it takes,
and how long a write waits on it meanwhile (prints figures; not a test).

Each round makes a fresh PostgreSQL database at migration 0007 holding `--events` events
(`--per-stream` to a stream, ids made by time as the server makes them, over the last
`--days` days, each event's JSON `--bytes` long: a loaded log's average), then runs
`resplog migrate` to head in a child process while a probe appends a new stream's first
event every `--every-ms` (as a server would, each in a transaction of its own) and times
each append. Printed per round: the migration's seconds, and the probe's longest wait and
p99. The baseline, from the same run: the same with `--against TREE` (a checkout of
another commit, e.g. `git worktree add /tmp/before HEAD~1`), whose `resplog migrate` runs
with `PYTHONPATH=TREE`; the rounds alternate between the two.

    .venv/bin/python bench/migration_bench.py --events 1000000 --against /tmp/before
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.store.migrate import upgrade_async
from bench.databases import PG, _dsn, drop_postgres, fresh_postgres
from service.ids import new_id

RESPLOG = str(Path(sys.executable).with_name("resplog"))


async def load(url: str, events: int, per_stream: int, days: float, size: int) -> None:
    """`events` rows at 0007: `events // per_stream` streams, their ids spread over `days`."""
    await upgrade_async(url, "0007")
    streams = max(1, events // per_stream)
    now = time.time()
    ids = [new_id("resp", now - days * 86400 * (1 - i / streams)) for i in range(streams)]
    conn = await asyncpg.connect(_dsn(url))
    try:
        await conn.execute("CREATE TEMP TABLE ids (n int, id text)")
        await conn.copy_records_to_table("ids", records=list(enumerate(ids)))
        payload = '{"pad": "' + "x" * max(0, size - 11) + '"}'
        await conn.execute(
            "INSERT INTO events (stream_id, position, type, data, recorded_at) "
            "SELECT ids.id, p, 'response.output_text.delta', $1, 1.0 "
            "FROM ids, generate_series(0, $2 - 1) AS p ORDER BY ids.n, p",
            payload,
            per_stream,
        )
        await conn.execute("VACUUM ANALYZE events")
    finally:
        await conn.close()


async def probe(url: str, every: float, stop: asyncio.Event) -> list[float]:
    """Seconds each append took, one new stream's first event every `every` s."""
    conn = await asyncpg.connect(_dsn(url))
    waits: list[float] = []
    try:
        while not stop.is_set():
            sid = new_id("resp", time.time())
            t0 = time.perf_counter()
            await conn.execute(
                "INSERT INTO events (stream_id, position, type, data, recorded_at) "
                "VALUES ($1, 0, 'response.created', '{}', 1.0)",
                sid,
            )
            waits.append(time.perf_counter() - t0)
            await asyncio.sleep(every)
    finally:
        await conn.close()
    return waits


async def one_round(args: argparse.Namespace, tree: str | None) -> tuple[float, list[float]]:
    url, name = await fresh_postgres(args.database_url)
    try:
        await load(url, args.events, args.per_stream, args.days, args.bytes)
        env = dict(os.environ)
        if tree is not None:
            env["PYTHONPATH"] = tree
        stop = asyncio.Event()
        probing = asyncio.create_task(probe(url, args.every_ms / 1000, stop))
        await asyncio.sleep(0.5)
        t0 = time.perf_counter()
        child = await asyncio.create_subprocess_exec(
            RESPLOG, "migrate", "--database-url", url, env=env, stdout=subprocess.DEVNULL
        )
        if await child.wait():
            raise RuntimeError("resplog migrate failed")
        took = time.perf_counter() - t0
        await asyncio.sleep(0.5)
        stop.set()
        return took, await probing
    finally:
        await drop_postgres(args.database_url, name)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--database-url", default=PG)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--per-stream", type=int, default=300)
    p.add_argument("--days", type=float, default=90)
    p.add_argument("--bytes", type=int, default=200, help="each event's JSON")
    p.add_argument("--every-ms", type=float, default=10, help="the probe's pace")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--against", help="a checkout of another commit: the baseline")
    args = p.parse_args()
    trees: dict[str, str | None] = {"this tree": None}
    if args.against:
        trees = {"before": args.against, **trees}
    print(f"{args.events:,} events at 0007, probe every {args.every_ms:g} ms")
    print("| tree | round | migration s | probe: longest wait ms | p99 ms | appends |")
    print("|---|---|---|---|---|---|")
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for n in range(args.rounds):
        for name, tree in trees.items():
            took, waits = await one_round(args, tree)
            longest = max(waits)
            figures[name].append((took, longest))
            print(
                f"| {name} | {n + 1} | {took:.2f} | {longest * 1e3:.1f} "
                f"| {pct(waits, 99) * 1e3:.1f} | {len(waits)} |"
            )
    print("\nmedians:")
    for name, rows in figures.items():
        took = statistics.median(r[0] for r in rows)
        longest = statistics.median(r[1] for r in rows)
        print(f"  {name}: migration {took:.2f} s, longest wait {longest * 1e3:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
