"""SSE framing over a tail: one frame per event, coalesced writes, keep-alives, [DONE]."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from adapters.http.sse import (
    DONE,
    JSONL,
    KEEPALIVE,
    MAX_WRITE,
    OBFUSCATED,
    SSE,
    Last,
    frames,
    jsonl_line,
    pack,
    sse_frame,
)
from adapters.http.turns import PER_TURN
from service.ports import StoredEvent


def event(position: int, kind: str = "response.output_text.delta", pad: int = 0) -> StoredEvent:
    data = f'{{"type":"{kind}","sequence_number":{position},"delta":"{"x" * pad}"}}'.encode()
    return StoredEvent("resp_x", position, kind, data, None, 0.0)


# How often the test's tail says it is idle while it waits (a store's tail: its poll).
TICK = 0.01


async def source(
    events: list[StoredEvent], pause: float = 0.0, per: int = 1
) -> AsyncGenerator[list[StoredEvent], None]:
    """A tail of `events` in batches of `per` (as commits hand them over), each after
    `pause` seconds during which it says, every `TICK`, that it is idle (an empty batch)."""
    for at in range(0, len(events), per):
        waited = 0.0
        while waited < pause:
            await asyncio.sleep(min(TICK, pause - waited))
            waited += TICK
            yield []
        yield events[at : at + per]


async def collect(it: AsyncIterator[bytes]) -> list[bytes]:
    return [chunk async for chunk in it]


def test_a_frame_is_the_event_line_and_the_stored_bytes() -> None:
    e = event(3)
    assert sse_frame(e) == b"event: response.output_text.delta\ndata: " + e.data + b"\n\n"
    assert jsonl_line(e) == e.data + b"\n"


async def test_the_stream_is_every_frame_in_order_then_done() -> None:
    events = [event(i) for i in range(5)] + [event(5, "response.completed")]
    closed: list[bool] = []
    chunks = await collect(frames(source(events), keepalive_s=None, on_close=closed.append))
    assert b"".join(chunks) == b"".join(sse_frame(e) for e in events) + DONE
    assert closed == [True]


async def test_a_batch_goes_out_together_but_no_frame_is_split() -> None:
    events = [event(i) for i in range(200)]
    chunks = await collect(frames(source(events, per=50), keepalive_s=None, done=None))
    assert len(chunks) == 4
    frames_seen = [f for c in chunks for f in c.split(b"\n\n") if f]
    assert all(f.startswith(b"event: ") for f in frames_seen)
    assert b"".join(chunks) == b"".join(sse_frame(e) for e in events)


async def test_an_idle_stream_gets_keepalive_comments() -> None:
    events = [event(0), event(1, "response.completed")]
    chunks = await collect(frames(source(events, pause=0.12), keepalive_s=0.03))
    assert KEEPALIVE in chunks
    assert b"".join(c for c in chunks if c != KEEPALIVE) == (
        sse_frame(events[0]) + sse_frame(events[1]) + DONE
    )


async def test_a_client_that_goes_away_is_reported_unfinished() -> None:
    closed: list[bool] = []
    stream = frames(
        source([event(i) for i in range(1000)], pause=0.001),
        keepalive_s=None,
        on_close=closed.append,
    )
    await stream.__anext__()
    await stream.aclose()  # type: ignore[attr-defined]
    assert closed == [False]


async def test_writes_are_capped_so_a_client_that_stops_reading_holds_little() -> None:
    """Small events are joined up to the cap; an event over it is cut into capped writes."""
    events = [event(i, pad=1000) for i in range(300)]
    events.append(event(300, "response.output_text.done", pad=5 * MAX_WRITE))
    chunks = await collect(frames(source(events, per=301), keepalive_s=None))
    assert max(len(c) for c in chunks) <= MAX_WRITE
    assert len(chunks) >= 300 * 1000 // MAX_WRITE + 5
    assert b"".join(chunks) == b"".join(sse_frame(e) for e in events) + DONE


async def test_a_frame_that_fits_in_one_write_goes_out_in_one_write() -> None:
    """Frames of 1 KB, far more than one write holds: every write is whole frames."""
    events = [event(i, pad=1000) for i in range(300)]
    chunks = await collect(frames(source(events, per=300), keepalive_s=None, done=None))
    assert len(chunks) > 1
    for chunk in chunks:
        assert len(chunk) <= MAX_WRITE
        assert chunk.startswith(b"event: ") and chunk.endswith(b"\n\n")
        assert chunk.count(b"event: ") == chunk.count(b"\n\n")
    assert b"".join(chunks) == b"".join(sse_frame(e) for e in events)


def test_pack_cuts_only_a_frame_larger_than_a_write() -> None:
    small, big = b"a" * 6, b"b" * 25
    assert list(pack([small, small, big, small], cap=10)) == [
        small,
        small,
        b"b" * 10,
        b"b" * 10,
        b"b" * 5,
        small,
    ]
    assert list(pack([b"xy", b"z", b"w"], cap=3)) == [b"xyz", b"w"]


async def test_nothing_is_read_ahead_of_a_writer_that_waits_on_its_client() -> None:
    """A client that stopped reading: the tail is not read past the batch being written,
    however long the log behind it."""
    big = [event(i, pad=100_000) for i in range(40)]
    taken: list[int] = []

    async def counted() -> AsyncGenerator[list[StoredEvent], None]:
        for e in big:
            taken.append(e.position)
            yield [e]

    stream = frames(counted(), keepalive_s=None)
    await stream.__anext__()  # the writer now "waits on its client"
    await asyncio.sleep(0.05)
    assert taken == [0]
    rest = [chunk async for chunk in stream]
    assert len(taken) == 40 and rest


async def test_a_large_event_goes_out_in_pieces_of_its_own_bytes() -> None:
    """An event over a write is cut from its stored bytes (no whole second copy), the
    pieces joined are its frame, and the frames around it are whole."""
    events = [event(0), event(1, pad=3 * MAX_WRITE), event(2, "response.completed")]
    chunks = await collect(frames(source(events), keepalive_s=None, done=None))
    assert max(len(c) for c in chunks) <= MAX_WRITE
    assert b"".join(chunks) == b"".join(sse_frame(e) for e in events)
    assert chunks[0] == sse_frame(events[0]) and chunks[-1] == sse_frame(events[2])
    lines = await collect(frames(source(events), keepalive_s=None, framing=JSONL, done=None))
    assert b"".join(lines) == b"".join(jsonl_line(e) for e in events)


async def test_a_large_event_gives_the_loop_a_turn_between_its_writes() -> None:
    """Other tasks run between the writes of a large event, at least every `PER_TURN` of
    them (the loop's turnstile: a burst of replays of megabyte events does not hold the loop
    for all of their bytes), not between the writes of a stream of small ones."""
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    running = asyncio.create_task(other())
    await asyncio.sleep(0)
    seen: list[int] = []
    large = [event(0, pad=5 * PER_TURN * MAX_WRITE), event(1, "response.completed")]
    async for _ in frames(source(large, per=2), keepalive_s=None, done=None):
        seen.append(turns)
    small = [event(i) for i in range(50)] + [event(50, "response.completed")]
    seen_small: list[int] = []
    async for _ in frames(source(small), keepalive_s=None, done=None):
        seen_small.append(turns)
    running.cancel()
    # head, 5 * PER_TURN full pieces, the rest of the event, its end, the last event
    assert len(seen) == 5 * PER_TURN + 4
    # a turn: at most PER_TURN writes that found room, the one before them, and the head
    assert max(Counter(seen).values()) <= PER_TURN + 2
    assert len(set(seen)) >= 5
    assert len(set(seen_small)) == 1


async def test_a_stream_that_keeps_writing_gets_no_keepalive() -> None:
    """The keep-alive is due `keepalive_s` after the last write, not after each wait."""
    events = [event(i) for i in range(12)] + [event(12, "response.completed")]
    chunks = await collect(frames(source(events, pause=0.02), keepalive_s=0.06))
    assert KEEPALIVE not in chunks
    assert b"".join(chunks) == b"".join(sse_frame(e) for e in events) + DONE


async def test_keepalives_repeat_while_the_tail_is_idle_and_only_then() -> None:
    events = [event(0), event(1, "response.completed")]
    chunks = await collect(frames(source(events, pause=0.2), keepalive_s=0.03))
    assert chunks.count(KEEPALIVE) >= 6  # about one each 30 ms of each 200 ms pause
    assert chunks[-1] == sse_frame(events[1]) + DONE  # and none after the end


async def test_a_tail_that_ends_without_its_terminal_event_is_followed_by_done() -> None:
    """A replay of what is stored now of an unfinished response: its events, then the
    end (`[DONE]` for SSE, nothing for JSON Lines), reported unfinished."""
    events = [event(0), event(1)]
    closed: list[bool] = []
    chunks = await collect(frames(source(events), keepalive_s=None, on_close=closed.append))
    assert chunks == [sse_frame(events[0]), sse_frame(events[1]), DONE]
    assert isinstance(chunks[-1], Last) and closed == [False]
    lines = await collect(frames(source(events), keepalive_s=None, framing=JSONL, done=None))
    assert lines == [jsonl_line(events[0]), jsonl_line(events[1])]


async def test_a_batch_is_framed_whole_and_its_writes_stay_capped() -> None:
    """Batches as a tail hands them over (a commit's events, a page read): the same bytes
    as one by one, packed into writes of at most `MAX_WRITE`, a large event in pieces of
    its own bytes in its place."""
    small = [event(i, pad=900) for i in range(150)]
    large = event(150, pad=MAX_WRITE * 2)
    events = [*small, large, event(151), event(152, "response.completed")]
    for per in (1, 7, 153):
        chunks = await collect(frames(source(events, per=per), keepalive_s=None))
        assert b"".join(chunks) == b"".join(sse_frame(e) for e in events) + DONE
        assert max(map(len, chunks)) <= MAX_WRITE
        assert any(c == large.data[:MAX_WRITE] for c in chunks)  # cut, not copied whole


async def test_the_events_before_a_tails_error_are_written_before_it_is_raised() -> None:
    async def failing() -> AsyncGenerator[list[StoredEvent], None]:
        yield [event(0), event(1)]
        raise RuntimeError("the log jumps")

    written: list[bytes] = []

    async def drain() -> None:
        async for chunk in frames(failing(), keepalive_s=None):
            written.append(chunk)

    with pytest.raises(RuntimeError, match="the log jumps"):
        await drain()
    assert b"".join(written) == sse_frame(event(0)) + sse_frame(event(1))


def test_obfuscation_pads_delta_events_only_to_a_multiple_of_32_bytes_at_random() -> None:
    """OpenAI's `obfuscation` field: on a delta event, random URL-safe characters that bring
    its JSON to a multiple of 32 bytes, a new pad each time; other events as stored."""
    pads = set()
    for size in range(0, 70):
        delta = event(1, pad=size)
        frame = OBFUSCATED.whole(delta)
        head, _, data = frame.removesuffix(b"\n\n").partition(b"data: ")
        assert head == b"event: response.output_text.delta\n"
        payload = json.loads(data)
        assert len(data) % 32 == 0 and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", payload["obfuscation"])
        assert {k: v for k, v in payload.items() if k != "obfuscation"} == json.loads(delta.data)
        pads.add(payload["obfuscation"])
    assert len(pads) == 70
    lengths = {
        len(json.loads(OBFUSCATED.whole(event(1)).split(b"data: ")[1])["obfuscation"])
        for _ in range(64)
    }
    assert len(lengths) == 2  # the bucket's fill, or that and 32 more
    done = event(2, kind="response.output_text.done")
    assert OBFUSCATED.whole(done) == SSE.whole(done)
