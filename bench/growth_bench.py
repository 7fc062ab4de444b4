"""Growth to 100 M events: the same figures at each size of the log, beside the smallest's.

The log is bulk-loaded to each size; the figures of the smallest size, in the same run,
are the baseline.

    .venv/bin/python bench/growth_bench.py --sizes 1e6,1e7
    .venv/bin/python bench/growth_bench.py --sizes 1e6,1e7,1e8 --rounds 1
    .venv/bin/python bench/growth_bench.py --sizes 1e4,3e4 --rounds 1 --seconds 3 \
        --streams 20 --gets 20 --repeats 2 --verify-sample 20 --gc-responses 5

What is loaded is what the server writes: a real `resplog serve` (scripted engine, 8 ms per
delta, so that each delta is an event of its own as a GPU's tokens are) makes one group of
each kind below through the HTTP API; their rows (events, read model, conversations and
their items) are then cloned with `COPY`, each clone with new ids (every id the server
derives from a response id follows it), one of 100 owners, and its own time (the clones
span `--days`, oldest first, as a log grows; the JSON's `created_at`/`completed_at` move
with the rows', so `verify` finds them consistent). Kinds and weights (groups, not events):

  single        one stored response, 300 tokens                          50
  chain         3 responses continued by previous_response_id, 100 each  20
  conversation  a conversation of 4 turns, 60 tokens each                20
  long          one response of 2,000 tokens                              2
  cancelled     a background response cancelled while generating          3
  live          a background response still generating (copied mid-way)  0.5
                (each placed in the last hour: an older one would have been swept)

Each size is its own database `resplog_bench_<hex>` on `--database-url`'s server, loaded
once, VACUUM ANALYZEd (what autovacuum would have done as it grew), dropped at the end
(`--keep` keeps them; `--reuse SIZE=NAME` measures a kept one again). Then `--rounds`
rounds: every phase at every size in turn, the order of the sizes reversed every other
round, so that the neighbours' noise on a shared machine hits every size alike; figures are
the median over the rounds. Phases:

  paced    300 streams x 100 events/s through the group-commit writer (store_bench):
           steady events/s, append -> visible p99; with the `responses` row's HOT-update
           share, dead tuples and heap growth over the run (pg_stat_user_tables)
  process  the same load with the tailers in another process (another replica): p50/p99
  replay   a new stream of 50,000 deltas read back and decoded (3 times), and a loaded one
  get      `GET /v1/responses/{id}`'s use-case (service/reads.retrieve_raw, owner check
           included) on random loaded responses: finished ones (the row) and live ones (the
           fold of the log)
  list     `responses list` filters (store.list): an owner's completed, cancelled in the
           log's last week, a model's page a tenth of the way into the history
  verify   `resplog verify --json` (the real CLI) of `--verify-sample` random streams, or
           with `--verify-sample 0` `verify --all`, in events/s (the CLI's start included)
  gc       `resplog gc --older-than ...` (the real CLI), then the same again (which finds
           nothing): events deleted per second, the run's seconds, and what a run costs
           whatever it deletes (the CLI's start, the blob sweep). On a log partitioned by
           day (PostgreSQL at migration 0008, ids by time) the cut is the end of the oldest
           day, which goes whole (its partition dropped); otherwise the oldest
           `--gc-responses` responses, deleted row by row
and, as loaded and at the end, the disk: pg_total_relation_size of each table (its indexes
and TOAST included) per 1 M events.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from adapters.store import partitions
from adapters.store.factory import open_store
from adapters.store.migrate import downgrade_async, upgrade_async
from adapters.store.sql import SqlEventStore
from bench.harness import PG, drop_postgres, dsn, fresh_postgres, parser
from bench.store_bench import (
    POOL,
    background_load,
    group_phase,
    plans,
    process_phase,
    replay_phase,
)
from service.ids import made_at, new_id
from service.responses.reads import retrieve_raw
from tests.e2e.conftest import RESPLOG, start_server, stop_server

TABLES = ("events", "responses", "conversations", "conversation_items")
OWNER = "anonymous"  # what `serve --auth none` records as the owner


# --- templates: what the server really writes ---------------------------------------------


@dataclass
class Group:
    """The rows of one group of streams made through the API, ready to be cloned."""

    kind: str
    weight: float
    suffixes: list[str]  # every id suffix of the group (responses and conversations)
    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)  # table -> rows
    events: int = 0


async def _make_groups(client: httpx.AsyncClient) -> dict[str, tuple[float, list[str]]]:
    """Drive the server to make one group of each kind; kind -> (weight, stream ids)."""

    async def create(tokens: int, **extra: Any) -> dict[str, Any]:
        # A delta at least every flush interval apart is an event of its own, as a GPU's
        # tokens are (docs/scale.md); faster, the runner would merge them.
        meta = {"scripted_tokens": str(tokens), "scripted_delay_ms": "8"}
        body = {"model": "scripted", "input": "Tell me about the log.", "metadata": meta}
        r = await client.post("/v1/responses", json={**body, **extra})
        r.raise_for_status()
        return dict(r.json())

    async def chain() -> list[str]:
        ids = [(await create(100))["id"]]
        for _ in range(2):
            ids.append((await create(100, previous_response_id=ids[-1]))["id"])
        return ids

    async def conversation() -> list[str]:
        conv = (await client.post("/v1/conversations", json={})).json()["id"]
        return [*[(await create(60, conversation=conv))["id"] for _ in range(4)], conv]

    async def cancelled() -> list[str]:
        rid = (await create(5000, background=True))["id"]
        await asyncio.sleep(1.5)
        (await client.post(f"/v1/responses/{rid}/cancel")).raise_for_status()
        return [rid]

    async def live() -> list[str]:
        rid = (await create(100_000, background=True))["id"]
        await asyncio.sleep(2.0)  # some way into its answer
        return [rid]

    async def one(tokens: int) -> list[str]:
        return [(await create(tokens))["id"]]

    made = await asyncio.gather(one(300), chain(), conversation(), one(2000), cancelled(), live())
    weights = {"single": 50, "chain": 20, "conversation": 20, "long": 2, "cancelled": 3}
    weights["live"] = 0.5
    return {k: (w, ids) for (k, w), ids in zip(weights.items(), made, strict=True)}


async def _capture(conn: Any, kind: str, weight: float, ids: list[str]) -> Group:
    """The group's rows as they are now: the read-model rows first, then the events up to
    each row's version (a live stream goes on growing meanwhile)."""
    group = Group(kind, weight, [i.split("_", 1)[1] for i in ids])
    rows = await conn.fetch("SELECT * FROM responses WHERE id = ANY($1)", ids)
    convs = await conn.fetch("SELECT * FROM conversations WHERE id = ANY($1)", ids)
    versions = {r["id"]: r["version"] for r in [*rows, *convs]}
    events = await conn.fetch(
        "SELECT * FROM events WHERE stream_id = ANY($1) ORDER BY stream_id, position", ids
    )
    items = await conn.fetch(
        "SELECT * FROM conversation_items WHERE conversation_id = ANY($1) ORDER BY position, seq",
        ids,
    )
    group.rows = {
        "responses": [tuple(r) for r in rows],
        "conversations": [tuple(r) for r in convs],
        "events": [tuple(e) for e in events if e["position"] <= versions[e["stream_id"]]],
        "conversation_items": [tuple(i) for i in items],
    }
    group.events = len(group.rows["events"])
    return group


