"""The store's admin reads and writes on PostgreSQL and SQLite: the paged scan behind
`verify`/`export`, garbage collection, import inserts, and listing by conversation."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from adapters.store import archive as archive_store
from adapters.store import gc as store_gc
from adapters.store.factory import open_store
from adapters.store.migrate import upgrade
from adapters.store.prompts import SqlPrompts
from adapters.store.scan import LogScan
from adapters.store.sql import SqlEventStore
from adapters.store.tables import events as t_events
from domain.errors import Conflict
from domain.templates import PromptTemplate
from service.audit import archive
from service.audit.verify import StreamCheck
from service.ports import GcRule, Head, Selection, StoredEvent
from tests.integration import streams


@pytest.fixture(params=["postgres", "sqlite"])
def empty_url(request: pytest.FixtureRequest, fresh_pg: Callable[[], str], tmp_path: Path) -> str:
    """A migrated database of its own (these tests delete and insert behind the store)."""
    url = fresh_pg() if request.param == "postgres" else f"sqlite:///{tmp_path / 'a.db'}"
    upgrade(url)
    return url


@pytest.fixture
async def empty(empty_url: str) -> AsyncIterator[SqlEventStore]:
    store = await open_store(empty_url, listen=False)
    yield store
    await store.close()


async def write(store: SqlEventStore, appends: list[streams.Append]) -> str:
    rid = appends[0][1][0].response.id  # type: ignore[attr-defined]
    for expected, batch in appends:
        await store.append(rid, expected, batch)
    return rid


async def collect(source: AsyncIterator[Head | StoredEvent]) -> list[tuple[str, list[int]]]:
    out: list[tuple[str, list[int]]] = []
    async for item in source:
        if isinstance(item, Head):
            out.append((item.stream_id, []))
        else:
            assert item.stream_id == out[-1][0]
            out[-1][1].append(item.position)
    return out


async def test_the_scan_gives_each_stream_after_its_row_whole_and_in_order(
    store: SqlEventStore,
) -> None:
    """Pages of rows and of events never split, reorder or drop a stream's events."""
    owner = f"scan_{secrets.token_hex(4)}"
    lengths = {}
    for n, deltas in enumerate([0, 1, 4, 7, 2]):
        rid = await write(store, streams.script(deltas=deltas, owner=owner, created_at=1000 + n))
        lengths[rid] = len(await store.read(rid))
    scan = LogScan(store, rows_page=2, events_page=3)
    got = await collect(scan.streams(Selection(owner=owner)))
    assert [rid for rid, _ in got] == list(lengths)  # oldest first
    assert all(positions == list(range(lengths[rid])) for rid, positions in got)
    assert await scan.count(Selection(owner=owner)) == 5
    assert await scan.count(Selection(owner=owner, statuses=("failed",))) == 0
    assert await scan.count(Selection(owner=owner, since=1002, until=1004)) == 2
    picked = [*list(lengths)[3:], "resp_absent"]
    assert [rid for rid, _ in await collect(scan.streams_of(picked))] == picked
    assert await scan.existing(picked) == set(picked[:2])


