"""Server-sent events and JSON Lines over a tail of the log.

Each SSE event is `event: <type>\\ndata: <stored JSON>\\n\\n`, the stored bytes as they
are, so a live stream and any later replay are byte-identical. The tail hands its events
over in the batches they arrive in (what the commits handed over, a page read), and a batch
goes out together (one syscall per write is the dominant cost of a busy stream), in writes
of at most `MAX_WRITE` bytes, so a client that stops reading pins little memory. A frame
that fits in one write goes out in one write (writes are packed with whole frames); only a
frame larger than `MAX_WRITE` is cut, into capped writes.

The writer reads the tail in its own task, a batch at a time, and only when its client has
taken the previous write: nothing is read ahead of a client that stopped reading. The tail
says when it is idle (an empty batch at least every poll interval or so:
adapters/store/tail.py), and that is when a keep-alive comment goes out if one is due
(`keepalive_s` after the last write). So a stream needs no task, queue or timer besides its
writer's: most streams end long before a keep-alive would be due.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import NamedTuple

from adapters.http.turns import turnstile
from service.ports import StoredEvent

KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"
MAX_WRITE = 64 * 1024
# After a large write (half of `MAX_WRITE` or more) a stream takes a place in the loop's
# turn (adapters/http/turns.py) before its next: the transport takes writes without
# waiting for as long as the kernel does, so a stream of megabyte events would otherwise
# write them in one step, and a burst of such streams (replays that start at once:
# docs/performance.md, "Stalled readers") held every other request, `/health` too, until
# all had written theirs. A stream of small events rarely waits here.


class Last(bytes):
    """A stream's final write (the end of the body goes out with it: adapters/http/streaming.py)."""


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
    """When a stream's next keep-alive is due: `seconds` after its last write. Looked at
    when the tail says it is idle; a write costs a clock read."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()

    def wrote(self) -> None:
        self._last = self._loop.time()

    def due(self) -> bool:
        return self._loop.time() >= self._last + self._seconds


def _writes(batch: list[StoredEvent], framing: Framing, end: bytes | None) -> Iterator[bytes]:
    """The writes of `batch`'s events, then `end`: whole frames packed into writes of up to
    `MAX_WRITE` bytes, a write's worth framed at a time; an event larger than a write goes
    alone, in pieces of its own bytes (`Framing.pieces`), after what came before it."""
    chunk: list[bytes] = []
    size = 0
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
    `subscribe_batches`); `done` after its end; `on_close(finished)` runs however the
    stream ends. The stream's final write is a `Last`: after the batch that holds the
    terminal event (a tail ends with it), or `done` alone when the tail ends without one."""
    keepalive = None if keepalive_s is None else _KeepAlive(keepalive_s)
    finished = False
    try:
        async for batch in source:
            if not batch:  # the tail is idle
                if keepalive is not None and keepalive.due():
                    yield KEEPALIVE
                    keepalive.wrote()
                continue
            finished = batch[-1].terminal
            held = None  # the last write of the stream is marked
            for write in _writes(batch, framing, done if finished else None):
                if held is not None:
                    yield held
                    if len(held) >= MAX_WRITE // 2:  # a turn for the others: see `MAX_WRITE`
                        turns = turnstile()
                        if not turns.room():
                            await turns.wait()
                held = write
            if held is not None:
                yield Last(held) if finished else held
            if finished:
                break
            if keepalive is not None:
                keepalive.wrote()
        else:
            if done is not None:
                yield Last(done)
    finally:
        with contextlib.suppress(Exception):  # a tail: drop its subscription now
            await source.aclose()
        if on_close is not None:
            on_close(finished)
