"""Shared catch-up reads for doorbells from other processes: when a notification names
streams that tails here are following, one query fetches what is new on all of them and
the hub hands it out as if it had been committed here.

Without it every woken tail would re-read its own stream: with hundreds of remote tails and
a flush every few milliseconds, hundreds of queries per flush. This is an optimisation
only; a tail still re-reads by itself whenever what it is handed does not continue its
sequence, and still polls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from adapters.store.hub import Hub
from service.ports import StoredEvent
from service.tasks import stop_task

log = logging.getLogger(__name__)

FetchFn = Callable[[Sequence[tuple[str, int]], int], Awaitable[list[StoredEvent]]]


class CatchUp:
    """Coalesces the streams named by doorbells and reads them together, one query at a
    time (doorbells that ring meanwhile join the next one)."""

    def __init__(self, hub: Hub, fetch: FetchFn, *, limit: int = 1000) -> None:
        """`fetch(points, limit)` returns up to `limit` events after each (stream, position)."""
        self._hub = hub
        self._fetch = fetch
        self._limit = limit
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.reads = 0  # shared reads so far

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

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            wanted, self._pending = self._pending, set()
            await self._read(wanted)

    async def _read(self, wanted: set[str]) -> None:
        points = [(sid, p) for sid in wanted if (p := self._hub.fetch_point(sid)) is not None]
        if not points:
            return
        try:
            rows = await self._fetch(points, self._limit)
        except Exception as exc:  # the tails re-read by themselves instead
            log.warning("shared catch-up read failed (%s); tails re-read", exc)
            self._hub.ring(sid for sid, _ in points)
            return
        self.reads += 1
        grouped: dict[str, list[StoredEvent]] = {}
        for event in rows:
            grouped.setdefault(event.stream_id, []).append(event)
        for events in grouped.values():
            events.sort(key=_position)
        self._hub.publish(grouped)
        # A stream that filled its limit has more: go again from its new position.
        self.want(sid for sid, events in grouped.items() if len(events) >= self._limit)


def _position(event: StoredEvent) -> int:
    return event.position