async def templates(url: str, log: Path) -> tuple[list[Group], dict[str, list[str]]]:
    """Run a real server on `url`, make the groups, copy their rows; the server stops (the
    live response with it: its copy stays live) and the originals are deleted."""
    server = start_server(url, "postgres", log)
    conn = await asyncpg.connect(dsn(url))
    try:
        try:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
                made = await _make_groups(client)
            groups = [await _capture(conn, k, w, ids) for k, (w, ids) in made.items()]
        finally:
            stop_server(server)  # before the originals go: the live one stops writing
        everything = [i for _, ids in made.values() for i in ids]
        for table, key in (("events", "stream_id"), ("responses", "id")):
            await conn.execute(f"DELETE FROM {table} WHERE {key} = ANY($1)", everything)
        await conn.execute("DELETE FROM conversation_items")
        await conn.execute("DELETE FROM conversations")
        columns = {t: await _columns(conn, t) for t in TABLES}
    finally:
        await conn.close()
    return groups, columns


async def _columns(conn: Any, table: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0"
        " AND NOT attisdropped ORDER BY attnum",
        table,
    )
    return [r["attname"] for r in rows]


# --- cloning -----------------------------------------------------------------------------------

# The unix-second integers of the JSON (created_at, completed_at) move with the clone's time,
# so that the clone's documents and its rows agree as the server's did (`verify` compares).
_TIMES = r'"(?:created_at|completed_at)":(\d+)'
_OWNER = f'"owner":"{OWNER}"'