async def test_cuts_split_the_scan_into_slices_that_cover_every_row_once(
    store: SqlEventStore,
) -> None:
    """`verify --all --jobs N`'s slices: together every selected stream once, in order, each
    slice about as long as the others; rows that share a `created_at` are split by id; more
    parts than rows give no empty slice."""
    owner = f"cuts_{secrets.token_hex(4)}"
    made = [
        await write(store, streams.script(deltas=1, owner=owner, created_at=2000 + n // 2))
        for n in range(7)
    ]
    scan = LogScan(store, rows_page=2, events_page=3)
    whole = [rid for rid, _ in await collect(scan.streams(Selection(owner=owner)))]
    assert sorted(whole) == sorted(made)
    for parts in (1, 2, 3, 7, 12):
        cuts = await scan.cuts(Selection(owner=owner), parts)
        assert len(cuts) == min(parts, 7) - 1 and cuts == sorted(cuts)
        slices = [
            [
                rid
                for rid, _ in await collect(
                    scan.streams(Selection(owner=owner, after=a, through=b))
                )
            ]
            for a, b in zip([None, *cuts], [*cuts, None], strict=True)
        ]
        assert [rid for part in slices for rid in part] == whole
        assert max(map(len, slices)) - min(map(len, slices)) <= 1, slices


async def test_cuts_weigh_each_stream_by_its_events(store: SqlEventStore) -> None:
    """A long stream first: with two parts it is a slice by itself, the short ones the
    other, since a part's time is its events'."""
    owner = f"cuts_{secrets.token_hex(4)}"
    long = await write(store, streams.script(deltas=60, owner=owner, created_at=3000))
    short = [
        await write(store, streams.script(deltas=1, owner=owner, created_at=3001 + n))
        for n in range(6)
    ]
    assert len(await store.read(long)) > sum([len(await store.read(r)) for r in short])
    scan = LogScan(store)
    cuts = await scan.cuts(Selection(owner=owner), 2)
    assert [rid for _, rid in cuts] == [long]
    rest = await collect(scan.streams(Selection(owner=owner, after=cuts[0])))
    assert [rid for rid, _ in rest] == short


async def test_events_without_a_row_are_found_as_orphans(empty: SqlEventStore) -> None:
    """`verify --all` also sees streams whose read-model row is gone (a prompt's stream,
    whose row is in `prompts`, is not one)."""
    rid = await write(empty, streams.script(deltas=1))
    stray = {"stream_id": "resp_stray", "position": 0, "type": "x", "data": "{}", "facts": None}
    async with empty.engine.begin() as conn:
        await conn.execute(sa.insert(t_events), [{**stray, "recorded_at": 1.0}])
    template = PromptTemplate(instructions="You are {{persona}}.")
    assert await SqlPrompts(empty).add("pmpt_kept", "owner_a", template, 2.0) == 1
    scan = LogScan(empty)
    assert await collect(scan.orphans()) == [("resp_stray", [0])]
    assert rid not in await scan.existing(["resp_nothing"])


async def test_gc_deletes_only_ended_responses_the_rule_selects_with_their_events(
    empty: SqlEventStore,
) -> None:
    """Unstored and old ended responses go (rows and events); running ones never do."""
    unstored = await write(empty, streams.script(deltas=1, store=False))
    old = await write(empty, streams.script(deltas=1, end="failed", created_at=100))
    recent = await write(empty, streams.script(deltas=1, created_at=10**10))
    running = await write(empty, streams.script(deltas=1, store=False, end="open", created_at=50))
    rule = GcRule(cutoff=1000.0)
    found = [c async for page in store_gc.candidates(empty, rule, page=1) for c in page]
    assert {c.id: c.why for c in found} == {
        old: "older than the retention",
        unstored: "store=false",
    }
    doomed = len(await empty.read(unstored)) + len(await empty.read(old))
    assert await store_gc.collect(empty, rule, [c.id for c in found] + [running]) == (2, doomed)
    scan = LogScan(empty)
    assert await scan.existing([unstored, old, recent, running]) == {recent, running}
    nothing = GcRule(unstored=False)
    assert [p async for p in store_gc.candidates(empty, nothing, page=10)] == []


async def test_gc_pages_every_reason_oldest_first_each_response_once(
    empty: SqlEventStore,
) -> None:
    """With every reason on, each response a reason selects comes once (one not stored and
    old too), oldest first, whatever the page; the others stay."""
    both = await write(empty, streams.script(deltas=0, store=False, created_at=100))
    old = await write(empty, streams.script(deltas=0, created_at=200))
    unstored = await write(empty, streams.script(deltas=0, store=False, created_at=5000))
    deleted = await write(empty, streams.script(deltas=0, created_at=6000))
    kept = await write(empty, streams.script(deltas=0, created_at=7000))
    async with empty.engine.begin() as conn:
        marked = sa.text("UPDATE responses SET deleted_at = 6500 WHERE id = :id")
        await conn.execute(marked, {"id": deleted})
    rule = GcRule(cutoff=1000.0, deleted=True)
    for page in (1, 2, 10):
        found = [c.id async for got in store_gc.candidates(empty, rule, page=page) for c in got]
        assert found == [both, old, unstored, deleted], page
    assert kept not in found


async def test_gc_finds_each_reason_through_an_index_of_its_own(empty: SqlEventStore) -> None:
    """Among many stored responses, the few not stored and those deleted are read through
    their partial indexes (which hold only them), not found by walking every ended
    response: a `gc` run that finds nothing costs the same on a log of any size."""
    rule = GcRule(cutoff=1000.0, deleted=True)
    query = store_gc._page(rule, (1.0, "resp_x"), 100)
    postgres = empty.engine.dialect.name == "postgresql"
    async with empty.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 20000) "
                "INSERT INTO responses (id, owner, status, model, background, store, "
                "created_at, updated_at, version, snapshot_version, snapshot) "
                "SELECT 'resp_' || x, 'o', 'completed', 'm', false, x % 1000 <> 0, "
                "1000 + x, 1000 + x, 3, 3, '{}' FROM n"
            )
        )
        await conn.execute(sa.text("UPDATE responses SET deleted_at = 1 WHERE id = 'resp_7'"))
        await conn.execute(sa.text("ANALYZE responses" if postgres else "ANALYZE"))
        compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
        explain = "EXPLAIN" if postgres else "EXPLAIN QUERY PLAN"
        plan = "\n".join(str(r[-1]) for r in await conn.execute(sa.text(f"{explain} {compiled}")))
    assert "ix_responses_unstored" in plan and "ix_responses_deleted" in plan, plan


