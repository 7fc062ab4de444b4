"""What the log's partitions by day cost its hot statements (prints figures; not a test).
See docs/performance.md, "The log partitioned by day".

    .venv/bin/python bench/partition_bench.py [--days 90] [--streams 3000] [--rounds 5]

Two fresh PostgreSQL databases hold the same log: one at migration 0007, `events` one
table (the baseline), and one at head, `events` partitioned by day (migration 0008) with a
partition for each of the last `--days` days, the streams' ids spread over those days.
Alternating, `--rounds` times, each is timed on one connection, as the store runs them,
on the one table, on the partitioned `events` (the reads pruned to the stream's partition
by `resplog_period`), and naming the stream's partition (as the store reads now):

  page     a tail's page (`PAGE_SQL`: the next rows of one stream after a position), for
           random streams (of any day; of the last hour, a tenth of them) and positions
  catchup  the shared catch-up read of 50 random streams of the last hour, the live ones
           a remote tail follows (`_FETCH_MANY`): one statement, or one a partition when
           they name it
  insert   300 new streams' first rows in one `INSERT ... SELECT FROM unnest` (as a flush
           inserts them), into today's partition at head
  drop     (head only) `gc`'s whole-day drop of the oldest day (`partitions.drop`)

The figure is the wall time per statement (the round trip included) and PostgreSQL's choice
of plan for the prepared statement (`pg_prepared_statements`: generic or custom plans),
medians of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
import sqlalchemy as sa

from adapters.store import partitions
from adapters.store.factory import open_store
from adapters.store.migrate import upgrade_async
from adapters.store.partitions import Layout
from adapters.store.postgres import _FETCH_MANY, _fetch_on, _page_on
from adapters.store.sql import PAGE_SQL
from bench.databases import PG, _dsn, drop_postgres, fresh_postgres
from service.ids import new_id

# The statements as they were before the partitions: without the predicate.
PAGE_BEFORE = PAGE_SQL.format("$1", "$2", "$3", "$4", stream="")
FETCH_BEFORE = "\n".join(line for line in _FETCH_MANY.splitlines() if "resplog_period" not in line)
INSERT = """
INSERT INTO events (stream_id, position, type, data, facts, recorded_at)
SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::float8[])
"""
DATA = '{"type":"response.output_text.delta","sequence_number":%d,"delta":"tok %d "}'


class Log:
    def __init__(self, name: str, url: str, ids: list[str], events: int, days: list[int]) -> None:
        self.name, self.url, self.ids, self.events, self.days = name, url, ids, events, days
        self.live = ids[: len(ids) // 10]  # begun in the last hour


async def make(admin: str, partitioned: bool, days: int, streams: int, events: int) -> Log:
    url, name = await fresh_postgres(admin)
    await upgrade_async(url, "head" if partitioned else "0007")
    now = time.time()
    made: list[int] = []
    if partitioned:
        store = await open_store(url)
        try:
            async with store.engine.connect() as conn:
                since = partitions.day_of(now) - days + 1
                await partitions.ensure(conn, now, since=since)
                made = await partitions.days(conn)
        finally:
            await store.close()
    rng = random.Random(7)
    # A tenth began in the last hour (the live streams a tail follows), the rest over the days.
    ids = [new_id("resp", now - 3600 * rng.random()) for _ in range(streams // 10)]
    ids += [new_id("resp", now - days * 86400 * rng.random()) for _ in range(streams - len(ids))]
    rows = [
        (sid, p, "response.output_text.delta", DATA % (p, p), None, now)
        for sid in ids
        for p in range(events)
    ]
    conn = await asyncpg.connect(_dsn(url))
    try:
        await conn.copy_records_to_table(
            "events",
            records=rows,
            columns=["stream_id", "position", "type", "data", "facts", "recorded_at"],
        )
        await conn.execute("VACUUM ANALYZE events")
    finally:
        await conn.close()
    return Log(name, url, ids, events, made)


async def _plans(conn: asyncpg.Connection) -> str:
    rows = await conn.fetch(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement NOT LIKE '%pg_prepared_statements%' ORDER BY prepare_time"
    )
    return "; ".join(f"{r[0]} generic / {r[1]} custom" for r in rows)


async def reads(log: Log, way: str, n: int) -> tuple[float, float, float, str]:
    """µs a page read of a stream of any day and of one of the last hour, µs a catch-up
    read of 50 streams of the last hour, and the plans chosen, the `way`
    the statements name their table: "table" (one table), "events" (the partitioned
    table), "partition" (the partition by name, as the store reads)."""
    rng = random.Random()
    conn = await asyncpg.connect(_dsn(log.url))
    layout = Layout(first=1, days=frozenset(log.days))
    try:
        pages: list[float] = []
        for ids in (log.ids, log.live):
            started = time.perf_counter()
            for _ in range(n):
                sid = rng.choice(ids)
                page = {"table": PAGE_BEFORE, "events": _page_on(None)}.get(way)
                page = page or _page_on(layout.table_of(sid))
                await conn.fetch(page, sid, rng.randrange(log.events), 20, 1 << 20)
            pages.append((time.perf_counter() - started) / n * 1e6)
        started = time.perf_counter()
        for _ in range(n // 10):
            by: dict[str | None, list[str]] = {}
            for sid in rng.sample(log.live, 50):
                by.setdefault(layout.table_of(sid) if way == "partition" else way, []).append(sid)
            for table, chosen in by.items():
                fetch = {"table": FETCH_BEFORE, "events": _fetch_on(None)}.get(str(table))
                afters = [rng.randrange(log.events) for _ in chosen]
                await conn.fetch(fetch or _fetch_on(table), chosen, afters, 20)
        many = (time.perf_counter() - started) / (n // 10) * 1e6
        return pages[0], pages[1], many, await _plans(conn)
    finally:
        await conn.close()


async def inserts(log: Log, n: int, table: str = "events") -> float:
    """µs to insert 300 new streams' first two rows in one statement into `table`."""
    conn = await asyncpg.connect(_dsn(log.url))
    try:
        took = []
        for _ in range(n):
            sids = [new_id("resp", time.time()) for _ in range(300)]
            columns: list[list[object]] = [[], [], [], [], [], []]
            for sid in sids:
                for p in range(2):
                    for i, v in enumerate((sid, p, "t", DATA % (p, p), None, time.time())):
                        columns[i].append(v)
            started = time.perf_counter()
            await conn.execute(INSERT.replace("INTO events", f"INTO {table}"), *columns)
            took.append(time.perf_counter() - started)
        return statistics.median(took) * 1e6
    finally:
        await conn.close()


