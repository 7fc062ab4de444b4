"""The in-process hub: who is tailing which stream, the events committed here (handed over
directly), and the doorbell rung for streams moved by other processes.

A subscription's buffer is bounded. When it would overflow, the buffer is dropped and the
subscriber is told to re-read the table instead: a slow reader costs a query, never memory.
The hub only ever receives events after their transaction committed, so whatever it hands
out is also what a replay returns.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from service.ports import StoredEvent


class Subscription:
    """One tailer's mailbox: committed events handed over in-process, and a re-read flag."""

    __slots__ = ("_capacity", "_events", "_reread", "_waiter", "position", "stream_id")

    def __init__(self, stream_id: str, capacity: int) -> None:
        self.stream_id = stream_id
        # The position the tail had yielded up to when it last went to wait; None until its
        # first read of the table is done.
        self.position: int | None = None
        self._capacity = capacity
        self._events: deque[StoredEvent] = deque()
        self._reread = False
        self._waiter: asyncio.Future[bool] | None = None

    def deliver(self, events: Sequence[StoredEvent]) -> None:
        if not self._reread:
            if len(self._events) + len(events) > self._capacity:
                self._events.clear()
                self._reread = True
            else:
                self._events.extend(events)
        self._wake()

    def ring(self) -> None:
        self._reread = True
        self._wake()

    def take(self) -> tuple[list[StoredEvent], bool]:
        """The events handed over so far, and whether the table must be re-read."""
        events = list(self._events)
        self._events.clear()
        reread, self._reread = self._reread, False
        return events, reread

    @property
    def pending(self) -> bool:
        return bool(self._events) or self._reread

    async def wait(self, within: float) -> bool:
        """Wait for a delivery or a ring; False when `within` seconds passed without either.

        A bare future and a timer handle rather than `asyncio.wait_for`, which would start a
        task per wait: tailers wait once per flush each, thousands of times a second.
        """
        if self.pending:
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_later(within, _expire, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


def stream_key(stream_id: str) -> str:
    """A short name for a stream in a doorbell (8 hex digits, so that one notification can
    name some 800 streams). Two streams may share a key; that costs a needless re-read."""
    return format(zlib.crc32(stream_id.encode()), "08x")


class Hub:
    """Routes committed events and doorbells to the subscriptions of this process."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._subs: dict[str, set[Subscription]] = {}
        self._keys: dict[str, set[str]] = {}  # stream_key -> subscribed stream ids
        self._delivered: dict[str, int] = {}  # last position handed out, per subscribed stream

    @contextmanager
    def subscribe(self, stream_id: str) -> Iterator[Subscription]:
        sub = self.open(stream_id)
        try:
            yield sub
        finally:
            self.close(sub)

    def open(self, stream_id: str) -> Subscription:
        """Register a subscription now; `close` it (`subscribe` does both)."""
        sub = Subscription(stream_id, self.capacity)
        subs = self._subs.get(stream_id)
        if subs is None:
            subs = self._subs[stream_id] = set()
            self._keys.setdefault(stream_key(stream_id), set()).add(stream_id)
        subs.add(sub)
        return sub

    def close(self, sub: Subscription) -> None:
        """Unregister `sub` (again is nothing)."""
        stream_id = sub.stream_id
        subs = self._subs.get(stream_id)
        if subs is None or sub not in subs:
            return
        subs.discard(sub)
        if not subs:
            del self._subs[stream_id]
            self._delivered.pop(stream_id, None)
            key = stream_key(stream_id)
            same = self._keys[key]
            same.discard(stream_id)
            if not same:
                del self._keys[key]

    def publish(self, committed: Mapping[str, Sequence[StoredEvent]]) -> None:
        """Hand freshly committed events (by stream, in order) to their subscribers."""
        for stream_id, events in committed.items():
            subs = self._subs.get(stream_id)
            if subs and events:
                last = events[-1].position
                if last > self._delivered.get(stream_id, -1):
                    self._delivered[stream_id] = last
                for sub in subs:
                    sub.deliver(events)

    def ring(self, stream_ids: Iterable[str]) -> None:
        """Streams moved elsewhere: their subscribers re-read the table."""
        for stream_id in stream_ids:
            for sub in self._subs.get(stream_id, ()):
                sub.ring()

    def streams(self, keys: Iterable[str] | None = None) -> list[str]:
        """The subscribed streams (those named by `keys`, if given)."""
        if keys is None:
            return list(self._subs)
        return [sid for key in keys for sid in self._keys.get(key, ())]

    def fetch_point(self, stream_id: str) -> int | None:
        """Where one shared read of `stream_id` should start for this process's tails: past
        what they have been handed or have read. Tails still on their first read are rung
        instead (they re-read when they get to wait); None if that is all of them."""
        subs = self._subs.get(stream_id, ())
        known = [sub.position for sub in subs if sub.position is not None]
        for sub in subs:
            if sub.position is None:
                sub.ring()
        if not known:
            return None
        return max(max(known), self._delivered.get(stream_id, -1))

    def subscribers(self, stream_id: str) -> int:
        return len(self._subs.get(stream_id, ()))

    def tails(self) -> int:
        """How many tails of this process are open now (metrics)."""
        return sum(len(subs) for subs in self._subs.values())