async def test_an_import_batch_is_written_whole_or_not_at_all(
    store: SqlEventStore, empty: SqlEventStore
) -> None:
    """Exported streams land with identical rows; a batch holding an existing id writes
    nothing at all."""
    rids = [await write(store, streams.script(deltas=d)) for d in (1, 2)]
    lines = [archive.header(0, {})]
    source = LogScan(store)
    async for item in source.streams_of(rids):
        if isinstance(item, Head):
            assert item.record is not None
            lines.append(archive.response_line(item.record, item.record.version + 1))
        else:
            lines.append(archive.event_line(item))
    lines.append(archive.end(2, len(lines) - 3))
    imported = list(archive.read(lines))
    await archive_store.insert(empty, imported[:1])
    with pytest.raises(Conflict):
        await archive_store.insert(empty, imported)
    target = LogScan(empty)
    assert await target.existing(rids) == {rids[0]}
    await archive_store.insert(empty, imported[1:])
    for rid in rids:
        assert await target.record(rid) == await source.record(rid)
        assert await empty.read(rid) == await store.read(rid)


async def test_listing_by_conversation_follows_previous_response_id(store: SqlEventStore) -> None:
    """`--conversation ID` keeps ID and every response that continues it, transitively."""
    owner = f"conv_{secrets.token_hex(4)}"
    a = await write(store, streams.script(deltas=0, owner=owner))
    b = await write(store, streams.script(deltas=0, owner=owner, previous=a))
    c = await write(store, streams.script(deltas=0, owner=owner, previous=b))
    await write(store, streams.script(deltas=0, owner=owner, previous=None))
    listed = await store.list(owner=owner, root=a, limit=10)
    assert {r.id for r in listed.rows} == {a, b, c}
    assert {r.id for r in (await store.list(root=b, limit=10)).rows} == {b, c}


async def test_a_scanned_log_verifies(store: SqlEventStore) -> None:
    """What the store holds for a command-written log passes every check."""
    rid = await write(store, streams.every_tag_script())
    check: StreamCheck | None = None
    async for item in LogScan(store, events_page=4).streams_of([rid]):
        if isinstance(item, Head):
            check = StreamCheck(item.stream_id, item.record)
        else:
            assert check is not None
            check.feed(item)
    assert check is not None and check.finish() == []


async def test_listing_by_end_reason_matches_the_terminal_events_reason(
    store: SqlEventStore,
) -> None:
    """`end_reason` keeps the responses whose terminal event records exactly that reason
    (failed `engine`, cancelled `user`, incomplete `max_output_tokens`), and `completed`
    those that completed; an open one has no end reason."""
    owner = f"reason_{secrets.token_hex(4)}"
    ends = ("completed", "failed", "cancelled", "incomplete", "open")
    ids = {end: await write(store, streams.script(deltas=1, end=end, owner=owner)) for end in ends}

    async def ended(reason: str) -> set[str]:
        return {r.id for r in (await store.list(owner=owner, end_reason=reason, limit=10)).rows}

    assert await ended("completed") == {ids["completed"]}
    assert await ended("engine") == {ids["failed"]}
    assert await ended("user") == {ids["cancelled"]}
    assert await ended("max_output_tokens") == {ids["incomplete"]}
    assert await ended("engin") == set()  # exact, not a prefix
    assert await ended("%") == set()  # a LIKE wildcard is a character
    assert await ended("_ser") == set()
