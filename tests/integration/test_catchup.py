"""The shared catch-up reads on PostgreSQL, with another process's writes: reads overlap for
streams that no read in flight holds, a stream is never in two reads at once, and every
tail still sees every event once, in order; blob references come back resolved. The store
and its database are real; only the timing of the reads is held up, by wrapping the
store's own fetch."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import random
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from adapters.store.factory import open_store
from adapters.store.postgres import PostgresEventStore
from adapters.store.writer import GroupCommitWriter
from domain.commands import create
from domain.errors import StoreError, StoreUnavailable
from domain.events import RequestFacts, encode
from domain.objects import InputImage, InputMessage, ResponseObject
from service.ports import StoredEvent
from tests.integration import streams

Points = Sequence[tuple[str, int]]


def rid_of(appends: list[streams.Append]) -> str:
    return appends[0][1][0].response.id  # type: ignore[attr-defined]


def wire(appends: list[streams.Append]) -> list[tuple[int, bytes]]:
    return [(e.sequence_number, encode(e).data) for e in streams.events_of(appends)]


class Watched:
    """The tailer's fetch, wrapped: which streams each read in flight holds (a stream in
    two at once fails the test), and a gate that holds up the reads of chosen streams."""

    def __init__(self, store: PostgresEventStore) -> None:
        self.fetch = store.catchup._fetch
        self.reading: dict[str, int] = {}
        self.overlaps: list[str] = []
        self.in_flight = 0
        self.most_at_once = 0  # reads in flight at once
        self.held: set[str] = set()
        self.gate = asyncio.Event()
        self.jitter = 0.0
        self.rng = random.Random(7)
        store.catchup._fetch = self

    async def __call__(self, points: Points, limit: int) -> list[StoredEvent]:
        sids = [sid for sid, _ in points]
        for sid in sids:
            if self.reading.get(sid):
                self.overlaps.append(sid)
            self.reading[sid] = self.reading.get(sid, 0) + 1
        self.in_flight += 1
        self.most_at_once = max(self.most_at_once, self.in_flight)
        try:
            if self.held.intersection(sids):
                await self.gate.wait()
            if self.jitter:
                await asyncio.sleep(self.rng.random() * self.jitter)
            return await self.fetch(points, limit)
        finally:
            self.in_flight -= 1
            for sid in sids:
                self.reading[sid] -= 1


async def collect(store: PostgresEventStore, rid: str, into: list[tuple[int, bytes]]) -> None:
    async for event in store.subscribe(rid):
        into.append((event.position, event.data))


async def write(writer: GroupCommitWriter, appends: list[streams.Append], steps: range) -> None:
    for step in steps:
        expected, batch = appends[step]
        await writer.append(rid_of(appends), expected, batch, durable=False)
    await writer.flush()


async def until(condition: Any, within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110  (conditions of several kinds)
            await asyncio.sleep(0.01)


async def test_a_slow_read_does_not_hold_up_the_doorbell_of_other_streams(
    pg_pair: tuple[PostgresEventStore, PostgresEventStore],
) -> None:
    writer_store, tailer = pg_pair
    slow, quick = streams.script(deltas=6), streams.script(deltas=6)
    watched = Watched(tailer)
    watched.held.add(rid_of(slow))
    got_slow: list[tuple[int, bytes]] = []
    got_quick: list[tuple[int, bytes]] = []
    tasks = [
        asyncio.create_task(collect(tailer, rid_of(slow), got_slow)),
        asyncio.create_task(collect(tailer, rid_of(quick), got_quick)),
    ]
    await asyncio.sleep(0.2)  # both tails have read the (empty) table and wait
    async with GroupCommitWriter(writer_store) as writer:
        await write(writer, slow, range(0, 3))
        await until(lambda: watched.reading.get(rid_of(slow)))  # its read is held up
        await write(writer, quick, range(0, 4))
        await until(lambda: len(got_quick) == sum(len(b) for _, b in quick[:4]))
        # More for the held stream while its read is in flight: they wait for it, in the
        # next read, not in a second read of the same stream.
        await write(writer, slow, range(3, 5))
        await asyncio.sleep(0.2)
        assert got_slow == []
        assert watched.overlaps == []
        watched.gate.set()
        await write(writer, slow, range(5, len(slow)))
        await write(writer, quick, range(4, len(quick)))
    async with asyncio.timeout(20):
        await asyncio.gather(*tasks)
    assert got_slow == wire(slow)
    assert got_quick == wire(quick)
    assert watched.overlaps == []
    assert watched.most_at_once == 2


async def test_overlapping_reads_hand_every_tail_each_event_once_in_order(
    pg_pair: tuple[PostgresEventStore, PostgresEventStore],
) -> None:
    """Many streams, reads of random length, doorbells ringing all the while: no stream is
    read twice at once, and each tail gets its stream exactly."""
    writer_store, tailer = pg_pair
    tailer.catchup._split_at = 4  # split even these few streams among the free slots
    scripts = [streams.script(deltas=15) for _ in range(24)]
    watched = Watched(tailer)
    watched.jitter = 0.03
    got: list[list[tuple[int, bytes]]] = [[] for _ in scripts]
    tasks = [
        asyncio.create_task(collect(tailer, rid_of(s), into))
        for s, into in zip(scripts, got, strict=True)
    ]
    await asyncio.sleep(0.2)
    rng = random.Random(3)
    async with GroupCommitWriter(writer_store) as writer:
        for step in range(len(scripts[0])):
            # Each step in three flushes of shuffled streams: doorbells name different sets.
            order = rng.sample(scripts, k=len(scripts))
            for part in (order[:8], order[8:16], order[16:]):
                for appends in part:
                    expected, batch = appends[step]
                    await writer.append(rid_of(appends), expected, batch, durable=False)
                await writer.flush()
                await asyncio.sleep(rng.random() * 0.01)
    async with asyncio.timeout(30):
        await asyncio.gather(*tasks)
    assert got == [wire(s) for s in scripts]
    assert watched.overlaps == []
    assert watched.most_at_once > 1  # the reads did overlap
    assert tailer.catchup.reads > 1


async def test_a_remote_tail_gets_the_blobs_put_back(
    pg_pair: tuple[PostgresEventStore, PostgresEventStore],
) -> None:
    """An image over the inline threshold is stored once and referred to from the log's
    facts; the shared read (straight from asyncpg) puts it back."""
    writer_store, tailer = pg_pair
    image = "data:image/png;base64," + base64.b64encode(os.urandom(8 * 1024)).decode()
    rid = streams.new_id()
    response = ResponseObject(id=rid, created_at=1, status="in_progress", model="m")
    message = InputMessage(id=f"msg_{rid}", role="user", content=[InputImage(image_url=image)])
    decision = create(response, RequestFacts(owner="owner_a", input=[message]))
    got: list[StoredEvent] = []

    async def tail() -> None:
        async for event in tailer.subscribe(rid):
            got.append(event)
            if len(got) == len(decision.events):
                return

    task = asyncio.create_task(tail())
    await asyncio.sleep(0.2)
    reads = tailer.catchup.reads
    await writer_store.append(rid, -1, decision.events)
    async with asyncio.timeout(20):
        await task
    assert tailer.catchup.reads > reads  # it came by the shared read
    sent = [encode(e) for e in decision.events]
    assert [(e.data, e.facts) for e in got] == [(s.data, s.facts) for s in sent]
    assert any(e.facts and image.encode() in e.facts for e in got)


async def test_the_raw_read_owns_its_errors_and_drops_a_dead_connection(pg_url: str) -> None:
    """The shared read runs on asyncpg itself, yet leaves the store as the project's errors,
    classified as through SQLAlchemy: a killed connection is at worst `StoreUnavailable`
    (and is not pooled again: the next read works), a value the database refuses is
    `StoreError`."""
    store = await open_store(pg_url, pool_size=1, max_overflow=0, listen=False)
    assert isinstance(store, PostgresEventStore)
    try:
        assert await store.read_many([(streams.new_id(), -1)], 10) == []
        async with store.raw.connection() as conn:  # the pool's one connection
            pid = await conn.fetchval("SELECT pg_backend_pid()")
        admin = await asyncpg.connect(pg_url.replace("+asyncpg", ""))
        try:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        # The pool may have heard the connection go and made another (the read works);
        # else the read finds it lost: a transient error, and the connection is not kept.
        with contextlib.suppress(StoreUnavailable):
            await store.read_many([(streams.new_id(), -1)], 10)
        assert await store.read_many([(streams.new_id(), -1)], 10) == []
        with pytest.raises(StoreError) as refused:
            await store.read_many([(streams.new_id(), 2**40)], 10)  # not an int4
        assert not isinstance(refused.value, StoreUnavailable)
        assert await store.read_many([(streams.new_id(), -1)], 10) == []
    finally:
        await store.close()
