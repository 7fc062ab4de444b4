"""Live tails under load and across processes: nothing skipped, nothing doubled, nothing
uncommitted."""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import sqlalchemy as sa

from adapters.store.factory import open_store
from adapters.store.postgres import PostgresEventStore
from adapters.store.rows import encode_append, merge
from adapters.store.sql import SqlEventStore
from adapters.store.writer import GroupCommitWriter
from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.errors import Conflict
from domain.events import encode
from domain.fold.replay import replay
from domain.generation import Finished, TextDelta, TokenUsage
from tests.integration import streams

Opener = Callable[..., Awaitable[SqlEventStore]]
WRITERS = 8
STREAMS = 56


def rid_of(appends: list[streams.Append]) -> str:
    return appends[0][1][0].response.id  # type: ignore[attr-defined]


def wire(appends: list[streams.Append]) -> list[tuple[int, bytes]]:
    return [(e.sequence_number, encode(e).data) for e in streams.events_of(appends)]


async def collect(store: SqlEventStore, rid: str, after: int = -1) -> list[tuple[int, bytes]]:
    return [(e.position, e.data) async for e in store.subscribe(rid, after)]


@pytest.fixture
async def extra(store_url: str) -> AsyncIterator[Opener]:
    """Opens more stores on the test's database; all are closed at teardown."""
    opened: list[SqlEventStore] = []

    async def open_(**settings: object) -> SqlEventStore:
        s = await open_store(store_url, **settings)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        await s.close()


@pytest.fixture
async def stores(store_url: str, store: SqlEventStore) -> AsyncIterator[list[SqlEventStore]]:
    """One store per writer (own engine, own hub: separate processes as far as tails can
    tell), the first being the tailers' own store (its writes reach them in-process)."""
    others = [await open_store(store_url, poll_interval=0.2) for _ in range(WRITERS - 1)]
    yield [store, *others]
    for s in others:
        await s.close()


async def _drive(store: SqlEventStore, scripts: list[list[streams.Append]], group: bool) -> None:
    """One writer: interleaves the appends of its streams, with small random pauses."""
    rng = random.Random(len(scripts))
    writer = GroupCommitWriter(store) if group else None
    if writer is not None:
        await writer.start()
    longest = max(len(s) for s in scripts)
    for step in range(longest):
        for appends in scripts:
            if step < len(appends):
                expected, batch = appends[step]
                last = step == len(appends) - 1
                if writer is not None:
                    await writer.append(rid_of(appends), expected, batch, durable=last)
                else:
                    await store.append(rid_of(appends), expected, batch)
        await asyncio.sleep(rng.random() * 0.004)
    if writer is not None:
        await writer.close()


async def test_every_tailer_sees_every_event_once_in_order_under_concurrent_writers(
    stores: list[SqlEventStore],
) -> None:
    """8 writers (half group-committing, half one commit per append, each its own store)
    on 56 streams; a tailer per stream from the start and late joiners on some."""
    tails = stores[0]
    rng = random.Random(7)
    scripts = [
        streams.script(deltas=rng.randint(5, 30), end=rng.choice(["completed", "failed"]))
        for _ in range(STREAMS)
    ]
    early = [asyncio.create_task(collect(tails, rid_of(s))) for s in scripts]
    await asyncio.sleep(0.05)
    writers = [
        asyncio.create_task(_drive(stores[w], scripts[w::WRITERS], group=w % 2 == 0))
        for w in range(WRITERS)
    ]
    await asyncio.sleep(0.02)
    late = {
        i: asyncio.create_task(collect(tails, rid_of(scripts[i]))) for i in range(0, STREAMS, 4)
    }
    async with asyncio.timeout(120):
        await asyncio.gather(*writers)
        seen = await asyncio.gather(*early)
        seen_late = {i: await t for i, t in late.items()}
    for appends, got in zip(scripts, seen, strict=True):
        assert got == wire(appends)
    for i, got in seen_late.items():
        assert got == wire(scripts[i])