Part = str | tuple[str, Any]  # a literal, or ("id", n) / ("t", seconds) / ("owner", None)


def compile_text(text: str, suffixes: Sequence[str]) -> list[Part]:
    """`text` split into literals and the slots a clone fills in."""
    pattern = re.compile("|".join([*map(re.escape, suffixes), _TIMES, re.escape(_OWNER)]))
    parts: list[Part] = []
    at = 0
    for m in pattern.finditer(text):
        parts.append(text[at : m.start()])
        if m.group(1) is not None:
            parts.extend(['"' + m.group(0).split('"')[1] + '":', ("t", int(m.group(1)))])
        elif m.group(0) == _OWNER:
            parts.extend(['"owner":"', ("owner", None), '"'])
        else:
            parts.append(("id", suffixes.index(m.group(0))))
        at = m.end()
    parts.append(text[at:])
    return [p for p in parts if p != ""]


@dataclass
class Clone:
    """What differs between two clones of a group."""

    suffixes: list[str]
    shift: int  # seconds added to every time
    owner: str

    def render(self, parts: list[Part]) -> str:
        out = []
        for p in parts:
            if isinstance(p, str):
                out.append(p)
            elif p[0] == "id":
                out.append(self.suffixes[p[1]])
            elif p[0] == "t":
                out.append(str(p[1] + self.shift))
            else:
                out.append(self.owner)
        return "".join(out)


Cell = Callable[[Clone], Any]


def _cell(value: Any, column: str, suffixes: Sequence[str]) -> Cell:
    """How a clone makes this cell: text with slots rendered, a time shifted, or the same."""
    if isinstance(value, str):
        parts = compile_text(value, suffixes)
        if column == "owner":
            return lambda c: c.owner
        if all(isinstance(p, str) for p in parts):
            return lambda _c: value
        return lambda c: c.render(parts)
    if isinstance(value, float) and column.endswith("_at"):
        return lambda c: value + c.shift
    return lambda _c: value


def compile_group(group: Group, columns: dict[str, list[str]]) -> dict[str, list[list[Cell]]]:
    return {
        table: [
            [_cell(v, col, group.suffixes) for v, col in zip(row, columns[table], strict=True)]
            for row in rows
        ]
        for table, rows in group.rows.items()
    }


