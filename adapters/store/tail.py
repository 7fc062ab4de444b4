"""Live tail of one stream: every committed event after a position, exactly once, in order,
until the terminal event.

The algorithm (docs/storage.md): register with the hub *first*, then read the table by
position; afterwards use events handed over in-process when they continue the sequence
exactly, and re-read the table whenever there is any doubt: a doorbell from another process,
a gap, an overflowed buffer, or a poll timeout (a notification can always be lost). Reading
`position > last` of one stream cannot skip: positions are dense and a stream has one writer,
so position n+1 never commits before position n.

A tail says when it is idle: an empty batch after each poll timeout, and between the tries
of a read that failed (the database unreachable: it is waited out here, with backoff). So
its reader hears from it at least every `poll_interval` or so, and a writer to the wire
sends its keep-alives then, reading the tail in its own task (adapters/http/sse.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from contextlib import contextmanager

from adapters.store.hub import Hub, Subscription
from domain.errors import CorruptEvent, StoreUnavailable
from service.ports import StoredEvent

log = logging.getLogger(__name__)

# The first wait before a failed read is tried again; it doubles up to `poll_interval`.
RETRY_AFTER = 0.05

# (stream, after, limit) -> (a page of events, whether more may follow it now)
ReadFn = Callable[[str, int, int], Awaitable[tuple[list[StoredEvent], bool]]]
EndedFn = Callable[[str, int], Awaitable[bool]]


class _Cursor:
    """What the tail has yielded so far."""

    __slots__ = ("done", "last")

    def __init__(self, after: int) -> None:
        self.last = after
        self.done = False

    def accept(self, event: StoredEvent) -> bool:
        """Whether `event` is the next one; a duplicate or a gap is refused."""
        if event.position != self.last + 1:
            return False
        self.last = event.position
        self.done = event.terminal
        return True


@contextmanager
def _subscribed(hub: Hub, stream_id: str, opened: Subscription | None) -> Iterator[Subscription]:
    if opened is None:
        with hub.subscribe(stream_id) as sub:
            yield sub
        return
    try:
        yield opened
    finally:
        hub.close(opened)


def _hole(stream_id: str, missing: int, found: int) -> CorruptEvent:
    # Committed rows of one stream are dense (the guard), so a jump is a damaged log, not
    # an uncommitted row: say so rather than wait for it forever.
    return CorruptEvent(stream_id, missing, f"missing; the log jumps to position {found}")


async def follow(
    stream_id: str,
    after: int,
    *,
    hub: Hub,
    read: ReadFn,
    ended: EndedFn,
    poll_interval: float,
    page: int,
    opened: Subscription | None = None,
) -> AsyncGenerator[list[StoredEvent], None]:
    """The tail loop; `read` pages the table, `ended` says the stream ended at or before.
    A hole in the table raises `CorruptEvent` naming the missing position, after the
    events before it. A read that raises `StoreUnavailable` is tried again after a wait.

    The events come in the batches they arrive in: a page read from the table, or what
    commits of this process handed over. A writer to the wire then takes one step a batch
    where it would take one an event (a create's 16 events arrive in a handful of commits;
    docs/performance.md); `each` gives them one by one. An empty batch says the tail is
    idle (see the module's doc).

    `opened`: a subscription registered before any event after `after` could commit (a
    new stream's, before its first commit). Everything this process commits after that is
    handed to it, so the tail starts by waiting rather than reading the table; whatever
    else happens (a doorbell, a gap, an overflow, a poll timeout) re-reads as always."""
    cursor = _Cursor(after)
    delay = RETRY_AFTER
    with _subscribed(hub, stream_id, opened) as sub:
        reread = check_end = opened is None
        while True:
            if reread:
                try:
                    rows, more = await read(stream_id, cursor.last, page)
                except StoreUnavailable as exc:  # waited out: it resumes from where it was
                    log.warning("tail of %s: read failed (%s); retrying", stream_id, exc)
                    yield []
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, poll_interval)
                    continue
                delay = RETRY_AFTER
                for i, event in enumerate(rows):
                    if not cursor.accept(event):
                        if i:
                            yield rows[:i]
                        raise _hole(stream_id, cursor.last + 1, event.position)
                    if cursor.done:
                        yield rows[: i + 1]
                        return
                if rows:
                    yield rows
                if more:
                    continue
                if not rows and check_end and await ended(stream_id, cursor.last):
                    return
            sub.position = cursor.last
            woke = await sub.wait(poll_interval)
            if not woke:
                yield []  # idle for `poll_interval`
            handed, reread = sub.take()
            fresh: list[StoredEvent] = []
            for event in handed:
                if event.position <= cursor.last:
                    continue
                if not cursor.accept(event):
                    reread = True
                    break
                fresh.append(event)
                if cursor.done:
                    break
            if fresh:
                yield fresh
            if cursor.done:
                return
            # A poll timeout re-reads (and asks whether the stream already ended, for a tail
            # that started past a terminal event that it will therefore never see).
            check_end = not woke
            reread = reread or not woke


async def each(
    batches: AsyncGenerator[list[StoredEvent], None],
) -> AsyncGenerator[StoredEvent, None]:
    """The events of `batches`, one by one; closing this closes them."""
    try:
        async for batch in batches:
            for event in batch:
                yield event
    finally:
        await batches.aclose()
