"""Shared catch-up reads for doorbells from other processes: when a notification names
streams that tails here are following, one query fetches what is new on all of them and
the hub hands it out as if it had been committed here.

Without it every woken tail would re-read its own stream: with hundreds of remote tails and
a flush every few milliseconds, hundreds of queries per flush. This is an optimisation
only; a tail still re-reads by itself whenever what it is handed does not continue its
sequence, and still polls.

Reads overlap, a few at a time, but a stream is in at most one read at once: its next read
starts from what the one before handed out (`Hub.fetch_point`), so two reads of the same
stream in flight would fetch the same rows twice. A doorbell for streams that no read in
flight holds starts a read of them at once rather than waiting behind a large one; streams
named again while their read is in flight wait for it and go into the next.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from itertools import groupby
from operator import attrgetter

from adapters.store.hub import Hub
from service.ports import StoredEvent
from service.work.tasks import stop_task

log = logging.getLogger(__name__)

FetchFn = Callable[[Sequence[tuple[str, int]], int], Awaitable[list[StoredEvent]]]

# Reads in flight at once, and how many streams a read must have for it to be split among
# the free ones: a doorbell that names hundreds of streams is read as a few queries that
# run side by side (the database works on one while this process hands out another's
# rows), while small doorbells stay one query each.
CONCURRENCY = 3
SPLIT_AT = 64

_position = attrgetter("position")
_stream = attrgetter("stream_id")


class CatchUp:
    """Coalesces the streams named by doorbells and reads them together: up to
    `concurrency` queries in flight, each stream in at most one of them."""

    def __init__(
        self,
        hub: Hub,
        fetch: FetchFn,
        *,
        limit: int = 1000,
        concurrency: int = CONCURRENCY,
        split_at: int = SPLIT_AT,
    ) -> None:
        """`fetch(points, limit)` returns up to `limit` events after each (stream, position)."""
        self._hub = hub
        self._fetch = fetch
        self._limit = limit
        self._concurrency = max(1, concurrency)
        self._split_at = max(1, split_at)
        self._pending: set[str] = set()  # named, not yet in a read
        self._reading: set[str] = set()  # in a read in flight
        self._inflight: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.reads = 0  # shared reads (queries) so far

    def want(self, stream_ids: Iterable[str]) -> None:
        self._pending.update(stream_ids)
        if self._pending:
            self._wake.set()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="resplog-catchup")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)
        reads, self._inflight = self._inflight, set()
        for read in reads:
            await stop_task(read)
        self._reading.clear()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._start_reads()

    def _start_reads(self) -> None:
        """Start reads of the pending streams that no read in flight holds, as many as
        there are free slots (the rest stay pending: a finished read wakes the loop)."""
        free = self._concurrency - len(self._inflight)
        if free <= 0 or not self._pending:
            return
        ready = self._pending - self._reading
        if not ready:
            return
        self._pending -= ready
        points = [(sid, p) for sid in ready if (p := self._hub.fetch_point(sid)) is not None]
        if not points:
            return
        parts = max(1, min(free, len(points) // self._split_at))
        size = -(-len(points) // parts)
        for start in range(0, len(points), size):
            chunk = points[start : start + size]
            self._reading.update(sid for sid, _ in chunk)
            read = asyncio.create_task(self._read(chunk), name="resplog-catchup-read")
            self._inflight.add(read)

    async def _read(self, points: list[tuple[str, int]]) -> None:
        try:
            await self._read_once(points)
        finally:
            self._reading.difference_update(sid for sid, _ in points)
            task = asyncio.current_task()
            if task is not None:
                self._inflight.discard(task)
            if self._pending:
                self._wake.set()  # streams that waited for this read, or for a free slot

    async def _read_once(self, points: list[tuple[str, int]]) -> None:
        try:
            rows = await self._fetch(points, self._limit)
        except Exception as exc:  # the tails re-read by themselves instead
            log.warning("shared catch-up read failed (%s); tails re-read", exc)
            self._hub.ring(sid for sid, _ in points)
            return
        self.reads += 1
        # The rows come stream by stream (one index scan each), so grouping runs of equal
        # streams and sorting each (already in order: one pass) both stay in C.
        grouped: dict[str, list[StoredEvent]] = {}
        for sid, run in groupby(rows, key=_stream):
            events = grouped.get(sid)
            if events is None:
                grouped[sid] = list(run)
            else:
                events.extend(run)
        for events in grouped.values():
            events.sort(key=_position)
        self._hub.publish(grouped)
        # A stream that filled its limit has more: go again from its new position.
        self.want(sid for sid, events in grouped.items() if len(events) >= self._limit)