def new_suffix(old: str, shift: int, ids: str = "time") -> str:
    """A clone's id suffix: a new id of the second the template's was made, shifted as the
    clone's times are (so that the loaded log's ids sort by time, as the server makes them:
    service/ids.py); random, of the same length, for an id of another shape or with
    `ids="random"` (a log of before, to measure what a deployment that upgrades has)."""
    made = made_at(f"x_{old}")
    if made is None or ids == "random":
        return secrets.token_hex(len(old) // 2)
    return new_id("x", made + shift).split("_", 1)[1]


# --- loading -----------------------------------------------------------------------------------


# The loaded `live` responses began within this many seconds of the load (in the newest
# day's partition), as many as their weight gives over the whole log.
LIVE_WITHIN = 3600.0


async def load(
    url: str,
    groups: list[Group],
    columns: dict[str, list[str]],
    target: int,
    days: float,
    ids: str = "time",
) -> tuple[int, float]:
    """COPY clones of the groups until the log holds `target` events, their times spread
    over the last `days` in load order (oldest first, as a log grows), each of the 100
    owners equally likely; (events, seconds)."""
    compiled = [compile_group(g, columns) for g in groups]
    weights = [g.weight for g in groups]
    rng = random.Random(target)
    now = time.time()
    base = min(float(r[columns["responses"].index("created_at")]) for r in _all_rows(groups))
    events = 0
    conn = await asyncpg.connect(dsn(url))
    started = time.perf_counter()
    try:
        while events < target:
            batch: dict[str, list[tuple[Any, ...]]] = {t: [] for t in TABLES}
            while events < target and len(batch["events"]) < 50_000:
                i = rng.choices(range(len(groups)), weights)[0]
                when = now - days * 86400 * (1 - events / target)
                if groups[i].kind == "live" and when < now - LIVE_WITHIN:
                    # A response still generating began minutes ago: an older one would
                    # have been ended by a sweeper (docs/invariants.md) long since.
                    when = now - rng.uniform(0, LIVE_WITHIN)
                shift = int(when - base)
                owner = f"tenant{rng.randrange(100):03d}"
                suffixes = [new_suffix(s, shift, ids) for s in groups[i].suffixes]
                clone = Clone(suffixes, shift, owner)
                for table, rows in compiled[i].items():
                    batch[table].extend(tuple(cell(clone) for cell in row) for row in rows)
                events += groups[i].events
            for table, records in batch.items():
                if records:
                    await conn.copy_records_to_table(table, records=records, columns=columns[table])
    finally:
        await conn.close()
    return events, time.perf_counter() - started


def _all_rows(groups: list[Group]) -> list[tuple[Any, ...]]:
    return [r for g in groups for r in g.rows["responses"]]


async def _sql(url: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn(url))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def vacuum(url: str) -> float:
    """What autovacuum would have done to a log that grew to this size (visibility map,
    statistics): VACUUM ANALYZE, timed."""
    conn = await asyncpg.connect(dsn(url))
    started = time.perf_counter()
    try:
        for table in TABLES:
            await conn.execute(f"VACUUM (ANALYZE) {table}")
    finally:
        await conn.close()
    return time.perf_counter() - started


@dataclass
class Log:
    """One bench database and what the measurements pick from it (read from the database,
    so that a kept one can be measured again with `--reuse`)."""

    size: int
    url: str
    name: str
    finished: list[tuple[str, str]] = field(default_factory=list)  # (id, owner)
    live: list[tuple[str, str]] = field(default_factory=list)
    long: list[str] = field(default_factory=list)
    latest: float = 0.0  # the newest loaded response's created_at: the log's "now"

    async def pick(self, n: int) -> None:
        conn = await asyncpg.connect(dsn(self.url))
        try:
            scripted = "FROM responses WHERE model = 'scripted'"  # loaded, not the bench's own
            rows = await conn.fetch(
                f"SELECT id, owner {scripted} AND status = 'completed' ORDER BY random() LIMIT $1",
                n,
            )
            self.finished = [(r["id"], r["owner"]) for r in rows]
            rows = await conn.fetch(f"SELECT id, owner {scripted} AND status = 'in_progress'")
            self.live = [(r["id"], r["owner"]) for r in rows]
            rows = await conn.fetch(f"SELECT id {scripted} AND version >= 1500 LIMIT 20")
            self.long = [r["id"] for r in rows]
            self.latest = await conn.fetchval(f"SELECT max(created_at) {scripted}")
        finally:
            await conn.close()


# --- measurements ------------------------------------------------------------------------------


def pct(values: Sequence[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100)[q - 1]


async def table_stats(url: str, table: str) -> dict[str, float]:
    conn = await asyncpg.connect(dsn(url))
    try:
        row = await conn.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup, pg_relation_size(relid) AS heap"
            " FROM pg_stat_user_tables WHERE relname = $1",
            table,
        )
        return {k: float(v) for k, v in dict(row).items()}
    finally:
        await conn.close()


OPTS = {"interval": 0.005, "per_task": 10}


def _labelled(figures: dict[str, float], ids: str, args: argparse.Namespace) -> dict[str, float]:
    """With more than one kind of id (`--paced-ids random,time`), each figure says which."""
    if len(args.paced_ids) == 1:
        return figures
    return {f"{k} [{ids} ids]": v for k, v in figures.items()}


async def paced(store: SqlEventStore, log: Log, args: argparse.Namespace) -> dict[str, float]:
    """The paced load, and what it did to the hot row (`responses`), once per kind of id."""
    out: dict[str, float] = {}
    for ids in args.paced_ids:
        work = plans(args.streams, int(args.rate * args.seconds), ids)
        before = await table_stats(log.url, "responses")
        run = await group_phase(store, "paced", work, rate=args.rate, **OPTS)
        await asyncio.sleep(1.5)  # backends report their counters when idle, at most every 1 s
        after = await table_stats(log.url, "responses")
        print(f"     [{ids} ids]", run.line())
        upd = after["n_tup_upd"] - before["n_tup_upd"]
        hot = after["n_tup_hot_upd"] - before["n_tup_hot_upd"]
        figures = {
            "paced: events/s (steady)": run.steady_rate,
            "paced: append->visible p99 ms": pct(run.steady, 99) * 1e3,
            "hot row: HOT share of updates %": 100 * hot / max(upd, 1),
            "hot row: dead tuples after": after["n_dead_tup"],
            "hot row: heap growth MB": (after["heap"] - before["heap"]) / 2**20,
        }
        out |= _labelled(figures, ids, args)
    return out


async def remote(log: Log, args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    for ids in args.paced_ids:
        work = plans(args.streams, int(args.rate * args.seconds) // 2, ids)
        # The other process freezes its startup heap once started, as `serve` does
        # (adapters/cli/memory.py): without it a full collection there, 100 ms on this box,
        # stalls every tail in it and sets the p99, a pause no server of ours makes.
        run = await process_phase(log.url, work, rate=args.rate, gc_freeze=True, **OPTS)
        print(f"     [{ids} ids]", run.line())
        figures = {
            "remote tail p50 ms": pct(run.steady, 50) * 1e3,
            "remote tail p99 ms": pct(run.steady, 99) * 1e3,
        }
        out |= _labelled(figures, ids, args)
    return out


async def replay(store: SqlEventStore, log: Log) -> dict[str, float]:
    runs = await replay_phase(store, 50_000, 3)
    rates = [r.events / r.meter.seconds for r in runs]
    figures = {"replay: new 50k-event stream ev/s": statistics.median(rates)}
    if log.long:  # a small log may hold no long response
        started = time.perf_counter()
        typed = await store.read_events(random.choice(log.long))
        figures["replay: a loaded 2k-event stream ev/s"] = len(typed) / (
            time.perf_counter() - started
        )
    return figures


async def timed(calls: Sequence[Callable[[], Any]]) -> list[float]:
    out = []
    for call in calls:
        started = time.perf_counter()
        await call()
        out.append(time.perf_counter() - started)
    return out


async def gets(store: SqlEventStore, log: Log, n: int) -> dict[str, float]:
    """GET /v1/responses/{id}'s use-case, as the route calls it (owner check included)."""
    svc: Any = SimpleNamespace(store=store, index=store)

    def get(rid: str, owner: str) -> Callable[[], Any]:
        return lambda: retrieve_raw(svc, rid, owner)

    finished = await timed([get(r, o) for r, o in random.sample(log.finished, n)])
    running = await timed([get(r, o) for r, o in log.live[: max(n // 10, 1)]])
    return {
        "GET finished p50 ms": pct(finished, 50) * 1e3,
        "GET live (fold of the log) p50 ms": pct(running, 50) * 1e3,
    }


async def lists(store: SqlEventStore, log: Log, repeats: int) -> dict[str, float]:
    conn = await asyncpg.connect(dsn(log.url))
    try:  # a page a tenth of the way into the history, which gc has not reached
        deep = await conn.fetchval(
            "SELECT id FROM responses WHERE model = 'scripted' ORDER BY created_at DESC, id DESC"
            " OFFSET (SELECT count(*) / 10 FROM responses) LIMIT 1"
        )
    finally:
        await conn.close()
    shapes: dict[str, dict[str, Any]] = {
        "list: an owner's completed p50 ms": {"owner": "tenant007", "status": "completed"},
        # 60 days, not 7: at 1 M events a week holds only ~5 cancelled responses, and a
        # page of 5 is no comparison for the full page of 50 a larger log lists.
        "list: cancelled in the last 60 days p50 ms": {
            "status": "cancelled",
            "since": log.latest - 60 * 86400,
        },
        "list: a model's page deep in history p50 ms": {"model": "scripted", "after": deep},
    }
    out = {}
    for name, kw in shapes.items():
        page = await store.list(**kw, limit=50)  # type: ignore[attr-defined]
        if len(page.rows) < 50:
            print(f"     warning: {name}: {len(page.rows)} listed, not a full page of 50")
        calls = [lambda kw=kw: store.list(**kw, limit=50)] * repeats  # type: ignore[attr-defined]
        out[name] = pct(await timed(calls), 50) * 1e3
    return out


def cli(url: str, *argv: str) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    done = subprocess.run(
        [RESPLOG, *argv, "--json", "--no-progress", "--database-url", url],
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"resplog {' '.join(argv)}: {done.stderr[-2000:]}")
    return json.loads(done.stdout), took


def verify(log: Log, sample: int) -> dict[str, float]:
    if sample:
        ids = [rid for rid, _ in random.sample(log.finished, sample)]
        report, took = cli(log.url, "verify", *ids)
    else:
        report, took = cli(log.url, "verify", "--all")
    bad = len(report["violations"])
    print(
        f"     verify: {report['streams']} streams, {report['events']} events, {bad} violations,"
        f" {len(report['warnings'])} warnings in {took:.1f}s"
    )
    if bad:
        print("     first violations:", report["violations"][:3])
    return {f"verify {'sample' if sample else '--all'} ev/s": report["events"] / took}


async def gc(log: Log, count: int) -> dict[str, float]:
    """`resplog gc --older-than` at the end of the oldest day with a partition of its own
    (it goes whole) or, on a log without, at the created_at of the `count`-th oldest ended
    response; then the same again, which finds nothing: what a run costs whatever it
    deletes (the CLI's start, the candidates query, the blob sweep)."""
    store = await open_store(log.url)
    try:
        async with store.engine.connect() as conn:
            days = await partitions.days(conn)
    finally:
        await store.close()
    conn = await asyncpg.connect(dsn(log.url))
    try:
        cutoff = await conn.fetchval(
            "SELECT created_at FROM responses WHERE status IN ('completed', 'cancelled',"
            " 'failed', 'incomplete') ORDER BY created_at, id OFFSET $1 LIMIT 1",
            count,
        )
    finally:
        await conn.close()
    if days:
        cutoff = (days[0] + 1) * partitions.PERIOD
    # The CLI's cutoff is its own clock less `age`: a second past this one's, whenever it starts.
    age = int(time.time() - cutoff) - 1
    report, took = cli(log.url, "gc", "--older-than", f"{age}s")
    empty, fixed = cli(log.url, "gc", "--older-than", f"{age}s")
    print(
        f"     gc: {report['deleted']} responses, {report['events']} events,"
        f" {report['days']} whole days in {took:.2f}s;"
        f" again ({empty['deleted']} responses) {fixed:.2f}s"
    )
    return {
        "gc: events/s (the whole run)": report["events"] / took,
        "gc: a run s": took,
        "gc: an empty run s": fixed,
    }


async def disk(url: str) -> dict[str, float]:
    conn = await asyncpg.connect(dsn(url))
    try:
        total = await conn.fetchval("SELECT count(*) FROM events")
        out: dict[str, float] = {}
        for table in TABLES:
            size = await conn.fetchval(  # a partitioned table's partitions (migration 0008)
                "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) "
                "FROM pg_partition_tree($1::regclass)), pg_total_relation_size($1::regclass))",
                table,
            )
            out[f"disk: {table} MB per 1M events"] = float(size) / 2**20 / (total / 1e6)
        out["disk: all tables MB per 1M events"] = sum(out.values())
        out["events in the log"] = float(total)
        return out
    finally:
        await conn.close()


async def phase(name: str, log: Log, args: argparse.Namespace) -> dict[str, float]:
    # These run in other processes (the tailers, the CLI): no store needed here.
    if name == "process":
        return await remote(log, args)
    if name == "verify":
        return verify(log, args.verify_sample)
    if name == "gc":
        return await gc(log, args.gc_responses)
    head = args.revision == "head"
    store = await open_store(log.url, pool_size=POOL, max_overflow=0, check_migrated=head)
    try:
        if name == "paced":
            return await paced(store, log, args)
        if name == "replay":
            return await replay(store, log)
        if name == "get":
            return await gets(store, log, args.gets)
        if name == "list":
            return await lists(store, log, args.repeats)
        raise ValueError(f"no phase {name!r}")
    finally:
        await store.close()


# --- driver ------------------------------------------------------------------------------------


def report(results: dict[int, dict[str, list[float]]]) -> None:
    """Each figure's median over the rounds at each size, and its ratio to the smallest."""
    sizes = sorted(results)
    base = {k: statistics.median(v) for k, v in results[sizes[0]].items()}
    head = "".join(f"{_size(s):>12}" for s in sizes)
    print(f"\n{'figure (median of the rounds)':<46}{head}  ratio to {_size(sizes[0])}")
    for name, b in base.items():
        got = [statistics.median(results[s].get(name, [float("nan")])) for s in sizes]
        ratios = " ".join(f"{g / b:.2f}x" if b else "-" for g in got[1:])
        print(f"{name:<46}{''.join(f'{g:>12,.2f}' for g in got)}  {ratios}")


def _size(n: int) -> str:
    return f"{n / 1e6:g}M"


async def _partition_days(url: str, days: float) -> None:
    """The partitions of each day the loaded log spans, as the server would have made
    them while it grew (nothing before migration 0008)."""
    store = await open_store(url, check_migrated=False)
    try:
        async with store.engine.connect() as conn:
            since = partitions.day_of(time.time() - days * 86400)
            made = await partitions.ensure(conn, time.time(), since=since)
    finally:
        await store.close()
    if made:
        print(f"  partitions: {len(made)} days, {made[0]}..{made[-1]}")


async def prepare(size: int, args: argparse.Namespace, tmp: Path) -> Log:
    """A database of `size` loaded events (or the kept one `--reuse` names for it)."""
    reuse = dict(args.reuse)
    if size in reuse:
        url = make_url(args.database_url).set(database=reuse[size]).render_as_string(False)
        log = Log(size, url, reuse[size])
    else:
        url, name = await fresh_postgres(args.database_url)
        log = Log(size, url, name)
        await upgrade_async(url)
        groups, columns = await templates(url, tmp / f"server-{name}.log")
        if args.revision != "head":  # the server migrated it to head
            await downgrade_async(url, args.revision)
        for g in groups:
            print(f"  template {g.kind}: {g.events} events, weight {g.weight}")
        await _partition_days(url, args.days)
        events, took = await load(url, groups, columns, size, args.days, args.load_ids)
        if args.fillfactor:  # for the rows written from now on: the bench's own
            await _sql(url, f"ALTER TABLE responses SET (fillfactor = {args.fillfactor})")
        vac = await vacuum(url)
        print(
            f"# {name}: loaded {events:,} events in {took:.0f}s ({events / took:,.0f} ev/s);"
            f" VACUUM ANALYZE {vac:.0f}s",
            flush=True,
        )
    print(f"# {_size(size)}: {log.name} at revision {args.revision}", flush=True)
    return log


async def run(args: argparse.Namespace) -> None:
    tmp = tempfile.TemporaryDirectory()
    logs: list[Log] = []
    results: dict[int, dict[str, list[float]]] = {}
    try:
        for size in args.sizes:
            logs.append(await prepare(size, args, Path(tmp.name)))
            results[size] = {}
            for k, v in (await disk(logs[-1].url)).items():
                results[size][f"{k} (as loaded)" if k.startswith("disk") else k] = [v]
        for r in range(args.rounds):
            order = logs if r % 2 == 0 else logs[::-1]  # noise hits every size alike
            for log in logs:
                await log.pick(args.gets)  # afresh: gc took the oldest
            for name in args.phases.split(","):
                for log in order:
                    busy = background_load(1.0)
                    print(f"  round {r + 1} [{name}] {_size(log.size)}, {busy:.2f} cores busy")
                    for k, v in (await phase(name, log, args)).items():
                        results[log.size].setdefault(k, []).append(v)
            report(results)
        for log in logs:
            for k, v in (await disk(log.url)).items():
                results[log.size][f"{k} (at the end)" if k.startswith("disk") else k] = [v]
        report(results)
    finally:
        for log in logs:
            if args.keep or log.size in dict(args.reuse):
                print(f"# kept {log.name} ({_size(log.size)})")
            else:
                await drop_postgres(args.database_url, log.name)
        tmp.cleanup()


def _sizes(text: str) -> list[int]:
    return sorted(int(float(x)) for x in text.split(","))


def _reuse(text: str) -> tuple[int, str]:
    size, _, name = text.partition("=")
    return int(float(size)), name


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--database-url", default=PG, help="PostgreSQL server to create them on")
    p.add_argument("--sizes", type=_sizes, default=_sizes("1e6,1e7"), help="e.g. 1e6,1e7,1e8")
    p.add_argument("--revision", default="head", help="migrate to this revision (e.g. 0005)")
    p.add_argument("--phases", default="paced,process,replay,get,list,verify,gc")
    p.add_argument("--rounds", type=int, default=3, help="of every phase at every size")
    p.add_argument(
        "--fillfactor",
        type=int,
        default=0,
        help="set `responses`' fillfactor after the load (to compare; 0: the migration's)",
    )
    p.add_argument("--streams", type=int, default=300)
    p.add_argument("--rate", type=float, default=100, help="events/s per stream (paced)")
    p.add_argument("--seconds", type=float, default=8, help="length of the paced phase")
    p.add_argument(
        "--load-ids",
        choices=["time", "random"],
        default="time",
        help="the loaded clones' ids: by time (as the server makes them) or random (a log"
        " made before ids began with their second)",
    )
    p.add_argument(
        "--paced-ids",
        type=lambda t: t.split(","),
        default=["time"],
        help="the paced and process phases' new stream ids: time (as the server makes"
        " them), random (as it made them before), or both, e.g. random,time",
    )
    p.add_argument("--days", type=float, default=90, help="the loaded log spans this long")
    p.add_argument("--gets", type=int, default=1000, help="GETs (and the sample verify picks)")
    p.add_argument("--repeats", type=int, default=30, help="runs of each list shape")
    p.add_argument(
        "--verify-sample",
        type=int,
        default=500,
        metavar="N",
        help="verify N random streams (0: verify --all)",
    )
    p.add_argument("--gc-responses", type=int, default=300, help="oldest ones gc takes a round")
    p.add_argument("--keep", action="store_true", help="do not drop the databases")
    p.add_argument(
        "--reuse",
        type=_reuse,
        action="append",
        default=[],
        metavar="SIZE=DATABASE",
        help="measure a kept database for this size instead of loading one",
    )
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
