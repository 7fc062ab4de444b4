"""What a new stream's first rows cost the indexes of a log larger than `shared_buffers`, with
random stream ids (as before) and with ids that begin with their second (service/ids.py).

On a fresh PostgreSQL database with the real schema (the Alembic migrations), the bench
loads `--streams` finished streams of `--events` events each, with random ids (a log made
before the change). Then, in alternating rounds, it starts `--new` streams of each kind: for
each, its `responses` row and its first two events, `--per-flush` streams to a transaction
as a group commit carries them, created at `--rate` streams a second of simulated time. Each
round begins with a `CHECKPOINT`, as every stretch between two checkpoints does, and
counts, per new stream:

- **WAL bytes** (`pg_current_wal_lsn()` before and after): what the primary writes and the
  synchronous standby must receive; the first change of a page after a checkpoint writes the
  whole page (8 KiB) to the WAL.
- **index blocks read** into `shared_buffers` and **hit** there, of `events` and
  `responses` (`pg_statio_user_indexes`): a read is a page that was not in PostgreSQL's
  cache (from the OS's, or the disk once the log outgrows memory).
- **ms per transaction**, the time of each flush's statements.

The baseline is the random ids, in the same run.

    .venv/bin/python bench/id_order_bench.py --streams 200000 --events 20 --new 5000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from adapters.store.migrate import upgrade_async
from bench.databases import PG, _dsn, drop_postgres, fresh_postgres
from service.ids import new_id

_RESPONSE_COLUMNS = (
    *("id", "owner", "status", "model", "background", "store", "created_at", "updated_at"),
    *("version", "snapshot_version", "snapshot"),
)
_EVENT_COLUMNS = ("stream_id", "position", "type", "data", "recorded_at")
_DATA = '{"type":"response.output_text.delta","delta":"' + "x" * 120 + '"}'
_SNAPSHOT = '{"object":"response","status":"completed","output":[]}'


def random_id() -> str:
    """An id as the server made them before: 48 random hex digits."""
    return f"resp_{secrets.token_hex(24)}"


def response_row(rid: str, at: float, version: int, status: str) -> tuple[Any, ...]:
    owner = f"tenant{hash(rid) % 100:03d}"
    return (rid, owner, status, "m", False, True, at, at, version, version, _SNAPSHOT)


async def load(conn: asyncpg.Connection, streams: int, events: int) -> float:
    """`streams` finished streams of random ids, oldest first over the last 30 days."""
    started = time.perf_counter()
    now = time.time()
    for first in range(0, streams, 10_000):
        responses, rows = [], []
        for i in range(first, min(streams, first + 10_000)):
            rid, at = random_id(), now - 30 * 86400 * (1 - i / streams)
            responses.append(response_row(rid, at, events - 1, "completed"))
            rows += [(rid, p, "response.output_text.delta", _DATA, at) for p in range(events)]
        await conn.copy_records_to_table("responses", records=responses, columns=_RESPONSE_COLUMNS)
        await conn.copy_records_to_table("events", records=rows, columns=_EVENT_COLUMNS)
    await conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


async def counters(conn: asyncpg.Connection) -> tuple[int, int, int]:
    """(WAL position, index blocks read, index blocks hit) of the two tables so far."""
    lsn = await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
    read, hit = await conn.fetchrow(
        "SELECT sum(idx_blks_read)::bigint, sum(idx_blks_hit)::bigint "
        "FROM pg_statio_user_indexes WHERE relname IN ('events', 'responses')"
    )
    return int(lsn), int(read), int(hit)


async def stat_settled(conn: asyncpg.Connection) -> None:
    """Have this connection's counters of its last transactions published: a backend
    reports them at the end of a transaction at least a second after its last report."""
    await asyncio.sleep(1.1)
    await conn.execute("SELECT 1")


async def round_of(
    conn: asyncpg.Connection, make: Any, new: int, per_flush: int, rate: float
) -> dict[str, float]:
    await conn.execute("CHECKPOINT")
    await stat_settled(conn)
    lsn0, read0, hit0 = await counters(conn)
    start = time.time()
    flushes: list[float] = []
    for first in range(0, new, per_flush):
        batch = [make(start + i / rate) for i in range(first, min(new, first + per_flush))]
        t0 = time.perf_counter()
        async with conn.transaction():
            await conn.executemany(
                "INSERT INTO responses (id, owner, status, model, background, store, "
                "created_at, updated_at, version, snapshot_version, snapshot) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                [response_row(rid, start, 1, "in_progress") for rid in batch],
            )
            await conn.executemany(
                "INSERT INTO events (stream_id, position, type, data, recorded_at) "
                "VALUES ($1, $2, $3, $4, $5)",
                [(rid, p, "response.created", _DATA, start) for rid in batch for p in (0, 1)],
            )
        flushes.append((time.perf_counter() - t0) * 1e3)
    await stat_settled(conn)
    lsn1, read1, hit1 = await counters(conn)
    return {
        "wal": (lsn1 - lsn0) / new,
        "read": (read1 - read0) / new,
        "hit": (hit1 - hit0) / new,
        "flush_ms": statistics.median(flushes),
    }


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--streams", type=int, default=200_000, help="loaded streams (random ids)")
    p.add_argument("--events", type=int, default=20, help="events of each loaded stream")
    p.add_argument("--new", type=int, default=5_000, help="new streams a round, of each kind")
    p.add_argument("--per-flush", type=int, default=50, help="new streams a transaction")
    p.add_argument("--rate", type=float, default=100.0, help="new streams a second")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--database-url", default=PG)
    args = p.parse_args()

    url, name = await fresh_postgres(args.database_url)
    try:
        await upgrade_async(url)
        conn = await asyncpg.connect(_dsn(url))
        try:
            seconds = await load(conn, args.streams, args.events)
            size, buffers = await conn.fetchrow(
                "SELECT pg_size_pretty(pg_relation_size('pk_events')), "
                "current_setting('shared_buffers')"
            )
            print(
                f"loaded {args.streams:,} streams x {args.events} events in {seconds:.0f} s; "
                f"events' primary key {size}, shared_buffers {buffers}"
            )
            kinds = {"random ids (before)": lambda _at: random_id(), "ids by time": _by_time}
            figures: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
            order = list(kinds)
            for r in range(args.rounds):
                for kind in order if r % 2 == 0 else order[::-1]:
                    figures[kind].append(
                        await round_of(conn, kinds[kind], args.new, args.per_flush, args.rate)
                    )
        finally:
            await conn.close()
    finally:
        await drop_postgres(args.database_url, name)

    base = {k: statistics.median(f[k] for f in figures[order[0]]) for k in figures[order[0]][0]}
    print(
        f"\n{args.new:,} new streams a round ({args.per_flush} a transaction), "
        f"medians of {args.rounds} rounds, each after a CHECKPOINT:"
    )
    print("| ids | WAL bytes a new stream | index blocks read | index blocks hit | ms a flush |")
    print("|---|---|---|---|---|")
    for kind in order:
        m = {k: statistics.median(f[k] for f in figures[kind]) for k in base}
        ratio = "" if kind == order[0] else f" ({m['wal'] / base['wal']:.2f}x)"
        print(
            f"| {kind} | {m['wal']:,.0f}{ratio} | {m['read']:.2f} | {m['hit']:.1f} "
            f"| {m['flush_ms']:.2f} |"
        )


def _by_time(at: float) -> str:
    return new_id("resp", at)


if __name__ == "__main__":
    asyncio.run(main())
