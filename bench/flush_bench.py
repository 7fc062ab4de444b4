"""The flush statement's CPU in the writing process (prints figures; not a test). See
docs/performance.md, "The flush's parameters".

    .venv/bin/python bench/flush_bench.py [--rounds 9] [--shapes 1x4,64x4,300x1]

A flush of deltas, the most common (each stream of it moved by a few events, no lifecycle
event), committed on a fresh PostgreSQL database by the statement the store runs
(`adapters/store/postgres.py`, `commit_one`) and by the baseline, the statement as it was
before it was cut to the flush's kinds of streams and its text columns were joined: all
three CTEs, the events' columns as `text[]` parameters (made here from the same source, so
the two differ in nothing else). Both advance the same streams, alternating, so that every
guard holds and every event is written. The figure is this process's CPU
(`time.process_time`) per flush, the parameters' making included, over `--flushes` flushes
a batch; medians of the rounds, per shape (streams x events each).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from adapters.store import open_store
from adapters.store.listener import CHANNEL, doorbell_payload
from adapters.store.migrate import upgrade_async
from adapters.store.postgres import PostgresEventStore, _columns, commit_one
from adapters.store.rows import Append, encode_append, merge
from bench.databases import PG, _dsn, drop_postgres, fresh_postgres
from bench.store_bench import Plan, plan_stream, stream_id

# The statement before: every CTE, and the events' text columns as arrays.
BEFORE = re.sub(
    r"string_to_array\((\$\d+)::text, chr\(31\)(, chr\(30\))?\)",
    r"\1::text[]",
    commit_one((True, True, True)),
)


def now_params(store: PostgresEventStore, batches: Sequence[Append]) -> tuple[object, ...]:
    """What the store binds (`PostgresEventStore.flush_statement`)."""
    one = store.flush_statement(batches, time.time())
    assert one is not None
    return one


def before_params(store: PostgresEventStore, batches: Sequence[Append]) -> tuple[object, ...]:
    rows = [(b.stream_id, *row) for b in batches for row in b.rows]
    claims = store._claim_parameters(batches, time.time())
    params: list[object] = [p for claim in claims for p in claim]
    params += (*_columns(rows, 6), CHANNEL)
    params.append(doorbell_payload(store.origin, [b.stream_id for b in batches]))
    return (BEFORE, *params)


async def run(args: argparse.Namespace) -> None:
    url, name = await fresh_postgres(args.database_url)
    try:
        await upgrade_async(url)
        store = await open_store(url, lease_owner="bench")
        assert isinstance(store, PostgresEventStore)
        conn = await asyncpg.connect(_dsn(url))
        print(f"# flushes of deltas, {args.flushes} a batch, {args.rounds} rounds, client CPU")
        print("| streams x events | before: µs a flush | now | now / before | µs an event |")
        print("|---|---|---|---|---|")
        for shape in args.shapes.split(","):
            streams, per = (int(x) for x in shape.split("x"))
            need = 2 * args.rounds * args.flushes * per + 1
            plans: list[tuple[str, Plan]] = []
            for _ in range(streams):
                rid = stream_id()
                plans.append((rid, plan_stream(rid, need)))
                await store.append(rid, *plans[-1][1][0])  # created + in_progress
            cursor = 1
            cpu: dict[str, list[float]] = {"before": [], "now": []}
            for _ in range(args.rounds):
                for label, make in (("before", before_params), ("now", now_params)):
                    took = 0.0
                    for _ in range(args.flushes):
                        step = slice(cursor, cursor + per)
                        batches = [
                            merge([encode_append(rid, *a) for a in plan[step]])
                            for rid, plan in plans
                        ]
                        cursor += per
                        start = time.process_time()
                        won = await conn.fetch(*make(store, batches))
                        took += time.process_time() - start
                        assert len(won) == streams, "a guard missed"
                    cpu[label].append(took / args.flushes * 1e6)
            before, now = (statistics.median(cpu[k]) for k in ("before", "now"))
            events = streams * per
            print(
                f"| {streams} x {per} | {before:,.0f} | {now:,.0f} | {now / before:.2f} |"
                f" {before / events:.1f} → {now / events:.1f} |"
            )
        await conn.close()
        await store.close()
    finally:
        await drop_postgres(args.database_url, name)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--database-url", default=PG)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--flushes", type=int, default=100, help="a batch, timed together")
    p.add_argument("--shapes", default="1x4,64x4,300x1", help="streams x events a stream")
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
