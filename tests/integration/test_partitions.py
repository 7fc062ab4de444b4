"""The log partitioned by day on PostgreSQL (migration 0008, adapters/store/partitions.py):
each stream's rows in its day's partition, reads that read that partition alone, the
coming days' partitions made once whoever asks, a late day kept in the default partition,
and retention that drops a whole day, never while one of its responses runs."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Callable

import asyncpg
import msgspec
import pytest
import sqlalchemy as sa

from adapters.store import gc as store_gc
from adapters.store import partitions
from adapters.store.factory import open_store
from adapters.store.migrate import upgrade
from adapters.store.partitions import PERIOD, day_of
from adapters.store.postgres import PostgresEventStore
from adapters.store.sql import SqlEventStore
from adapters.store.urls import asyncpg_dsn
from service.ids import made_at, new_id
from service.ports import GcRule
from tests.e2e.test_admin_cli import ok_json
from tests.integration import streams
from tests.integration.test_store_contract import write


@pytest.fixture
def own_pg(fresh_pg: Callable[[], str]) -> str:
    """A database of each test's own: the tests make and drop partitions."""
    url = fresh_pg()
    upgrade(url)
    return url


@pytest.fixture
async def store(own_pg: str) -> AsyncIterator[SqlEventStore]:
    s = await open_store(own_pg)
    yield s
    await s.close()


@pytest.fixture
def today(store: SqlEventStore) -> int:
    """The day the store was opened on, whose partitions it made (the module may run over
    midnight)."""
    return day_of(time.time())


def _on(day: int) -> str:
    return new_id("resp", day * PERIOD + 3600)


def _script(rid: str, **kwargs: object) -> list[streams.Append]:
    """A response's appends, created when its id says (as the server makes both)."""
    at = made_at(rid)
    return streams.script(rid, created_at=int(time.time()) if at is None else at, **kwargs)


