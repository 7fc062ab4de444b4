"""What autovacuum does to a log under a sustained load: the same load on a private
PostgreSQL with autovacuum on (PostgreSQL's default, with the per-table settings of
migrations 0006, 0008 and 0010) and with it off, one after the other (prints figures; not a
test). See docs/performance.md, "Autovacuum under a sustained load".

    .venv/bin/python bench/vacuum_bench.py --size 1e6 --rounds 12 --seconds 30

`--autovacuum` names the settings, in order: `on`, `off`, or `on:` followed by storage
parameters that every partition of `events` gets once loaded (`name=value;name=value`).
The vacuum of the partitions after their inserts, as it was before migration 0010, beside
the schema as it is:

    .venv/bin/python bench/vacuum_bench.py --size 1e6 --rounds 10 --seconds 30 --autovacuum \
        'on,on:autovacuum_vacuum_insert_threshold=1000;autovacuum_vacuum_insert_scale_factor=0.02'

For each setting: a private cluster (never the shared server, whose CI configuration runs
with autovacuum off), started with fsync on and the shared server's memory settings, and
`log_autovacuum_min_duration = 0` so that its log holds every automatic vacuum and analyze
with its time and CPU; a log bulk-loaded to `--size` events (growth_bench's loader: the
server's own shapes and mix); then `--rounds` rounds of growth_bench's paced phase back to
back (`--streams` streams x `--rate` events/s offered through the group-commit writer).

Printed per round (with the time it ended, to read beside the cluster's log, which
`--keep-log` keeps): steady events/s and append -> visible p99 (growth_bench's figures), the
hot row's (`responses`) HOT share of updates, its dead tuples and heap, and the events' size
with their indexes. At the end, per setting: the medians and the worst round, and from the
cluster's log every automatic vacuum and analyze by table (each day's partition of
`events` counts as `events`), with the seconds they took and their CPU; per million events
appended, so that a longer life is a multiple of it. Always the WAL the rounds wrote, per
million events; with `--wal`, that WAL by record type too (`pg_waldump --stats=record`,
the cluster keeping every segment of the rounds meanwhile): which of the log's rows, the
hot row's updates, the indexes and the full-page images after each checkpoint it is.

    .venv/bin/python bench/vacuum_bench.py --size 1e6 --rounds 6 --seconds 30 --autovacuum on --wal
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.databases import _dsn, drop_postgres
from bench.growth_bench import phase, prepare
from tests.e2e.cluster import PG_BIN, PrivatePostgres

# The shared server's memory and WAL settings (this box's CI configuration), so that only
# autovacuum differs from what the other benches measure.
SETTINGS = (
    " -c fsync=on -c shared_buffers=128MB -c max_wal_size=1GB -c max_connections=200"
    " -c log_autovacuum_min_duration=0 -c autovacuum={autovacuum}"
)

# One line of the log per automatic run, then its figures (PostgreSQL 15's wording).
_RUN = re.compile(r'automatic (vacuum|analyze) of table "[^".]+\.[^".]+\.([^"]+)"')
_USAGE = re.compile(r"CPU: user: ([\d.]+) s, system: ([\d.]+) s, elapsed: ([\d.]+) s")
# A row of `pg_waldump --stats=record`: type, then count, record bytes, full-page-image bytes
# and their sum, each but the type followed by its share in parentheses.
_WAL_ROW = re.compile(r"^(\S+)\s+(\d+) \(\s*[\d.]+\)\s+(\d+) \(\s*[\d.]+\)\s+(\d+) \(\s*[\d.]+\)")


async def snapshot(url: str, *, counted: bool = False) -> dict[str, float]:
    """The hot row's counters and size, and the events' total size (partitions included);
    `counted`: the events too (a scan of the log, so only before and after the rounds)."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        row = await conn.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup, pg_relation_size(relid) AS heap,"
            " autovacuum_count FROM pg_stat_user_tables WHERE relname = 'responses'"
        )
        events = await conn.fetchval(
            "SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('events')"
        )
        count = await conn.fetchval("SELECT count(*) FROM events") if counted else 0
        shown = [await conn.fetchval(f"SHOW {name}") for name in ("autovacuum", "fsync")]
    finally:
        await conn.close()
    if shown[1] != "on":
        raise RuntimeError(f"the private cluster runs with fsync {shown[1]}")
    return {k: float(v) for k, v in dict(row).items()} | {
        "events MB": float(events) / 2**20,
        "events": float(count),
        "autovacuum": float(shown[0] == "on"),
    }


