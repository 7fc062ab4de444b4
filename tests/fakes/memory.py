"""An in-memory event store for service-level unit tests, written against the ports.

It keeps the same contract as the SQL stores (expected-version guard, read model written
with the events, live tail that ends after the terminal event) but commits each append at
once: group commit and cross-process tailing belong to the real adapters' tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import msgspec

from domain.errors import Conflict
from domain.events import (
    LIFECYCLE_TYPES,
    AnyEvent,
    LifecycleEvent,
    ResponseCreated,
    encode,
)
from service.ports import ResponseRow, StoredEvent
from tests.fakes.keys import MemoryKeyStore

_LIFECYCLE = LIFECYCLE_TYPES


class MemoryStore:
    """EventStore + EventWriter + ResponseIndex in one dict, for tests."""

    def __init__(self) -> None:
        self.events: dict[str, list[StoredEvent]] = {}
        self.rows: dict[str, ResponseRow] = {}
        self._changed = asyncio.Condition()

    async def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[AnyEvent],
        *,
        durable: bool = True,
    ) -> None:
        log = self.events.setdefault(stream_id, [])
        if len(log) - 1 != expected_version:
            raise Conflict(f"{stream_id} is at {len(log) - 1}, not {expected_version}")
        now = time.time()
        stored = []
        for i, event in enumerate(events):
            enc = encode(event)
            stored.append(
                StoredEvent(stream_id, expected_version + 1 + i, enc.type, enc.data, enc.facts, now)
            )
        log.extend(stored)
        self._update_row(stream_id, events, now)
        async with self._changed:
            self._changed.notify_all()

    def _update_row(self, stream_id: str, events: Sequence[AnyEvent], now: float) -> None:
        row = self.rows.get(stream_id)
        for event in events:
            if isinstance(event, ResponseCreated):
                r = event.response
                assert event.facts is not None
                row = ResponseRow(
                    id=r.id,
                    owner=event.facts.owner,
                    status=r.status,
                    model=r.model,
                    background=r.background,
                    store=r.store,
                    previous_response_id=r.previous_response_id,
                    created_at=now,
                    updated_at=now,
                    version=0,
                    snapshot_version=0,
                    snapshot=msgspec.json.encode(r),
                )
            assert row is not None
            changes: dict[str, object] = {"version": event.sequence_number, "updated_at": now}
            if isinstance(event, _LIFECYCLE):
                lifecycle: LifecycleEvent = event
                changes.update(
                    status=lifecycle.response.status,
                    snapshot=msgspec.json.encode(lifecycle.response),
                    snapshot_version=event.sequence_number,
                )
            row = msgspec.structs.replace(row, **changes)
        if row is not None:
            self.rows[stream_id] = row

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        rows = self.events.get(stream_id, [])[after + 1 :]
        return rows[:limit] if limit is not None else rows

    async def subscribe(self, stream_id: str, after: int = -1) -> AsyncIterator[StoredEvent]:
        position = after
        while True:
            batch = await self.read(stream_id, position)
            for event in batch:
                yield event
                position = event.position
                if event.terminal:
                    return
            async with self._changed:
                if len(self.events.get(stream_id, [])) - 1 <= position:
                    await self._changed.wait()

    async def get(self, response_id: str) -> ResponseRow | None:
        return self.rows.get(response_id)

    async def mark_deleted(self, response_id: str) -> bool:
        row = self.rows.get(response_id)
        if row is None:
            return False
        self.rows[response_id] = msgspec.structs.replace(row, deleted=True)
        return True

    async def request_cancel(self, response_id: str) -> bool:
        row = self.rows.get(response_id)
        if row is None:
            return False
        self.rows[response_id] = msgspec.structs.replace(row, cancel_requested=True)
        return True


class MemoryBackend:
    """The app's `Backend` over a `MemoryStore`."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = self.writer = self.index = store or MemoryStore()
        self.keys = MemoryKeyStore()

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def ready(self) -> str | None:
        return None