async def test_an_open_transaction_is_neither_skipped_nor_seen_by_a_tail(
    store: SqlEventStore, extra: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow transaction holds an uncommitted append on stream S. The tail of S re-reads
    (poll) and yields nothing of it; on PostgreSQL other streams commit and are tailed
    meanwhile; a second writer of S queues behind it and then conflicts; after the commit
    the tail yields the events exactly once."""
    slow = await extra(listen=False)
    contender = await extra(listen=False)
    base = streams.script(deltas=2, end="open")
    rid = rid_of(base)
    for expected, batch in base:
        await store.append(rid, expected, batch)
    state = replay(streams.events_of(base))
    held = emit(state, TextDelta(text="held"))
    rival = emit(state, TextDelta(text="rival"))

    reads = 0
    real_read = store.read_page

    async def counting_read(*args: object, **kwargs: object) -> object:
        nonlocal reads
        reads += 1
        return await real_read(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "read_page", counting_read)
    yielded: list[int] = []

    async def tail() -> None:
        async for event in store.subscribe(rid, after=state.version):
            yielded.append(event.position)

    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_transaction() -> None:
        # Linked into the stream's hash chain as `commit` links a batch before `_write`.
        [batch] = await slow._chained([merge([encode_append(rid, state.version, held.events)])])
        async with slow._begin_write() as conn:
            failed, _ = await slow._write(conn, [batch], time.time(), False)
            assert failed == {}
            entered.set()
            await release.wait()

    holder = asyncio.create_task(slow_transaction())
    async with asyncio.timeout(20):  # a failed write ends `holder` without setting it
        await asyncio.wait(
            {holder, asyncio.create_task(entered.wait())}, return_when="FIRST_COMPLETED"
        )
    if holder.done():
        holder.result()  # raises what the write raised
    assert entered.is_set()
    tailer = asyncio.create_task(tail())
    loser = asyncio.create_task(contender.append(rid, state.version, rival.events))
    if isinstance(store, PostgresEventStore):
        others = [streams.script(deltas=3) for _ in range(5)]
        async with GroupCommitWriter(store) as writer:
            followers = [asyncio.create_task(collect(store, rid_of(o))) for o in others]
            for appends in others:
                for expected, batch in appends:
                    await writer.append(rid_of(appends), expected, batch, durable=False)
        async with asyncio.timeout(20):
            assert [await f for f in followers] == [wire(o) for o in others]
    reads_before = reads
    await asyncio.sleep(0.7)  # a few poll intervals of the tail
    assert reads > reads_before  # it did look
    assert yielded == []
    assert not loser.done()

    release.set()
    await holder
    with pytest.raises(Conflict):
        async with asyncio.timeout(30):
            await loser
    final = finish(held.state, Finished(reason="stop", usage=TokenUsage()), now=1)
    await store.append(rid, held.state.version, final.events)
    async with asyncio.timeout(20):
        await tailer
    assert yielded == list(range(state.version + 1, final.state.version + 1))
    got = await store.read(rid, after=state.version)
    assert [e.data for e in got] == [encode(e).data for e in held.events + final.events]


async def test_a_tail_without_any_doorbell_catches_up_by_polling(extra: Opener) -> None:
    writer_store = await extra(listen=False)
    tail_store = await extra(listen=False, poll_interval=0.1)
    appends = streams.script(deltas=5)
    task = asyncio.create_task(collect(tail_store, rid_of(appends)))
    await asyncio.sleep(0.05)
    for expected, batch in appends:
        await writer_store.append(rid_of(appends), expected, batch)
    async with asyncio.timeout(20):
        assert await task == wire(appends)


async def test_a_slow_subscriber_keeps_a_bounded_buffer_and_misses_nothing(
    extra: Opener,
) -> None:
    s = await extra(tail_buffer=4, poll_interval=0.2)
    appends = streams.script(deltas=60)
    rid = rid_of(appends)
    tail = s.subscribe(rid)
    first_task = asyncio.create_task(anext(tail))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    async with GroupCommitWriter(s) as writer:
        await writer.append(rid, appends[0][0], appends[0][1])
        first = await first_task
        for expected, batch in appends[1:]:
            await writer.append(rid, expected, batch)  # durable: one flush each
            (sub,) = s.hub._subs[rid]
            assert len(sub._events) <= 4
    rest = [(e.position, e.data) async for e in tail]
    assert [(first.position, first.data), *rest] == wire(appends)


# --- PostgreSQL: the doorbell across processes ------------------------------------------------


async def test_a_tail_hears_another_process_through_notify(
    pg_pair: tuple[PostgresEventStore, PostgresEventStore],
) -> None:
    writer_store, tailer = pg_pair
    appends = streams.script(deltas=10)
    task = asyncio.create_task(collect(tailer, rid_of(appends)))
    await asyncio.sleep(0.05)
    async with GroupCommitWriter(writer_store) as writer:
        for expected, batch in appends:
            await writer.append(rid_of(appends), expected, batch, durable=False)
            await asyncio.sleep(0.002)
    async with asyncio.timeout(20):
        assert await task == wire(appends)


async def test_remote_tails_share_one_read_per_doorbell(
    pg_pair: tuple[PostgresEventStore, PostgresEventStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty tails here, another process writing: the doorbells are answered by shared
    catch-up reads, not by a read per tail per notification."""
    writer_store, tailer = pg_pair
    scripts = [streams.script(deltas=12) for _ in range(20)]
    own_reads = 0
    real_read = tailer.read

    async def counting_read(*args: object, **kwargs: object) -> object:
        nonlocal own_reads
        own_reads += 1
        return await real_read(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tailer, "read", counting_read)
    tasks = [asyncio.create_task(collect(tailer, rid_of(s))) for s in scripts]
    await asyncio.sleep(0.1)
    async with GroupCommitWriter(writer_store) as writer:
        for step in range(len(scripts[0])):
            for appends in scripts:
                expected, batch = appends[step]
                await writer.append(rid_of(appends), expected, batch, durable=False)
            await writer.flush()
    async with asyncio.timeout(20):
        seen = await asyncio.gather(*tasks)
    assert seen == [wire(s) for s in scripts]
    assert tailer.catchup.reads >= 1
    assert own_reads <= 3 * len(scripts)  # each tail's first read, and a re-read or two


async def test_the_listener_reconnects_after_its_connection_is_killed(
    pg_pair: tuple[PostgresEventStore, PostgresEventStore],
) -> None:
    writer_store, tailer = pg_pair
    pid = tailer.listener.backend_pid
    assert pid is not None
    async with writer_store.engine.connect() as conn:
        await conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    async with asyncio.timeout(20):
        # Polled: the reconnect may already have happened by the time we would wait.
        while tailer.listener.backend_pid in (pid, None):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    assert tailer.listener.connected.is_set()
    appends = streams.script(deltas=3)
    task = asyncio.create_task(collect(tailer, rid_of(appends)))
    await asyncio.sleep(0.05)
    for expected, batch in appends:
        await writer_store.append(rid_of(appends), expected, batch)
    async with asyncio.timeout(20):
        assert await task == wire(appends)


async def test_events_committed_while_nobody_listened_are_found_on_reconnect(
    pg_pair: tuple[PostgresEventStore, PostgresEventStore],
) -> None:
    """Notifications sent while the listener is down are lost; reconnecting rings every
    subscriber, which re-reads."""
    writer_store, tailer = pg_pair
    appends = streams.script(deltas=3)
    rid = rid_of(appends)
    await writer_store.append(rid, appends[0][0], appends[0][1])
    tail = tailer.subscribe(rid)
    assert (await anext(tail)).position == 0  # type: ignore[arg-type]
    assert (await anext(tail)).position == 1  # type: ignore[arg-type]
    rest = asyncio.create_task(collect_rest(tail))
    await tailer.listener.stop()
    for expected, batch in appends[1:]:
        await writer_store.append(rid, expected, batch)
    await asyncio.sleep(0.1)
    assert not rest.done()
    await tailer.listener.start()
    async with asyncio.timeout(20):
        got = await rest
    assert got == wire(appends)[2:]


async def test_a_tail_and_a_writer_ride_out_killed_connections(
    pg_pair: tuple[PostgresEventStore, PostgresEventStore], pg_url: str
) -> None:
    """Every server connection but ours is terminated mid-stream (as in a failover): the
    writer retries its flush, the tail retries its read, the listener reconnects; the tail
    still yields each event once, in order."""
    writer_store, tailer = pg_pair
    appends = streams.script(deltas=6)
    rid = rid_of(appends)
    task = asyncio.create_task(collect(tailer, rid))
    killer = await open_store(pg_url, listen=False)
    async with GroupCommitWriter(writer_store) as writer:
        for i, (expected, batch) in enumerate(appends):
            if i == 3:
                async with killer.engine.connect() as conn:
                    await conn.execute(
                        sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                        )
                    )
            await writer.append(rid, expected, batch)
    async with asyncio.timeout(30):
        assert await task == wire(appends)
    await killer.close()


