"""Server-sent events and JSON Lines over a tail of the log.

Each SSE event is `event: <type>\\ndata: <stored JSON>\\n\\n`, the stored bytes as they
are, so a live stream and any later replay are byte-identical. Events that are already
waiting go out together in one write (one syscall per write is the dominant cost of a busy
stream), and a write holds at most `MAX_WRITE` bytes, so a client that stops reading pins
little memory. A frame that fits in one write goes out in one write (writes are packed
with whole frames); only a frame larger than `MAX_WRITE` is cut, into capped writes. A
pump task reads the tail into a small bounded queue, so the writer can send keep-alive
comments while the stream is idle without cancelling the tail mid-read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator

from service.ports import StoredEvent

KEEPALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"
MAX_WRITE = 64 * 1024
_END = object()


def sse_frame(event: StoredEvent) -> bytes:
    return b"event: " + event.type.encode() + b"\ndata: " + event.data + b"\n\n"


def jsonl_line(event: StoredEvent) -> bytes:
    return event.data + b"\n"


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


async def _pump(source: AsyncIterator[StoredEvent], queue: asyncio.Queue[object]) -> None:
    try:
        async for event in source:
            await queue.put(event)
    except Exception as exc:  # handed to the writer, which ends the stream
        await queue.put(exc)
    finally:
        await queue.put(_END)


async def frames(
    source: AsyncGenerator[StoredEvent, None],
    *,
    keepalive_s: float | None,
    frame: Callable[[StoredEvent], bytes] = sse_frame,
    done: bytes | None = DONE,
    on_close: Callable[[bool], None] | None = None,
) -> AsyncIterator[bytes]:
    """Frame a tail for the wire; `on_close(finished)` runs however the stream ends."""
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=64)
    pump = asyncio.create_task(_pump(source, queue))
    finished = ended = False
    try:
        while not ended:
            try:
                item = await asyncio.wait_for(queue.get(), keepalive_s)
            except TimeoutError:
                yield KEEPALIVE
                continue
            chunk: list[bytes] = []
            size = 0
            while True:
                if item is _END:
                    ended = True
                    break
                if isinstance(item, Exception):
                    raise item
                assert isinstance(item, StoredEvent)
                chunk.append(frame(item))
                size += len(chunk[-1])
                finished = item.terminal
                if queue.empty() or size >= MAX_WRITE:
                    break
                item = queue.get_nowait()
            if ended and done is not None:
                chunk.append(done)
            for write in pack(chunk):
                yield write
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pump
        with contextlib.suppress(Exception):  # a tail: drop its subscription now
            await source.aclose()
        if on_close is not None:
            on_close(finished)
