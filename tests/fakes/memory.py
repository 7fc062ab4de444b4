"""An in-memory event store and leases for service-level unit tests, written against the
ports.

It keeps the same contract as the SQL stores (expected-version guard, read model written
with the events, live tail that ends after the terminal event, a terminal event releases
the lease) but commits each append at once: group commit, fencing and cross-process
tailing belong to the real adapters' tests. Several `MemoryLeases` over one store stand
for several processes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence

import msgspec

from domain.errors import Conflict
from domain.events import (
    LIFECYCLE_TYPES,
    AnyEvent,
    LifecycleEvent,
    ResponseCreated,
    encode,
)
from domain.reasons import CancelReason
from service.ports import CancelBell, Claim, Renewal, ResponseRow, StoredEvent
from tests.fakes.keys import MemoryKeyStore

_LIFECYCLE = LIFECYCLE_TYPES


class MemoryStore:
    """EventStore + EventWriter + ResponseIndex in one dict, for tests."""

    def __init__(self) -> None:
        self.events: dict[str, list[StoredEvent]] = {}
        self.rows: dict[str, ResponseRow] = {}
        self.leases: dict[str, tuple[str, float]] = {}  # id -> (owner, expires at)
        self.cancel_bells: dict[str, CancelBell] = {}  # owner -> its cancel doorbell
        # Who leases the streams created in_progress (the SQL stores: the creating process).
        self.creator: str | None = "proc-a"
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
            first = events[0]
            if isinstance(first, ResponseCreated) and row.status == "in_progress" and self.creator:
                self.leases[stream_id] = (self.creator, time.monotonic() + 15.0)
            if row.status in ("completed", "failed", "cancelled", "incomplete"):
                self.leases.pop(stream_id, None)

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
        self.rows[response_id] = msgspec.structs.replace(row, deleted_at=time.time())
        return True

    async def request_cancel(
        self, response_id: str, reason: CancelReason = CancelReason.CANCELLED_BY_USER
    ) -> bool:
        row = self.rows.get(response_id)
        if row is None:
            return False
        if row.cancel_reason is None:
            row = msgspec.structs.replace(
                row, cancel_requested_at=time.time(), cancel_reason=reason
            )
            self.rows[response_id] = row
        reason = row.cancel_reason or reason
        lease = self.leases.get(response_id)
        bell = self.cancel_bells.get(lease[0]) if lease else None
        if bell is not None:
            bell([(response_id, reason)])
        return True


class MemoryLeases:
    """One process's leases and doorbells over a `MemoryStore` (`Leases` + `Doorbells`)."""

    def __init__(
        self,
        store: MemoryStore,
        owner: str = "proc-a",
        ttl: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.owner = owner
        self.ttl = ttl
        self.clock = clock
        self.work: Callable[[], None] = lambda: None
        self.work_rung = 0

    def _free(self, rid: str) -> bool:
        lease = self.store.leases.get(rid)
        return lease is None or lease[0] == self.owner or lease[1] < self.clock()

    def _take(self, rid: str) -> Claim:
        self.store.leases[rid] = (self.owner, self.clock() + self.ttl)
        return Claim(rid, self.store.rows[rid].cancel_reason)

    async def claim(self, limit: int) -> list[Claim]:
        now = self.clock()
        queued = [
            rid
            for rid, row in self.store.rows.items()
            if row.status == "queued"
            and (rid not in self.store.leases or self.store.leases[rid][1] < now)
        ]
        return [self._take(rid) for rid in queued[:limit]]

    async def acquire(self, response_id: str) -> Claim | None:
        row = self.store.rows.get(response_id)
        if (
            row is None
            or row.status not in ("queued", "in_progress")
            or not self._free(response_id)
        ):
            return None
        return self._take(response_id)

    async def renew(self, response_ids: Sequence[str]) -> Renewal:
        held = [r for r in response_ids if self.store.leases.get(r, ("",))[0] == self.owner]
        for rid in held:
            self.store.leases[rid] = (self.owner, self.clock() + self.ttl)
        cancel = {rid: reason for rid in held if (reason := self.store.rows[rid].cancel_reason)}
        return Renewal(held=frozenset(held), cancel=cancel)

    async def expired(self, limit: int) -> list[str]:
        now = self.clock()
        return [
            rid
            for rid, row in self.store.rows.items()
            if row.status == "in_progress"
            and rid in self.store.leases
            and self.store.leases[rid][1] < now
        ][:limit]

    async def ring_work(self) -> None:
        self.work_rung += 1
        self.work()

    def listen(self, work: Callable[[], None], cancel: CancelBell) -> None:
        self.work = work
        self.store.cancel_bells[self.owner] = cancel


class MemoryBackend:
    """The app's `Backend` over a `MemoryStore`."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = self.writer = self.index = store or MemoryStore()
        self.keys = MemoryKeyStore()
        self.leases = self.bells = MemoryLeases(self.store)

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def ready(self) -> str | None:
        return None