async def collect_rest(tail: AsyncIterator[object]) -> list[tuple[int, bytes]]:
    return [(e.position, e.data) async for e in tail]  # type: ignore[attr-defined]


async def test_a_tail_reads_pages_bounded_by_bytes_and_misses_nothing(extra: Opener) -> None:
    """A page stops once it holds `read_page_bytes` (its first row always comes), and the
    tail goes on at once: a slow reader of large events holds about a page, and a replay
    still yields every event once, in order."""
    tail_store = await extra(read_page_bytes=300, poll_interval=5.0)
    appends = streams.script(deltas=40)
    rid = rid_of(appends)
    for expected, batch in appends:
        await tail_store.append(rid, expected, batch)
    page, more = await tail_store.read_page(rid, -1, 1000, 300)
    assert 1 <= len(page) < 10 and more
    sizes = [len(e.data) + len(e.facts or b"") for e in page]
    assert sum(sizes[:-1]) < 300
    last, more = await tail_store.read_page(rid, len(wire(appends)) - 2, 1000, 300)
    assert len(last) == 1 and not more
    async with asyncio.timeout(4):  # well inside the poll interval: no waiting between pages
        assert await collect(tail_store, rid) == wire(appends)


async def test_readers_of_one_stream_share_each_event(store: SqlEventStore) -> None:
    """Two tails of one stream hold the same event objects (one copy of a large log for
    any number of readers), and a row no reader holds any more is read afresh."""
    appends = streams.script(deltas=3)
    rid = rid_of(appends)
    for expected, batch in appends:
        await store.append(rid, expected, batch)
    first, _ = await store.read_page(rid, -1, 1000, 1 << 20)
    second, _ = await store.read_page(rid, -1, 1000, 1 << 20)
    assert all(a is b for a, b in zip(first, second, strict=True))
    data = [e.data for e in first]
    del first, second
    again, _ = await store.read_page(rid, -1, 1000, 1 << 20)
    assert [e.data for e in again] == data


