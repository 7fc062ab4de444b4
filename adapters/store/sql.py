"""What both SQL stores share: reads, the tail, the read-model queries, and the transaction
that commits a set of stream batches (with conflict isolation). The dialect classes supply
the few statements that differ (the multi-row insert, the guard, the doorbell).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

import msgspec
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from adapters.store import migrate
from adapters.store.hub import Hub
from adapters.store.rows import StreamBatch, encode_append, merge
from adapters.store.tables import events as t_events
from adapters.store.tables import responses as t_responses
from adapters.store.tail import follow
from adapters.store.transient import is_transient
from domain.errors import Conflict, NotFound
from domain.events import AnyEvent
from domain.objects import TERMINAL_STATUSES
from service.ports import ResponseRow, StoredEvent

log = logging.getLogger(__name__)

Failures = dict[str, BaseException]


class StoreSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Tuning of a store; every field is a keyword of `open_store`."""

    poll_interval: float = 1.0  # a tail re-reads at least this often (lost doorbells)
    tail_buffer: int = 1024  # events a subscriber may have waiting before it must re-read
    read_page: int = 1000  # rows per catch-up read of a tail
    listen: bool = True  # PostgreSQL: run the LISTEN connection (cross-process doorbell)
    check_migrated: bool = True  # refuse to open a database that is not at the head revision
    pool_size: int = 5
    # Off: a probe per checkout doubles the round trips of every flush and read. A dropped
    # connection instead fails one statement, which invalidates the pool; the writer and
    # the tails retry such errors.
    pool_pre_ping: bool = False
    max_overflow: int = 10
    pg_insert: str = "unnest"  # or "executemany": how a flush inserts its event rows
    sqlite_busy_timeout: float = 10.0  # seconds a writer waits for SQLite's write lock
    sqlite_synchronous: str = "FULL"  # SQLite's PRAGMA synchronous (NORMAL trades durability)
    echo: bool = False