async def _sql(store: SqlEventStore, sql: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(asyncpg_dsn(store.url))
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def _where(store: SqlEventStore, stream_id: str) -> set[str]:
    rows = await _sql(
        store,
        "SELECT DISTINCT tableoid::regclass::text FROM events WHERE stream_id = $1",
        stream_id,
    )
    return {r[0] for r in rows}


async def test_opening_the_store_makes_the_coming_days_partitions(
    today: int, store: SqlEventStore
) -> None:
    async with store.engine.connect() as conn:
        days = await partitions.days(conn)
    assert days == list(range(today, today + partitions.AHEAD + 1))


async def test_each_stream_is_in_its_days_partition_and_reads_it_whole(
    today: int,
    store: SqlEventStore,
) -> None:
    first = today + 1
    later = first + 1
    ids = {
        "events_legacy": [f"resp_{secrets.token_hex(24)}", new_id("conv", time.time())],
        f"events_p{today}": [_on(today)],
        f"events_p{later}": [_on(later)],
        "events_default": [_on(today + 30)],  # a day with no partition yet
    }
    for partition, rids in ids.items():
        for rid in rids:
            appends = _script(rid, deltas=3)
            await write(store, appends)
            assert await _where(store, rid) == {partition}
            written = [e.data for e in await store.read(rid)]
            assert len(written) == len(streams.events_of(appends))
            page, _ = await store.read_page(rid, 0, 100, 1 << 20)
            assert [e.data for e in page] == written[1:]
            many = await store.read_many([(rid, 1)], 100)
            assert [e.data for e in many] == written[2:]


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_a_read_of_one_stream_reads_its_partition_alone(
    today: int, store: SqlEventStore, mode: str
) -> None:
    first = today + 1
    rid = _on(first)
    await write(store, _script(rid, deltas=2))
    conn = await asyncpg.connect(asyncpg_dsn(store.url))
    try:
        await conn.execute(f"SET plan_cache_mode = {mode}")
        statement = await conn.prepare("EXPLAIN (ANALYZE, COSTS OFF) " + store._PAGE)
        plan = "\n".join(r[0] for r in await statement.fetch(rid, 0, 10, 1 << 20))
    finally:
        await conn.close()
    assert f"events_p{first}" in plan
    for other in ("events_legacy", "events_default", f"events_p{first + 1}"):
        assert other not in plan


async def test_the_store_names_the_partition_it_knows_and_events_for_the_rest(
    today: int, store: SqlEventStore
) -> None:
    """A statement on `events` costs a plan over every partition (docs/performance.md, "The
    log partitioned by day"): the hot reads name the stream's partition when the store knows
    it."""
    assert isinstance(store, PostgresEventStore) and store.layout is not None
    assert store._table_of(_on(today)) == f"events_p{today}"
    assert store._table_of(f"resp_{secrets.token_hex(24)}") == "events_legacy"
    assert store._table_of(new_id("conv", time.time())) == "events_legacy"
    assert store._table_of(_on(today + 30)) is None  # the default partition, or a new day
    odd = ("resp_" + "z" * 50, "resp_" + "A" * 50, "resp_0000000g" + "0" * 42, "resp_é" + "a" * 48)
    for sid in (_on(today), *odd, _on(today)[:13] + "z" * 42, "x"):
        rows = await _sql(store, "SELECT resplog_period($1)", sid)
        assert rows[0][0] == partitions.period(sid)  # the database's day is ours


async def test_two_processes_making_the_same_days_make_each_once(
    today: int, store: SqlEventStore
) -> None:
    far = (today + 40) * PERIOD

    async def ensure() -> list[int]:
        async with store.engine.connect() as conn:
            return await partitions.ensure(conn, far)

    made = await asyncio.gather(ensure(), ensure())
    wanted = list(range(today + 40, today + 40 + partitions.AHEAD + 1))
    assert sorted(made[0] + made[1]) == wanted
    assert await ensure() == []


async def test_a_day_whose_rows_came_before_its_partition_keeps_them_in_the_default_one(
    today: int,
    store: SqlEventStore,
) -> None:
    late = today + 20
    rid = _on(late)
    appends = _script(rid, deltas=2)
    await write(store, appends)
    async with store.engine.connect() as conn:
        made = await partitions.ensure(conn, late * PERIOD)
    assert made == list(range(late + 1, late + partitions.AHEAD + 1))
    assert await _where(store, rid) == {"events_default"}
    assert len(await store.read(rid)) == len(streams.events_of(appends))


async def test_gc_drops_a_whole_day_once_its_responses_have_all_ended(
    today: int,
    store: SqlEventStore,
) -> None:
    first = today + 1
    done, running, other = _on(first), _on(first), _on(first + 1)
    ended = _script(done, deltas=3)
    await write(store, ended)
    whole = _script(running, deltas=2)
    await write(store, whole[:-1])  # not ended yet
    await write(store, _script(other, deltas=1))
    cutoff = (first + 1) * PERIOD + 1  # the first day is past, the next is not

    expired = {d.day: d for d in await store_gc.expired_days(store, cutoff)}
    assert sorted(expired) == [today, first]
    day = expired[first]
    assert (day.day, day.responses, day.running) == (first, 2, 1)
    breaks = await _breaks(store)
    assert await store_gc.drop_day(store, first) is None  # one still runs: nothing changes
    assert await store.get(done) is not None and await _breaks(store) == breaks
    assert len(await store.read(done)) == len(streams.events_of(ended))

    expected, last = whole[-1]
    await store.append(running, expected, last)
    gone = await store_gc.drop_day(store, first)
    assert gone is not None
    events = len(streams.events_of(ended)) + len(streams.events_of(whole))
    assert (gone.responses, gone.events) == (2, events)
    # The responses went: a process's cached chain through them is walked again.
    assert await _breaks(store) == breaks + 1
    assert await store.get(done) is None and await store.get(running) is None
    # This process still names the dropped partition: its reads look again, and find nothing.
    assert await store.read(done) == []
    assert store.layout is not None and first not in store.layout.days
    store.layout = msgspec.structs.replace(store.layout, days=store.layout.days | {first})
    assert await store.read_page(done, -1, 10, 1 << 20) == ([], False)
    store.layout = msgspec.structs.replace(store.layout, days=store.layout.days | {first})
    assert await store.read_many([(done, -1)], 10) == []
    async with store.engine.connect() as conn:
        assert first not in await partitions.days(conn)
    assert await store.get(other) is not None  # the next day is untouched
    assert await store_gc.drop_day(store, first) is None  # and a second drop finds nothing


async def _breaks(store: SqlEventStore) -> int:
    """The chain-break count (service/prompts/chains.py)."""
    async with store.engine.connect() as conn:
        return int(await conn.scalar(sa.text("SELECT breaks FROM chain_breaks")))


async def test_the_age_limit_leaves_a_day_with_its_own_partition_to_go_whole(
    today: int,
    store: SqlEventStore,
) -> None:
    first = today + 1
    legacy = await write(store, _script(f"resp_{secrets.token_hex(24)}", deltas=1))
    whole = await write(store, _script(_on(first), deltas=1))
    days = await store_gc.partitioned_days(store)
    rule = GcRule(cutoff=(first + 5) * PERIOD, days=days)
    found = [c.id async for page in store_gc.candidates(store, rule, page=10) for c in page]
    assert legacy in found
    assert whole not in found
    async with store.engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT count(*) FROM responses"))
        assert rows.scalar_one() == 2


async def test_the_gc_command_drops_the_days_past_the_retention_and_the_log_verifies(
    today: int, store: SqlEventStore, own_pg: str
) -> None:
    """`resplog gc --older-than 1d`: the days wholly past it go, each in one piece, but
    not the one where a response still runs; the rest of the log still verifies."""
    old, older = today - 2, today - 3
    async with store.engine.connect() as conn:
        assert await partitions.ensure(conn, time.time(), since=older) == [older, old, today - 1]
    ended = [await write(store, _script(_on(older), deltas=2)) for _ in range(2)]
    running = await write(store, _script(_on(old), deltas=1, end="open"))
    events = sum([len(await store.read(rid)) for rid in ended])

    dry = await asyncio.to_thread(ok_json, "gc", "--dry-run", "--older-than", "1d", url=own_pg)
    assert [(d["day"], d["responses"], d["running"]) for d in dry["days"]] == [
        (older, 2, 0),
        (old, 1, 1),
    ]
    assert (dry["responses"], dry["events"]) == ([], events)
    done = await asyncio.to_thread(ok_json, "gc", "--older-than", "1d", url=own_pg)
    assert (done["days"], done["deleted"], done["events"]) == (1, 2, events)
    async with store.engine.connect() as conn:
        assert older not in await partitions.days(conn)
    assert await store.get(running) is not None
    report = await asyncio.to_thread(ok_json, "verify", "--all", url=own_pg)
    assert report["ok"] is True


async def test_a_drop_that_waits_for_a_long_reader_gives_up_and_the_next_run_drops(
    today: int, store: SqlEventStore
) -> None:
    """The drop takes all of `events`, and every statement queues behind it while it
    waits: it waits a second at most, leaves the day whole, and the next run takes it."""
    first = today + 1
    rid = await write(store, _script(_on(first), deltas=1))
    reader = await asyncpg.connect(asyncpg_dsn(store.url))
    try:
        async with reader.transaction():  # an export, say, in the middle of its scan
            await reader.fetch("SELECT count(*) FROM events")
            started = time.monotonic()
            assert await store_gc.drop_day(store, first) is None
            assert time.monotonic() - started < 5
        assert await store.get(rid) is not None
        assert len(await store.read(rid)) > 0
    finally:
        await reader.close()
    gone = await store_gc.drop_day(store, first)
    assert gone is not None and gone.responses == 1