def _counting_page_rows(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch, gate: asyncio.Event
) -> tuple[list[Any], asyncio.Event]:
    """The page queries the store runs from now on (their parameters), and an event set
    once one has run; each hands its rows over only once `gate` is set, so that other
    readers arrive meanwhile."""
    ran: list[Any] = []
    queried = asyncio.Event()
    rows = store._page_rows

    async def counted(params: tuple[str, int, int, int]) -> Any:
        ran.append(params)
        found = await rows(params)
        queried.set()
        await gate.wait()
        return found

    monkeypatch.setattr(store, "_page_rows", counted)
    return ran, queried


async def test_readers_of_one_page_at_once_share_one_read(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of replays of one finished response reads its page from the table once,
    and each gets the page a read of its own would have; a reader that leaves does not
    take the read from the others."""
    appends = streams.script(deltas=3)
    rid = rid_of(appends)
    for expected, batch in appends:
        await store.append(rid, expected, batch)
    gate = asyncio.Event()
    ran, _ = _counting_page_rows(store, monkeypatch, gate)
    leaving = asyncio.create_task(store.read_page(rid, -1, 1000, 1 << 20))
    await asyncio.sleep(0)
    readers = [asyncio.create_task(store.read_page(rid, -1, 1000, 1 << 20)) for _ in range(20)]
    await asyncio.sleep(0.01)
    leaving.cancel()
    gate.set()
    pages = await asyncio.gather(*readers)
    assert len(ran) == 1
    assert all([e.data for e in page] == [d for _, d in wire(appends)] for page, _ in pages)
    assert not any(more for _, more in pages)


async def test_a_shared_read_that_reached_a_live_streams_end_is_not_trusted(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that joins a read of a running stream's last page, which may have begun
    before the reader's latest event was committed, reads for itself."""
    appends = streams.script(deltas=3)
    rid = rid_of(appends)
    for expected, batch in appends[:-1]:
        await store.append(rid, expected, batch)
    gate = asyncio.Event()
    ran, queried = _counting_page_rows(store, monkeypatch, gate)
    first = asyncio.create_task(store.read_page(rid, -1, 1000, 1 << 20))
    await queried.wait()  # its query has run; it waits at the gate
    await store.append(rid, *appends[-1])
    second = asyncio.create_task(store.read_page(rid, -1, 1000, 1 << 20))
    await asyncio.sleep(0.01)
    gate.set()
    (second_page, _), (first_page, _) = await asyncio.gather(second, first)
    assert len(first_page) < len(second_page)
    assert len(ran) == 2
    assert [e.data for e in second_page] == [d for _, d in wire(appends)]


# --- a new stream's tail, taken before its first append ----------------------------------


def _counting_reads(store: SqlEventStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The positions the store's tails read the table after, from now on."""
    reads: list[int] = []
    read = store._tail_read

    async def counted(stream_id: str, after: int, limit: int) -> tuple[list[Any], bool]:
        reads.append(after)
        return await read(stream_id, after, limit)

    monkeypatch.setattr(store, "_tail_read", counted)
    return reads


async def test_a_new_streams_tail_is_handed_what_this_process_commits_without_a_read(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taken before the stream's first append (a streaming create's), the tail is
    registered at once: every event comes from the commits, none from the table."""
    reads = _counting_reads(store, monkeypatch)
    appends = streams.script(deltas=20)
    rid = rid_of(appends)
    tail = store.subscribe(rid, new=True)
    async with GroupCommitWriter(store) as writer:
        for expected, batch in appends:
            await writer.append(rid, expected, batch, durable=False)
    async with asyncio.timeout(20):
        got = [(e.position, e.data) async for e in tail]
    assert got == wire(appends)
    assert reads == []
    assert store.hub.subscribers(rid) == 0


async def test_a_new_streams_tail_still_reads_what_another_process_commits(
    extra: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is handed to it from another process's commits: it reads them (after the
    doorbell on PostgreSQL, after a poll on SQLite), and misses nothing."""
    tails = await extra(poll_interval=0.1)
    other = await extra()
    reads = _counting_reads(tails, monkeypatch)
    appends = streams.script(deltas=10)
    rid = rid_of(appends)
    tail = tails.subscribe(rid, new=True)
    task = asyncio.create_task(_gather(tail))
    for expected, batch in appends:
        await other.append(rid, expected, batch)
    async with asyncio.timeout(20):
        assert await task == wire(appends)
    # It had to read: its own, or PostgreSQL's shared catch-up read for the doorbell.
    shared = tails.catchup.reads if isinstance(tails, PostgresEventStore) else 0
    assert reads or shared


async def _gather(tail: AsyncIterator[Any]) -> list[tuple[int, bytes]]:
    return [(e.position, e.data) async for e in tail]


@pytest.mark.parametrize("batches", [False, True], ids=["events", "batches"])
async def test_a_new_streams_tail_never_iterated_is_unregistered_when_dropped(
    store: SqlEventStore, batches: bool
) -> None:
    """A create refused after its tail was taken closes the tail before iterating it,
    which runs none of the generator's code: the registration goes when the tail does."""
    rid = streams.new_id()
    tail = store.subscribe_batches(rid, new=True) if batches else store.subscribe(rid, new=True)
    assert store.hub.subscribers(rid) == 1
    await tail.aclose()
    del tail
    gc.collect()
    assert store.hub.subscribers(rid) == 0


async def test_a_tail_in_batches_hands_over_each_commit_as_one_batch(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new stream's tail in batches (a streaming create's): each commit of this process
    comes as one batch, its events in order, and nothing is read from the table."""
    reads = _counting_reads(store, monkeypatch)
    appends = streams.script(deltas=6)
    rid = rid_of(appends)
    tail = store.subscribe_batches(rid, new=True)
    async with GroupCommitWriter(store) as writer, asyncio.timeout(20):
        for expected, batch in appends:
            await writer.append(rid, expected, batch)
            handed = await anext(tail)
            assert [e.position for e in handed] == [e.sequence_number for e in batch]
        assert [b async for b in tail] == []  # it ended with the terminal event
    assert reads == []
    assert store.hub.subscribers(rid) == 0


async def test_a_tail_in_batches_reads_the_table_a_page_a_batch(extra: Opener) -> None:
    """A tail that starts behind reads the table in pages, each a batch, and then goes
    on live: the same events, once each, as one by one."""
    store = await extra(read_page=7, poll_interval=5.0)
    appends = streams.script(deltas=30)
    rid = rid_of(appends)
    for expected, batch in appends:
        await store.append(rid, expected, batch)
    async with asyncio.timeout(20):
        batches = [b async for b in store.subscribe_batches(rid, after=2)]
    assert [len(b) for b in batches[:-1]] == [7] * (len(batches) - 1)
    assert 0 < len(batches[-1]) <= 7
    assert [(e.position, e.data) for b in batches for e in b] == wire(appends)[3:]


async def test_an_idle_tail_says_so_at_each_poll_and_its_events_are_unchanged(
    extra: Opener,
) -> None:
    """While nothing happens a tail in batches yields an empty one at each poll timeout
    (what its reader sends keep-alives on); one by one, the same tail yields only events."""
    store = await extra(poll_interval=0.05)
    appends = streams.script(deltas=2, end="open")
    rid = rid_of(appends)
    for expected, batch in appends:
        await store.append(rid, expected, batch)
    tail = store.subscribe_batches(rid)
    async with asyncio.timeout(10):
        first = await anext(tail)
        idle = [await anext(tail) for _ in range(3)]
    await tail.aclose()
    assert [(e.position, e.data) for e in first] == wire(appends)
    assert idle == [[], [], []]
    events = store.subscribe(rid)
    async with asyncio.timeout(10):
        got = [await anext(events) for _ in first]
    assert [(e.position, e.data) for e in got] == wire(appends)
    with pytest.raises(TimeoutError):  # several polls pass: nothing, not even an empty batch
        async with asyncio.timeout(0.3):
            await anext(events)
    await events.aclose()