def autovacuum_runs(log_text: str) -> dict[tuple[str, str], list[float]]:
    """(kind, table) -> [runs, user s, system s, elapsed s], from the cluster's log."""
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        found = _RUN.search(line)
        if found is None:
            continue
        kind, table = found.groups()
        if table.startswith("events"):  # each day's partition, the legacy and default ones
            table = "events"
        elif table.startswith(("pg_", "sql_")):  # the catalogs and every TOAST table
            table = "(catalogs, TOAST)"
        usage = None
        for detail in lines[i + 1 :]:  # the run's own lines, each indented by a tab
            if not detail.startswith("\t"):
                break
            usage = _USAGE.search(detail) or usage
        figures = out[(kind, table)]
        figures[0] += 1
        if usage is not None:
            for j, value in enumerate(usage.groups(), start=1):
                figures[j] += float(value)
    return dict(out)


async def wal_position(url: str) -> str:
    conn = await asyncpg.connect(_dsn(url))
    try:
        return str(await conn.fetchval("SELECT pg_current_wal_lsn()::text"))
    finally:
        await conn.close()


def wal_between(start: str, end: str) -> float:
    """The bytes of WAL between two positions (`pg_lsn` text: two hexadecimal halves)."""

    def at(lsn: str) -> int:
        high, low = lsn.split("/")
        return (int(high, 16) << 32) + int(low, 16)

    return float(at(end) - at(start))


def wal_records(cluster: PrivatePostgres, start: str, end: str) -> dict[str, tuple[int, int, int]]:
    """record type -> (records, record bytes, full-page-image bytes) of the WAL from `start` to
    `end`, which the cluster kept (`wal_keep_size`)."""
    command = [str(PG_BIN / "pg_waldump"), "--stats=record", "-p", str(cluster.data / "pg_wal")]
    done = subprocess.run(
        [*command, "-s", start, "-e", end], capture_output=True, text=True, check=True, timeout=600
    )
    out: dict[str, tuple[int, int, int]] = {}
    for line in done.stdout.splitlines():
        found = _WAL_ROW.match(line)
        if found is not None:
            name, count, record, image = found.groups()
            out[name] = (int(count), int(record), int(image))
    return out


def print_wal(records: dict[str, tuple[int, int, int]], appended: float) -> None:
    total = sum(record + image for _, record, image in records.values())
    per_m = total / max(appended, 1e-9) / 2**20
    print(f"\nWAL by record type: {total / 2**20:,.0f} MB, {per_m:,.1f} MB a M events")
    print(
        "| record type | records | bytes each (record) | full-page images MB"
        " | MB a M events | share |"
    )
    print("|---|---|---|---|---|---|")
    for name, (count, record, image) in sorted(records.items(), key=lambda kv: -sum(kv[1][1:])):
        if record + image < total / 200:  # under half a percent
            continue
        print(
            f"| {name} | {count:,} | {record / max(count, 1):,.0f} | {image / 2**20:,.1f} |"
            f" {(record + image) / max(appended, 1e-9) / 2**20:,.1f} |"
            f" {100 * (record + image) / max(total, 1):.1f} % |"
        )


