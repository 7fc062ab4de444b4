"""Server-sent events and JSON Lines over a tail of the log.

Each SSE event is `event: <type>\\ndata: <stored JSON>\\n\\n`, the stored bytes as they
are, so a live stream and any later replay are byte-identical. Events that are already
waiting go out together in one write (one syscall per write is the dominant cost of a busy
stream), and a write holds at most `MAX_WRITE` bytes, so a client that stops reading pins
little memory. A frame that fits in one write goes out in one write (writes are packed
with whole frames); only a frame larger than `MAX_WRITE` is cut, into capped writes. A
pump task reads the tail into a small bounded queue, so the writer can send keep-alive
comments while the stream is idle without cancelling the tail mid-read. The tail hands its
events over in the batches they arrive in (what a commit handed over, a page read), and
they pass the pump and the queue as batches: a step a batch, not a step an event. One timer a stream
says when a keep-alive is due (`keepalive_s` after the last write), re-armed only when it
fires: a wait for the next event arms no timer of its own, since most streams end long
before one would fire.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import NamedTuple

from service.ports import StoredEvent

KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"
MAX_WRITE = 64 * 1024
# Batches of events the pump may read ahead of a writer that waits on its client: at most
# this many, and past the first, at most this many bytes (event JSON and facts), so that a
# client that stopped reading pins little more than the batch being written (a tail's batch
# is a commit's events or a page, itself capped in bytes: bench/stalled_bench.py).
MAX_QUEUED = 64
MAX_QUEUED_BYTES = 256 * 1024
_END = object()
# A loop may run a timer a little before its time (uvloop's are in whole milliseconds).
_EARLY = 0.005


class Last(bytes):
    """A stream's final write (the end of the body goes out with it: adapters/http/streaming.py)."""


class _Pipe:
    """A queue from the pump to the writer, bounded by count and by bytes; one item always
    fits, however large. Each side sets the other's event only when the other waits on it:
    most items find the other side busy. The writer takes a write's worth of items at once
    (`take`)."""

    def __init__(self, max_items: int = MAX_QUEUED, max_bytes: int = MAX_QUEUED_BYTES) -> None:
        self._items: collections.deque[tuple[object, int]] = collections.deque()
        self._bytes = 0
        self._max_items, self._max_bytes = max_items, max_bytes
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._reading = self._writing = False  # a side waits on its event
        self._nudged = False  # the writer is to wake without an item (a keep-alive is due)

    def _full(self) -> bool:
        return bool(self._items) and (
            len(self._items) >= self._max_items or self._bytes >= self._max_bytes
        )

    def offer(self, item: object, size: int = 0) -> bool:
        """Queue `item` (`size` bytes) unless the pipe is full; whether it was queued. The
        pump's way for each event: no coroutine a put while there is room."""
        if self._full():
            return False
        self._items.append((item, size))
        self._bytes += size
        if self._reading:
            self._readable.set()
        return True

    async def put(self, item: object, size: int = 0) -> None:
        while not self.offer(item, size):
            self._writable.clear()
            self._writing = True
            try:
                await self._writable.wait()
            finally:
                self._writing = False

    async def wait(self) -> bool:
        """Until an item is queued (True), or `nudge` was called while none was (False)."""
        while not self._items:
            if self._nudged:
                self._nudged = False
                return False
            self._readable.clear()
            self._reading = True
            try:
                await self._readable.wait()
            finally:
                self._reading = False
        self._nudged = False  # an item goes out: no keep-alive is needed with it
        return True

    def nudge(self) -> None:
        self._nudged = True
        self._readable.set()

    def take(self, max_bytes: int = MAX_WRITE) -> list[object]:
        """The queued items, in order, up to the first that brings them to `max_bytes` (one
        write's worth; at least one item)."""
        items = self._items
        taken: list[object] = []
        size = 0
        while items and size < max_bytes:
            item, n = items.popleft()
            taken.append(item)
            size += n
        self._bytes -= size
        if self._writing:
            self._writable.set()
        return taken

    def empty(self) -> bool:
        return not self._items


class Framing(NamedTuple):
    """How an event goes on the wire: `head(event)`, its stored JSON, then `tail`."""

    head: Callable[[StoredEvent], bytes]
    tail: bytes

    def whole(self, event: StoredEvent) -> bytes:
        return self.head(event) + event.data + self.tail

    def pieces(self, event: StoredEvent, cap: int = MAX_WRITE) -> Iterator[bytes]:
        """A large event in writes of at most `cap` bytes, cut from its stored JSON without
        copying it whole first (a stalled client pins the event, not a second copy)."""
        view = memoryview(event.data)
        yield self.head(event)
        for start in range(0, len(view), cap):
            yield bytes(view[start : start + cap])
        yield self.tail


SSE = Framing(lambda e: b"event: " + e.type.encode() + b"\ndata: ", b"\n\n")
JSONL = Framing(lambda e: b"", b"\n")


