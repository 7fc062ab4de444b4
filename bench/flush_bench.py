"""The flush statement's CPU in the writing process (prints figures; not a test). See
docs/performance.md, "The flush's parameters".

    .venv/bin/python bench/flush_bench.py [--rounds 9] [--shapes 1x4,64x4,300x1]

A flush of deltas, the most common (each stream of it moved by a few events, no lifecycle
event), committed on a fresh PostgreSQL database by the statement the store runs
(`adapters/store/postgres.py`, `commit_one`) and by the baseline, the statement as it was
before its claim took its rows as JSON and the events' positions went as text: those as
array parameters (`BEFORE`, made here from the same source, so the two differ
in nothing else). Earlier figures in docs/performance.md had another baseline: every CTE,
every column an array. Both advance the same streams, alternating, so that every
guard holds and every event is written. The figure is this process's CPU
(`time.process_time`) per flush, the parameters' making included, over `--flushes` flushes
a batch; medians of the rounds, per shape (streams x events each). Where the database runs
on this machine, the CPU its backend process spent on the same flushes is printed beside
it (`/proc/PID/schedstat`), so that work moved from the client into the statement shows.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from adapters.store.factory import open_store
from adapters.store.listener import CHANNEL, doorbell_payload
from adapters.store.migrate import upgrade_async
from adapters.store.postgres import PostgresEventStore, _columns, _joined
from adapters.store.rows import Append, encode_append, merge
from bench.databases import PG, _dsn, drop_postgres, fresh_postgres
from bench.store_bench import Plan, plan_stream, stream_id

# The statement before (a flush of deltas): the claim's columns, and the events' positions,
# as arrays.
BEFORE = """
WITH moved AS (
UPDATE responses AS r
SET version = u.version, updated_at = $4,
    lease_expires_at = CASE WHEN r.lease_owner IS NOT NULL
        THEN extract(epoch FROM clock_timestamp())::float8 + $6::float8 END
FROM unnest($1::text[], $2::int[], $3::int[]) AS u(id, expected, version)
WHERE r.id = u.id AND r.version = u.expected
  AND (r.lease_owner IS NULL OR r.lease_owner = $5::text)
RETURNING r.id
),
won AS (SELECT id FROM moved),
inserted AS (
    INSERT INTO events (stream_id, position, type, data, facts, recorded_at)
    SELECT * FROM unnest(string_to_array($7::text, chr(31)), $8::int[],
                         string_to_array($9::text, chr(31)),
                         string_to_array($10::text, chr(31)),
                         string_to_array($11::text, chr(31), chr(30)), $12::float8[])
         AS e(stream_id, position, type, data, facts, at)
    WHERE e.stream_id IN (SELECT id FROM won)
)
SELECT id, pg_notify($13::text, $14::text) FROM won
"""


def now_params(store: PostgresEventStore, batches: Sequence[Append]) -> tuple[object, ...]:
    """What the store binds (`PostgresEventStore.flush_statement`)."""
    one = store.flush_statement(batches, time.time())
    assert one is not None
    return one


def before_params(store: PostgresEventStore, batches: Sequence[Append]) -> tuple[object, ...]:
    rows = [(b.stream_id, *row) for b in batches for row in b.rows]
    sids, positions, types, data, facts, at = _columns(rows, 6)
    me, ttl = store.settings.lease_owner, store.settings.lease_ttl
    params: list[object] = [[b.stream_id for b in batches], [b.expected_version for b in batches]]
    params += ([b.last for b in batches], time.time(), me, ttl)
    params += (_joined(sids), positions, _joined(types), _joined(data))
    params += (_joined(facts, nulls=True), at, CHANNEL)
    params.append(doorbell_payload(store.origin, [b.stream_id for b in batches]))
    return (BEFORE, *params)


async def run(args: argparse.Namespace) -> None:
    url, name = await fresh_postgres(args.database_url)
    try:
        await upgrade_async(url)
        store = await open_store(url, lease_owner="bench")
        assert isinstance(store, PostgresEventStore)
        conn = await asyncpg.connect(_dsn(url))
        backend = _schedstat(await conn.fetchval("SELECT pg_backend_pid()"))
        print(f"# flushes of deltas, {args.flushes} a batch, {args.rounds} rounds, client CPU")
        head = "| streams x events | before: µs a flush | now | now / before | µs an event |"
        rule = "|---|---|---|---|---|"
        if backend is not None:
            head += " database backend: before | now | now / before |"
            rule += "---|---|---|"
        print(head)
        print(rule)
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
            db: dict[str, list[float]] = {"before": [], "now": []}
            for _ in range(args.rounds):
                for label, make in (("before", before_params), ("now", now_params)):
                    took = 0.0
                    began = 0 if backend is None else _on_cpu(backend)
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
                    if backend is not None:
                        db[label].append((_on_cpu(backend) - began) / args.flushes / 1e3)
            before, now = (statistics.median(cpu[k]) for k in ("before", "now"))
            events = streams * per
            line = (
                f"| {streams} x {per} | {before:,.0f} | {now:,.0f} | {now / before:.2f} |"
                f" {before / events:.1f} → {now / events:.1f} |"
            )
            if backend is not None:
                b, n = (statistics.median(db[k]) for k in ("before", "now"))
                line += f" {b:,.0f} | {n:,.0f} | {n / b:.2f} |"
            print(line)
        await conn.close()
        await store.close()
    finally:
        await drop_postgres(args.database_url, name)


def _schedstat(pid: int) -> Path | None:
    """The backend's schedstat, where the database runs on this machine."""
    path = Path(f"/proc/{pid}/schedstat")
    return path if path.exists() else None


def _on_cpu(schedstat: Path) -> int:
    """A process's time on a CPU so far, in ns (the first field of its schedstat)."""
    return int(schedstat.read_text().split()[0])


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--database-url", default=PG)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--flushes", type=int, default=100, help="a batch, timed together")
    p.add_argument("--shapes", default="1x4,64x4,300x1", help="streams x events a stream")
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
