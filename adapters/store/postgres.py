"""The production store: PostgreSQL through asyncpg, multi-row writes with `unnest`, and a
NOTIFY doorbell (one per commit) heard by every process's listener.

A flush is a handful of statements whatever its size: the guarded row updates (or row
inserts) for all its streams at once, then all its event rows, then one `pg_notify`. Arrays bound as
parameters keep each statement's text (and so its prepared plan) the same for any size.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from adapters.store.catchup import CatchUp
from adapters.store.listener import CHANNEL, Listener, doorbell_payload
from adapters.store.rows import StreamBatch, row_change, row_insert
from adapters.store.settings import StoreSettings
from adapters.store.sql import SqlEventStore
from adapters.store.urls import asyncpg_dsn
from service.ports import StoredEvent

_CLAIM_NEW = """
INSERT INTO responses (id, owner, status, model, background, store, previous_response_id,
                       created_at, updated_at, version, snapshot_version, snapshot)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[], $6::bool[],
                     $7::text[], $8::float8[], $9::float8[], $10::int[], $11::int[],
                     $12::text[])
ON CONFLICT (id) DO NOTHING
RETURNING id
"""

# The guard: only rows still at the expected version move. Most batches hold no lifecycle
# event (they are deltas) and move only `version`; the few that do also set the snapshot.
_CLAIM_MOVED = """
UPDATE responses AS r
SET version = u.version, updated_at = $4
FROM unnest($1::text[], $2::int[], $3::int[]) AS u(id, expected, version)
WHERE r.id = u.id AND r.version = u.expected
RETURNING r.id
"""

_CLAIM_LIFECYCLE = """
UPDATE responses AS r
SET version = u.version, updated_at = u.updated_at, status = u.status,
    snapshot = u.snapshot, snapshot_version = u.snapshot_version
FROM unnest($1::int[], $2::float8[], $3::text[], $4::text[], $5::int[], $6::text[], $7::int[])
     AS u(version, updated_at, status, snapshot, snapshot_version, id, expected)
WHERE r.id = u.id AND r.version = u.expected
RETURNING r.id
"""

_INSERT_UNNEST = """
INSERT INTO events (stream_id, position, type, data, facts, recorded_at)
SELECT * FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::float8[])
"""

# What is new on several streams at once (the shared catch-up read of `catchup.py`). One
# LATERAL index range scan per stream, each with its own limit: a global ORDER BY ... LIMIT
# would tempt the planner into walking the whole primary key in order instead.
_FETCH_MANY = """
SELECT e.stream_id, e.position, e.type, e.data, e.facts, e.recorded_at
FROM unnest($1::text[], $2::int[]) AS c(sid, after)
CROSS JOIN LATERAL (
    SELECT * FROM events
    WHERE stream_id = c.sid AND position > c.after
    ORDER BY position
    LIMIT $3
) AS e
"""

_INSERT_MANY = """
INSERT INTO events (stream_id, position, type, data, facts, recorded_at)
VALUES ($1, $2, $3, $4, $5, $6)
"""


def _columns(rows: Sequence[tuple[object, ...]]) -> tuple[list[object], ...]:
    return tuple(list(column) for column in zip(*rows, strict=True))


def _stored(row: Any) -> StoredEvent:
    sid, position, type_, data, facts, recorded_at = row
    facts_bytes = None if facts is None else facts.encode()
    return StoredEvent(sid, position, type_, data.encode(), facts_bytes, recorded_at)


class PostgresEventStore(SqlEventStore):
    """The event store on PostgreSQL; tails hear other processes through LISTEN/NOTIFY."""

    dialect = "postgresql"

    def __init__(self, url: URL, settings: StoreSettings) -> None:
        engine: AsyncEngine = create_async_engine(
            url,
            echo=settings.echo,
            pool_size=20 if settings.pool_size is None else settings.pool_size,
            max_overflow=20 if settings.max_overflow is None else settings.max_overflow,
            pool_pre_ping=settings.pool_pre_ping,
        )
        super().__init__(url, engine, settings)
        if settings.pg_insert not in ("unnest", "executemany"):
            raise ValueError(
                f"pg_insert must be 'unnest' or 'executemany', not {settings.pg_insert!r}"
            )
        # Identifies this process's own notifications, whose events the hub already has.
        self.origin = secrets.token_hex(6)
        self.catchup = CatchUp(self.hub, self._fetch_many)
        self.listener = Listener(asyncpg_dsn(url), self._rung, self.origin)

    async def start(self) -> None:
        if self.settings.listen:
            await self.catchup.start()
            await self.listener.start()

    async def close(self) -> None:
        await self.listener.stop()
        await self.catchup.stop()
        await super().close()

    def _rung(self, keys: list[str] | None) -> None:
        self.catchup.want(self.hub.streams(keys))

    async def _fetch_many(self, points: Sequence[tuple[str, int]], limit: int) -> list[StoredEvent]:
        params = ([sid for sid, _ in points], [after for _, after in points], limit)
        async with self.engine.connect() as conn:
            result = await conn.exec_driver_sql(_FETCH_MANY, params)
            return [_stored(row) for row in result]

    async def read_many(self, points: Sequence[tuple[str, int]], limit: int) -> list[StoredEvent]:
        return await self._fetch_many(points, limit)

    async def _claim(
        self, conn: AsyncConnection, batches: Sequence[StreamBatch], now: float
    ) -> set[str]:
        won: set[str] = set()
        new = [row_insert(b, now) for b in batches if b.expected_version == -1]
        if new:
            result = await conn.exec_driver_sql(_CLAIM_NEW, _columns(new))
            won.update(row[0] for row in result)
        moved = [b for b in batches if b.expected_version >= 0 and b.lifecycle is None]
        if moved:
            params = (
                [b.stream_id for b in moved],
                [b.expected_version for b in moved],
                [b.last for b in moved],
                now,
            )
            result = await conn.exec_driver_sql(_CLAIM_MOVED, params)
            won.update(row[0] for row in result)
        changed = [row_change(b, now) for b in batches if b.expected_version >= 0 and b.lifecycle]
        if changed:
            result = await conn.exec_driver_sql(_CLAIM_LIFECYCLE, _columns(changed))
            won.update(row[0] for row in result)
        return won

    async def _insert_events(self, conn: AsyncConnection, batches: Sequence[StreamBatch]) -> None:
        if not batches:
            return
        if self.settings.pg_insert == "executemany":
            rows = [(b.stream_id, *row) for b in batches for row in b.rows]
            await conn.exec_driver_sql(_INSERT_MANY, rows)
            return
        sids: list[str] = []
        for b in batches:
            sids.extend([b.stream_id] * len(b.rows))
        columns = zip(*(row for b in batches for row in b.rows), strict=True)
        await conn.exec_driver_sql(_INSERT_UNNEST, (sids, *map(list, columns)))

    async def _notify(self, conn: AsyncConnection, stream_ids: Sequence[str]) -> None:
        # NOTIFY is transactional: it is delivered at commit, and never for a rollback.
        if stream_ids:
            payload = doorbell_payload(self.origin, stream_ids)
            await conn.exec_driver_sql("SELECT pg_notify($1, $2)", (CHANNEL, payload))