class ResponsePage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of `list`, newest first; pass `rows[-1].id` as `after` for the next one."""

    rows: list[ResponseRow]
    has_more: bool


def _conflict(batch: StreamBatch) -> Conflict:
    return Conflict(
        f"stream {batch.stream_id} is not at version {batch.expected_version}: "
        "another writer appended first (or the stream does not exist)"
        if batch.expected_version >= 0
        else f"stream {batch.stream_id} already exists"
    )


def _stored(stream_id: str, row: Any) -> StoredEvent:
    position, type_, data, facts, recorded_at = row
    return StoredEvent(
        stream_id,
        position,
        type_,
        data.encode(),
        None if facts is None else facts.encode(),
        recorded_at,
    )


_READ_COLUMNS = (
    t_events.c.position,
    t_events.c.type,
    t_events.c.data,
    t_events.c.facts,
    t_events.c.recorded_at,
)


def _row(r: Any) -> ResponseRow:
    m = r._mapping
    return ResponseRow(
        id=m["id"],
        owner=m["owner"],
        status=m["status"],
        model=m["model"],
        background=bool(m["background"]),
        store=bool(m["store"]),
        previous_response_id=m["previous_response_id"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        version=m["version"],
        snapshot_version=m["snapshot_version"],
        snapshot=m["snapshot"].encode(),
        cancel_requested=m["cancel_requested_at"] is not None,
        deleted=m["deleted_at"] is not None,
    )


class SqlEventStore:
    """The event log and read model on one SQL database (see the dialect subclasses)."""

    dialect: ClassVar[str]

    def __init__(self, url: URL, engine: AsyncEngine, settings: StoreSettings) -> None:
        self.url = url
        self.engine = engine
        self.settings = settings
        self.hub = Hub(settings.tail_buffer)

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start background helpers (the PostgreSQL listener); `open_store` calls it."""

    async def close(self) -> None:
        await self.engine.dispose()

    async def ping(self) -> bool:
        """Whether the database answers a trivial query."""
        try:
            async with self.engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except (sa_exc.SQLAlchemyError, OSError, TimeoutError) as exc:
            log.warning("store ping failed: %s", exc)
            return False
        return True

    async def check_migrated(self) -> None:
        """Raise `NotMigrated` (naming the command that fixes it) unless at the head revision."""
        async with self.engine.connect() as conn:
            at_head = await conn.run_sync(migrate.connection_is_head)
        if not at_head:
            raise migrate.NotMigrated(self.url)

    # --- the log --------------------------------------------------------------------------

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> builtins.list[StoredEvent]:
        """Events of one stream with position > `after`, in order."""
        query = (
            sa.select(*_READ_COLUMNS)
            .where(t_events.c.stream_id == stream_id, t_events.c.position > after)
            .order_by(t_events.c.position)
        )
        if limit is not None:
            query = query.limit(limit)
        async with self.engine.connect() as conn:
            result = await conn.execute(query)
            return [_stored(stream_id, row) for row in result]

    async def read_events(self, stream_id: str, after: int = -1) -> builtins.list[AnyEvent]:
        """The stream decoded into typed events; a corrupt row raises `CorruptEvent` naming
        its stream and position (it is never skipped)."""
        return [stored.event() for stored in await self.read(stream_id, after)]

    def subscribe(self, stream_id: str, after: int = -1) -> AsyncIterator[StoredEvent]:
        """Every committed event with position > `after`, exactly once, in order, live;
        the iterator ends after the terminal event."""
        return follow(
            stream_id,
            after,
            hub=self.hub,
            read=self._tail_read,
            ended=self._ended,
            poll_interval=self.settings.poll_interval,
            page=self.settings.read_page,
        )

    async def _tail_read(
        self, stream_id: str, after: int, limit: int
    ) -> builtins.list[StoredEvent]:
        """A tail's read: a transient error (the server restarted, the connection dropped)
        is waited out rather than ending the tail; it resumes from where it was."""
        delay = 0.05
        while True:
            try:
                return await self.read(stream_id, after, limit)
            except (sa_exc.DBAPIError, OSError) as exc:
                if not is_transient(exc):
                    raise
                log.warning("tail of %s: read failed (%s); retrying", stream_id, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.poll_interval)

    async def _ended(self, stream_id: str, last: int) -> bool:
        query = sa.select(t_responses.c.status, t_responses.c.version).where(
            t_responses.c.id == stream_id
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return row is not None and row.status in TERMINAL_STATUSES and row.version <= last

    # --- appends --------------------------------------------------------------------------

    async def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[AnyEvent],
        *,
        durable: bool = True,
    ) -> None:
        """Append in a transaction of its own (one commit per append; always durable)."""
        if not events:
            return
        batch = merge([encode_append(stream_id, expected_version, events)])
        failed = await self.commit([batch])
        if stream_id in failed:
            raise failed[stream_id]

    async def commit(self, batches: Sequence[StreamBatch], *, recheck: bool = False) -> Failures:
        """Commit the batches (one per stream) in one transaction; returns those that failed.

        A stream whose guard misses fails alone (`Conflict`) and the others still commit. A
        constraint violation aborts the whole transaction, so then each stream is retried
        in a savepoint of its own. Transient errors propagate for the caller to retry; with
        `recheck` (a retry), a batch that a lost-acknowledgement commit already wrote is
        recognised by its bytes and counts as committed, not as a conflict.
        """
        if len({b.stream_id for b in batches}) != len(batches):
            raise ValueError("one batch per stream per commit")
        now = time.time()
        try:
            failed, done = await self._commit_together(batches, now, recheck)
        except sa_exc.DBAPIError as exc:
            if is_transient(exc):
                raise
            log.warning("flush of %d streams failed (%s); isolating them", len(batches), exc)
            failed, done = await self._commit_isolated(batches, now, recheck)
        committed = {b.stream_id: b.events for b in batches if b.stream_id not in failed}
        committed.update(done)
        self.hub.publish(committed)
        return failed

    async def _commit_together(
        self, batches: Sequence[StreamBatch], now: float, recheck: bool
    ) -> tuple[Failures, dict[str, builtins.list[StoredEvent]]]:
        async with self._begin_write() as conn:
            failed, done = await self._write(conn, batches, now, recheck)
            await self._notify(conn, [b.stream_id for b in batches if b.stream_id not in failed])
        return failed, done

    async def _commit_isolated(
        self, batches: Sequence[StreamBatch], now: float, recheck: bool
    ) -> tuple[Failures, dict[str, builtins.list[StoredEvent]]]:
        failed: Failures = {}
        done: dict[str, builtins.list[StoredEvent]] = {}
        async with self._begin_write() as conn:
            for batch in batches:
                try:
                    async with conn.begin_nested():
                        lost, seen = await self._write(conn, [batch], now, recheck)
                except sa_exc.DBAPIError as exc:
                    if is_transient(exc):
                        raise
                    lost, seen = {batch.stream_id: _wrap(batch, exc)}, {}
                failed.update(lost)
                done.update(seen)
            await self._notify(conn, [b.stream_id for b in batches if b.stream_id not in failed])
        return failed, done

    async def _write(
        self, conn: AsyncConnection, batches: Sequence[StreamBatch], now: float, recheck: bool
    ) -> tuple[Failures, dict[str, builtins.list[StoredEvent]]]:
        """Guard first, then insert: the guarded row update (or the row insert) decides which
        streams this transaction may extend, and only their events are inserted. On
        PostgreSQL the guard's row lock also queues a concurrent writer of the same stream
        until we commit, after which its guard re-evaluates and misses."""
        won = await self._claim(conn, batches, now)
        lost = [b for b in batches if b.stream_id not in won]
        done = await self._already_written(conn, lost) if recheck and lost else {}
        failed: Failures = {b.stream_id: _conflict(b) for b in lost if b.stream_id not in done}
        await self._insert_events(conn, [b for b in batches if b.stream_id in won])
        return failed, done

    async def _already_written(
        self, conn: AsyncConnection, batches: Sequence[StreamBatch]
    ) -> dict[str, builtins.list[StoredEvent]]:
        """The batches whose exact rows are already in the log (an earlier attempt of this
        flush committed but its acknowledgement was lost)."""
        done: dict[str, builtins.list[StoredEvent]] = {}
        for batch in batches:
            query = (
                sa.select(*_READ_COLUMNS)
                .where(
                    t_events.c.stream_id == batch.stream_id,
                    t_events.c.position > batch.expected_version,
                    t_events.c.position <= batch.last,
                )
                .order_by(t_events.c.position)
            )
            stored = [_stored(batch.stream_id, r) for r in await conn.execute(query)]
            mine = [(e.position, e.type, e.data) for e in batch.events]
            if [(e.position, e.type, e.data) for e in stored] == mine:
                done[batch.stream_id] = stored
        return done

    # --- dialect hooks --------------------------------------------------------------------

    def _begin_write(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A write transaction (SQLite takes its write lock up front)."""
        return self.engine.begin()

    async def _claim(
        self, conn: AsyncConnection, batches: Sequence[StreamBatch], now: float
    ) -> set[str]:
        """Create or advance the read-model rows whose guard holds; their ids."""
        raise NotImplementedError

    async def _insert_events(self, conn: AsyncConnection, batches: Sequence[StreamBatch]) -> None:
        raise NotImplementedError

    async def _notify(self, conn: AsyncConnection, stream_ids: Sequence[str]) -> None:
        """Ring other processes' doorbells for these streams (at commit); none by default."""

    # --- the read model -------------------------------------------------------------------

    async def get(self, response_id: str) -> ResponseRow | None:
        query = sa.select(t_responses).where(t_responses.c.id == response_id)
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _row(row)

    async def mark_deleted(self, response_id: str) -> bool:
        """Hide the response from the API (its log stays); False if absent or already so."""
        stmt = (
            sa.update(t_responses)
            .where(t_responses.c.id == response_id, t_responses.c.deleted_at.is_(None))
            .values(deleted_at=time.time())
        )
        return await self._flag(stmt)

    async def request_cancel(self, response_id: str) -> bool:
        """Flag the response for cancellation (the first request's time is kept); False if
        there is no such (undeleted) response."""
        stmt = (
            sa.update(t_responses)
            .where(t_responses.c.id == response_id, t_responses.c.deleted_at.is_(None))
            .values(
                cancel_requested_at=sa.func.coalesce(t_responses.c.cancel_requested_at, time.time())
            )
        )
        return await self._flag(stmt)

    async def _flag(self, stmt: sa.Update) -> bool:
        async with self._begin_write() as conn:
            result = await conn.execute(stmt)
        return result.rowcount == 1

    async def list(
        self,
        *,
        owner: str | None = None,
        status: str | Sequence[str] | None = None,
        model: str | None = None,
        since: float | None = None,
        until: float | None = None,
        include_deleted: bool = False,
        after: str | None = None,
        limit: int = 20,
    ) -> ResponsePage:
        """Responses newest first (`created_at`, then id), filtered; keyset-paginated by
        `after` (the last id of the previous page). `since` is inclusive, `until` exclusive."""
        c = t_responses.c
        query = sa.select(t_responses).order_by(c.created_at.desc(), c.id.desc()).limit(limit + 1)
        conds: builtins.list[sa.ColumnElement[bool]] = []
        if owner is not None:
            conds.append(c.owner == owner)
        if isinstance(status, str):
            conds.append(c.status == status)
        elif status is not None:
            conds.append(c.status.in_(builtins.list(status)))
        if model is not None:
            conds.append(c.model == model)
        if since is not None:
            conds.append(c.created_at >= since)
        if until is not None:
            conds.append(c.created_at < until)
        if not include_deleted:
            conds.append(c.deleted_at.is_(None))
        async with self.engine.connect() as conn:
            if after is not None:
                conds.append(await self._older_than(conn, after))
            rows = (await conn.execute(query.where(*conds))).all()
        page = [_row(r) for r in rows[:limit]]
        return ResponsePage(rows=page, has_more=len(rows) > limit)

    async def _older_than(self, conn: AsyncConnection, after: str) -> sa.ColumnElement[bool]:
        c = t_responses.c
        query = sa.select(c.created_at).where(c.id == after)
        created = (await conn.execute(query)).scalar_one_or_none()
        if created is None:
            raise NotFound(f"no response {after} to list after")
        return sa.or_(c.created_at < created, sa.and_(c.created_at == created, c.id < after))


def _wrap(batch: StreamBatch, exc: sa_exc.DBAPIError) -> BaseException:
    if isinstance(exc, sa_exc.IntegrityError):
        conflict = _conflict(batch)
        conflict.__cause__ = exc
        return conflict
    return exc