async def drop_oldest(log: Log) -> tuple[float, int]:
    """Seconds to drop the oldest day (its responses: none here), and its events."""
    store = await open_store(log.url)
    try:
        async with store.engine.connect() as conn:
            oldest = (await partitions.days(conn))[0]
            count = await conn.scalar(sa.text(f"SELECT count(*) FROM events_p{oldest}"))
            await conn.commit()
            started = time.perf_counter()
            dropped = await partitions.drop(conn, oldest)
            took = time.perf_counter() - started
        assert dropped is not None
        return took, int(count or 0)
    finally:
        await store.close()


async def run(args: argparse.Namespace) -> None:
    logs: list[Log] = []
    try:
        one = await make(args.database_url, False, args.days, args.streams, args.events)
        logs.append(one)
        parts = await make(args.database_url, True, args.days, args.streams, args.events)
        logs.append(parts)
        print(
            f"# {args.streams:,} streams x {args.events} events in each; "
            f"{args.days} days of partitions in {parts.name}",
            flush=True,
        )
        figures: dict[str, dict[str, list[float]]] = {}
        plans: dict[str, str] = {}
        ways = [(one, "table"), (parts, "events"), (parts, "partition")]
        for r in range(args.rounds):
            for log, way in ways if r % 2 == 0 else ways[::-1]:
                page, live, many, plans[way] = await reads(log, way, args.reads)
                values = [
                    ("page read, any day µs", page),
                    ("page read, last hour µs", live),
                    ("catch-up read of 50 live µs", many),
                ]
                if way != "partition":
                    values.append(("insert of 300 new streams µs", await inserts(log, 20)))
                else:
                    today = f"events_p{partitions.day_of(time.time())}"
                    values.append(("insert of 300 new streams µs", await inserts(log, 20, today)))
                for key, value in values:
                    figures.setdefault(key, {}).setdefault(way, []).append(value)
            print(f"  round {r + 1} done", flush=True)
        print(f"\n{'median of the rounds':32} {'one table':>10} {'events':>8} {'by name':>8}")
        for key, by in figures.items():
            base = statistics.median(by["table"])
            cells = [f"{base:10.1f}"]
            for way in ("events", "partition"):
                if way in by:
                    value = statistics.median(by[way])
                    cells.append(f"{value:8.1f} ({value / base:.2f}x)")
            print(f"{key:32} {' '.join(cells)}")
        for way, plan in plans.items():
            print(f"plans, {way}: {plan[:300]}")
        took, count = await drop_oldest(parts)
        print(f"drop of the oldest day ({count:,} events): {took * 1000:.1f} ms")
    finally:
        for log in logs:
            await drop_postgres(args.database_url, log.name)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--database-url", default=PG)
    p.add_argument("--days", type=int, default=90, help="days of partitions (the retention)")
    p.add_argument("--streams", type=int, default=3000)
    p.add_argument("--events", type=int, default=40, help="events a stream")
    p.add_argument("--reads", type=int, default=3000, help="page reads a round")
    p.add_argument("--rounds", type=int, default=5)
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