def sse_frame(event: StoredEvent) -> bytes:
    return SSE.whole(event)


def jsonl_line(event: StoredEvent) -> bytes:
    return JSONL.whole(event)


def pack(frames: list[bytes], cap: int = MAX_WRITE) -> Iterator[bytes]:
    """Join whole frames into writes of at most `cap` bytes; cut only a frame over `cap`."""
    batch: list[bytes] = []
    size = 0
    for f in frames:
        if batch and size + len(f) > cap:
            yield b"".join(batch)
            batch, size = [], 0
        if len(f) > cap:
            yield from (f[start : start + cap] for start in range(0, len(f), cap))
            continue
        batch.append(f)
        size += len(f)
    if batch:
        yield b"".join(batch)


class _KeepAlive:
    """When a stream's next keep-alive is due: `seconds` after its last write. One timer,
    armed for that moment; when it fires early (a write came meanwhile) it re-arms for
    the new moment, and when it fires on time it nudges the writer, which sends the
    keep-alive. A write costs a clock read, where a timer per wait cost a timer handle made
    and cancelled for every write (docs/performance.md)."""

    def __init__(self, queue: _Pipe, seconds: float) -> None:
        self._queue = queue
        self._seconds = seconds
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()
        self._timer = self._loop.call_at(self._last + seconds, self._fire)

    def wrote(self) -> None:
        self._last = self._loop.time()

    def due(self) -> bool:
        return self._loop.time() >= self._last + self._seconds - _EARLY

    def _fire(self) -> None:
        if self.due():
            self._queue.nudge()
            at = self._loop.time() + self._seconds  # until the writer has sent it
        else:
            at = self._last + self._seconds
        self._timer = self._loop.call_at(at, self._fire)

    def stop(self) -> None:
        self._timer.cancel()


async def _pump(source: AsyncIterator[list[StoredEvent]], queue: _Pipe) -> None:
    try:
        async for batch in source:
            size = sum([len(e.data) + len(e.facts or b"") for e in batch])
            if not queue.offer(batch, size):
                await queue.put(batch, size)
    except Exception as exc:  # handed to the writer, which ends the stream
        await queue.put(exc)
    finally:
        await queue.put(_END)


def _writes(
    batches: list[list[StoredEvent]], framing: Framing, end: bytes | None
) -> Iterator[bytes]:
    """The writes of `batches`' events, then `end`: whole frames packed into writes of
    up to `MAX_WRITE` bytes, a write's worth framed at a time; an event larger than a write
    goes alone, in pieces of its own bytes (`Framing.pieces`), after what came before it."""
    chunk: list[bytes] = []
    size = 0
    for batch in batches:
        for event in batch:
            if len(event.data) > MAX_WRITE:
                yield from pack(chunk)
                chunk, size = [], 0
                yield from framing.pieces(event)
                continue
            frame = framing.whole(event)
            if chunk and size + len(frame) > MAX_WRITE:
                yield from pack(chunk)
                chunk, size = [], 0
            chunk.append(frame)
            size += len(frame)
    if end is not None:
        chunk.append(end)
    yield from pack(chunk)


async def frames(
    source: AsyncGenerator[list[StoredEvent], None],
    *,
    keepalive_s: float | None,
    framing: Framing = SSE,
    done: bytes | None = DONE,
    on_close: Callable[[bool], None] | None = None,
) -> AsyncIterator[bytes]:
    """Frame a tail for the wire (its events in the batches they arrive in: the store's
    `subscribe_batches`); `on_close(finished)` runs however the stream ends."""
    queue = _Pipe()
    pump = asyncio.create_task(_pump(source, queue))
    keepalive = None if keepalive_s is None else _KeepAlive(queue, keepalive_s)
    finished = ended = False
    try:
        while not ended:
            if queue.empty() and not await queue.wait():
                assert keepalive is not None  # nudged: a keep-alive may be due
                if keepalive.due():
                    yield KEEPALIVE
                    keepalive.wrote()
                continue
            batches: list[list[StoredEvent]] = []
            error: Exception | None = None
            for item in queue.take():
                if type(item) is list:
                    batches.append(item)
                    continue
                if item is _END:  # nothing follows the end, nor the tail's error
                    ended = True
                else:
                    assert isinstance(item, Exception)  # the tail's error
                    error = item
                break
            if batches:
                finished = batches[-1][-1].terminal  # a batch is never empty
            held = None  # the last write is marked when the stream ends with it
            for write in _writes(batches, framing, done if ended else None):
                if held is not None:
                    yield held
                held = write
            if held is not None:
                yield Last(held) if ended else held
            if error is not None:  # what came before it is written
                raise error
            if keepalive is not None:
                keepalive.wrote()
    finally:
        if keepalive is not None:
            keepalive.stop()
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pump
        with contextlib.suppress(Exception):  # a tail: drop its subscription now
            await source.aclose()
        if on_close is not None:
            on_close(finished)
