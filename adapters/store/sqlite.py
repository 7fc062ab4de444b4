"""The embedded store: SQLite through aiosqlite, in WAL mode, doorbell in-process only.

Write transactions start with `BEGIN IMMEDIATE`, which takes SQLite's single write lock up
front (waiting up to the busy timeout). Holding it, nobody else can change a row, so the
guard is a plain read of the versions followed by the writes; and a deferred transaction's
classic failure (a reader that tries to upgrade to a writer after another commit gets
`SQLITE_BUSY` at once, without waiting) cannot happen.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from adapters.store.rows import Append, leased, row_change, row_insert
from adapters.store.settings import StoreSettings
from adapters.store.sql import PAGE_SQL, SqlEventStore
from adapters.store.tables import responses as t_responses
from adapters.store.urls import ensure_sqlite_directory
from domain.objects import TERMINAL_STATUSES

_WRITE = "resplog_write"
_CHUNK = 500  # ids per IN (...) list, far below SQLite's bound-parameter limit

_INSERT_EVENTS = (
    "INSERT INTO events (stream_id, position, type, data, facts, recorded_at, digest) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_ROW = (
    "INSERT INTO responses (id, owner, status, model, background, store, "
    "previous_response_id, created_at, updated_at, version, snapshot_version, snapshot, "
    "head_digest, lease_owner, lease_expires_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_TERMINAL = ", ".join(f"'{s}'" for s in sorted(TERMINAL_STATUSES))
# Numbered parameters: the status (?3) also decides whether a terminal event releases the
# lease, and any other append of the owner extends it to ?9, as on PostgreSQL (postgres.py,
# `_CLAIM_MOVED`). The guard itself (version and lease owner) was checked under the write
# lock.
_UPDATE_ROW = (
    "UPDATE responses SET version = ?1, updated_at = ?2, status = coalesce(?3, status), "
    "snapshot = coalesce(?4, snapshot), snapshot_version = coalesce(?5, snapshot_version), "
    "head_digest = ?8, "
    f"lease_owner = CASE WHEN ?3 IN ({_TERMINAL}) THEN NULL ELSE lease_owner END, "
    f"lease_expires_at = CASE WHEN ?3 IN ({_TERMINAL}) OR lease_owner IS NULL THEN NULL "
    "ELSE ?9 END "
    "WHERE id = ?6 AND version = ?7"
)


def _engine(url: URL, settings: StoreSettings) -> AsyncEngine:
    if not url.database or url.database == ":memory:":
        # Every connection of the pool would get a database of its own.
        raise ValueError("the SQLite store needs a file: sqlite+aiosqlite:///path/to/resplog.db")
    ensure_sqlite_directory(url)
    engine = create_async_engine(
        url,
        echo=settings.echo,
        pool_size=5 if settings.pool_size is None else settings.pool_size,
        max_overflow=10 if settings.max_overflow is None else settings.max_overflow,
        connect_args={"timeout": settings.sqlite_busy_timeout},
    )
    pragmas = (
        "PRAGMA journal_mode=WAL",
        f"PRAGMA busy_timeout={int(settings.sqlite_busy_timeout * 1000)}",
        f"PRAGMA synchronous={settings.sqlite_synchronous}",
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module (which would not BEGIN
        # before a SELECT, nor around SAVEPOINTs) and emit BEGIN ourselves below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


class SqliteEventStore(SqlEventStore):
    """The event store on one SQLite file; tails are woken in-process only."""

    dialect = "sqlite"
    _PAGE = PAGE_SQL.format("?", "?", "?", "?", stream="")

    def __init__(self, url: URL, settings: StoreSettings) -> None:
        super().__init__(url, _engine(url, settings), settings)
        self._writes = self.engine.execution_options(**{_WRITE: True})

    def _begin_write(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._writes.begin()

    async def _claim(
        self, conn: AsyncConnection, batches: Sequence[Append], now: float
    ) -> set[str]:
        heads = await self._heads(conn, [b.stream_id for b in batches])
        creates = [b for b in batches if b.expected_version == -1 and b.stream_id not in heads]
        me = self.settings.lease_owner
        updates = [
            b
            for b in batches
            if b.expected_version >= 0
            and (head := heads.get(b.stream_id)) is not None
            and head[0] == b.expected_version
            and head[1] in (None, me)
        ]
        if creates:
            rows = [(*row_insert(b, now), *self._creation_lease(b, now)) for b in creates]
            await conn.exec_driver_sql(_INSERT_ROW, rows)
        if updates:
            expires = now + self.settings.lease_ttl
            changes = [(*row_change(b, now), expires) for b in updates]
            result = await conn.exec_driver_sql(_UPDATE_ROW, changes)
            if result.rowcount != len(updates):  # impossible while we hold the write lock
                raise RuntimeError("read-model guard changed under the write lock")
        return {b.stream_id for b in creates} | {b.stream_id for b in updates}

    def _creation_lease(self, batch: Append, now: float) -> tuple[str | None, float | None]:
        """The lease of a new stream, if its creator holds one (`rows.leased`)."""
        me = self.settings.lease_owner
        if me is None or not leased(batch):
            return None, None
        return me, now + self.settings.lease_ttl

    async def _heads(
        self, conn: AsyncConnection, ids: Sequence[str]
    ) -> dict[str, tuple[int, str | None]]:
        """(version, lease owner) of each existing stream."""
        heads: dict[str, tuple[int, str | None]] = {}
        c = t_responses.c
        for start in range(0, len(ids), _CHUNK):
            query = sa.select(c.id, c.version, c.lease_owner).where(
                c.id.in_(ids[start : start + _CHUNK])
            )
            heads.update(
                {row.id: (row.version, row.lease_owner) for row in await conn.execute(query)}
            )
        return heads

    async def _insert_events(self, conn: AsyncConnection, batches: Sequence[Append]) -> None:
        rows = [
            (b.stream_id, *row, digest)
            for b in batches
            for row, digest in zip(b.rows, b.digests, strict=True)
        ]
        if rows:
            await conn.exec_driver_sql(_INSERT_EVENTS, rows)