def keep(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def set_events_options(url: str, options: str) -> None:
    """`options` (`name=value;...`) on every partition of `events`, as `ALTER TABLE ... SET`;
    `statistics=N` instead sets every column's statistics target (how many rows, 300 x N,
    and so pages, an `ANALYZE` samples)."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        parts = await conn.fetch("SELECT relid::text FROM pg_partition_tree('events') WHERE isleaf")
        named = dict(o.split("=", 1) for o in options.split(";"))
        target = named.pop("statistics", None)
        columns = await conn.fetch(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'events'::regclass"
            " AND attnum > 0 AND NOT attisdropped"
        )
        for part in parts:
            if named:
                settings = ", ".join(f"{k}={v}" for k, v in named.items())
                await conn.execute(f"ALTER TABLE {part[0]} SET ({settings})")
            for column in columns if target is not None else ():
                await conn.execute(
                    f"ALTER TABLE {part[0]} ALTER COLUMN {column[0]} SET STATISTICS {int(target)}"
                )
    finally:
        await conn.close()


async def one_setting(setting: str, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    autovacuum, _, options = setting.partition(":")
    cluster = PrivatePostgres()
    cluster.options = SETTINGS.format(autovacuum=autovacuum)
    if args.wal:  # every segment the rounds write, for pg_waldump afterwards
        cluster.options += " -c wal_keep_size=32GB"
    cluster.start()
    try:
        args.database_url = cluster.url()
        log = await prepare(args.size, args, tmp)
        try:
            if options:
                await set_events_options(log.url, options)
            first = await snapshot(log.url, counted=True)
            log_at = len((cluster.root / "server.log").read_text(errors="replace"))
            wal_at = await wal_position(log.url)
            rounds: list[dict[str, float]] = []
            shown = "on" if first["autovacuum"] else "off"
            print(f"\n## autovacuum {shown} {options}: {first['events']:,.0f} events loaded")
            print(
                "| round (its end, UTC) | steady events/s | append->visible p99 ms | HOT % |"
                " dead tuples | `responses` heap MB | events MB | `responses` autovacuums |"
            )
            print("|---|---|---|---|---|---|---|---|")
            for r in range(args.rounds):
                figures = await phase("paced", log, args)
                now = await snapshot(log.url)
                figures |= {k: now[k] for k in ("heap", "n_dead_tup", "events MB")}
                rounds.append(figures)
                ended = time.strftime("%H:%M:%S", time.gmtime())
                print(
                    f"| {r + 1} ({ended}) | {figures['paced: events/s (steady)']:,.0f} |"
                    f" {figures['paced: append->visible p99 ms']:.1f} |"
                    f" {figures['hot row: HOT share of updates %']:.1f} |"
                    f" {now['n_dead_tup']:,.0f} | {now['heap'] / 2**20:.1f} |"
                    f" {now['events MB']:,.0f} | {now['autovacuum_count']:.0f} |",
                    flush=True,
                )
            last = await snapshot(log.url, counted=True)
            wal_end = await wal_position(log.url)
            last["wal"] = wal_between(wal_at, wal_end)
            records = wal_records(cluster, wal_at, wal_end) if args.wal else {}
            text = (cluster.root / "server.log").read_text(errors="replace")[log_at:]
            if args.keep_log:
                name = re.sub(r"[^\w.=-]+", "_", setting)
                keep(Path(args.keep_log) / f"autovacuum-{name}.log", text)
        finally:
            await drop_postgres(args.database_url, log.name)
    finally:
        cluster.destroy()
    appended = (last["events"] - first["events"]) / 1e6
    if records:
        print_wal(records, appended)
    return summary(setting, rounds, first, last, appended, autovacuum_runs(text))


def summary(
    autovacuum: str,
    rounds: Sequence[dict[str, float]],
    first: dict[str, float],
    last: dict[str, float],
    appended: float,
    runs: dict[tuple[str, str], list[float]],
) -> dict[str, float]:
    rates = [r["paced: events/s (steady)"] for r in rounds]
    p99s = [r["paced: append->visible p99 ms"] for r in rounds]
    hot = [r["hot row: HOT share of updates %"] for r in rounds]
    print(f"\nautovacuum {autovacuum}: {appended:.2f} M events appended over the rounds")
    print("| automatic run | table | runs | CPU s (user + system) | elapsed s | CPU s a M events |")
    print("|---|---|---|---|---|---|")
    cpu_total = 0.0
    for (kind, table), (count, user, system, elapsed) in sorted(runs.items()):
        cpu_total += user + system
        print(
            f"| {kind} | {table} | {count:.0f} | {user + system:.2f} | {elapsed:.1f} |"
            f" {(user + system) / max(appended, 1e-9):.2f} |"
        )
    return {
        "steady events/s, median": statistics.median(rates),
        "append->visible p99 ms, median": statistics.median(p99s),
        "append->visible p99 ms, worst round": max(p99s),
        "HOT share %, median": statistics.median(hot),
        "`responses` dead tuples at the end": last["n_dead_tup"],
        "`responses` heap growth MB": (last["heap"] - first["heap"]) / 2**20,
        "events MB per M appended": (last["events MB"] - first["events MB"]) / max(appended, 1e-9),
        "autovacuum CPU s per M events": cpu_total / max(appended, 1e-9),
        "WAL MB per M events": last["wal"] / 2**20 / max(appended, 1e-9),
    }


async def run(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for setting in args.autovacuum:
            results[setting] = await one_setting(setting, args, Path(tmp))
    names = list(results)
    print(f"\n| figure | {' | '.join(f'autovacuum {n}' for n in names)} |")
    print(f"|---|{'---|' * len(names)}")
    for figure in results[names[0]]:
        print(f"| {figure} | {' | '.join(f'{results[n][figure]:,.2f}' for n in names)} |")


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", type=lambda t: int(float(t)), default=1_000_000, help="loaded events")
    p.add_argument("--rounds", type=int, default=20, help="paced phases back to back")
    p.add_argument("--seconds", type=float, default=30, help="length of each")
    p.add_argument("--streams", type=int, default=300)
    p.add_argument("--rate", type=float, default=100, help="events/s per stream")
    p.add_argument(
        "--autovacuum",
        type=lambda t: t.split(","),
        default=["on", "off"],
        help="the settings, in the order they run; `on:name=value;name=value` also sets"
        " storage parameters on every partition of `events` once loaded (`statistics=N`:"
        " every column's statistics target)",
    )
    p.add_argument("--keep-log", metavar="DIR", help="keep each cluster's log of the rounds there")
    p.add_argument(
        "--wal", action="store_true", help="the rounds' WAL by record type (keeps it on disk)"
    )
    args = p.parse_args(argv)
    # What growth_bench's loader and paced phase read from its own arguments.
    args.reuse, args.revision, args.days, args.fillfactor = [], "head", 90.0, 0
    args.load_ids, args.paced_ids = "time", ["time"]
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
