"""Server-sent events and JSON Lines over a tail of the log.

Each SSE event is `event: <type>\\ndata: <stored JSON>\\n\\n`, the stored bytes as they
are, so a live stream and any later replay are byte-identical; on OpenAI's own routes a
delta event also carries OpenAI's `obfuscation` pad unless the client turned it off
(`OBFUSCATED`: the one field that is not the log's). The tail hands its events
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
import base64
import contextlib
import os
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
    """How an event goes on the wire: `head(event)`, its stored JSON (or `body(event)`, the
    stored JSON with a field of the wire's own), then `tail`."""

    head: Callable[[StoredEvent], bytes]
    tail: bytes
    body: Callable[[StoredEvent], bytes] | None = None

    def whole(self, event: StoredEvent) -> bytes:
        data = event.data if self.body is None else self.body(event)
        return self.head(event) + data + self.tail

    def pieces(self, event: StoredEvent, cap: int = MAX_WRITE) -> Iterator[bytes]:
        """A large event in writes of at most `cap` bytes, cut from its stored JSON without
        copying it whole first (a stalled client pins the event, not a second copy)."""
        view = memoryview(event.data if self.body is None else self.body(event))
        yield self.head(event)
        for start in range(0, len(view), cap):
            yield bytes(view[start : start + cap])
        yield self.tail


SSE = Framing(lambda e: b"event: " + e.type.encode() + b"\ndata: ", b"\n\n")
JSONL = Framing(lambda e: b"", b"\n")

# OpenAI's stream obfuscation (openai-python `types/responses/response_create_params.py`
# `StreamOptions.include_obfuscation`, `response_retrieve_params.py`; the field itself is
# `obfuscation` on the delta events, `response_shell_call_command_delta_event.py`): random
# characters on every delta event, so that the size of an encrypted event does not tell an
# observer of the traffic the size of the text it carries. Here the pad brings the event's
# JSON to a multiple of `_PAD_TO` bytes and adds 0 or `_PAD_TO` more, at random: the size
# an observer sees says the text's length only to within 32 bytes, and not which of two
# sizes. URL-safe base64 of random bytes: letters, digits, `-` and `_`, none of which JSON
# escapes. The pad is the wire's, not the log's: never stored, a new one on each delivery.
_PAD_TO = 32
_PAD_FIELD = b',"obfuscation":"'


class _Pads:
    """Random pad characters and choices, drawn from a block of `os.urandom` that is
    refilled when used up: one system call for some fifty events. Framing a text delta
    takes about 2.2 µs padded against 0.6 µs as stored (`timeit` of `OBFUSCATED.whole` and
    `SSE.whole`); with a `secrets` call per event it took several times that."""

    _BLOCK = 3072  # random bytes: 4096 characters of base64

    def __init__(self) -> None:
        self._text = b""
        self._at = 0

    def take(self, size: int) -> tuple[bytes, int]:
        """`size` random characters, and one random bit."""
        if self._at + size + 1 > len(self._text):
            self._text = base64.urlsafe_b64encode(os.urandom(self._BLOCK))
            self._at = 0
        at = self._at
        self._at += size + 1
        return self._text[at + 1 : at + 1 + size], self._text[at] & 1


_pads = _Pads()


def _padded(event: StoredEvent) -> bytes:
    data = event.data
    if not event.type.endswith(".delta") or data[-1:] != b"}":
        return data
    bare = len(data) + len(_PAD_FIELD) + 1  # the field, its closing quote, without a pad
    fill = 1 + (-(bare + 1)) % _PAD_TO
    pad, more = _pads.take(fill + _PAD_TO)
    return data[:-1] + _PAD_FIELD + pad[: fill + _PAD_TO * more] + b'"}'


OBFUSCATED = SSE._replace(body=_padded)


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
