"""The SQL event store both databases share: reading a stream, tailing it, and the
transaction that commits a flush of stream batches with conflict isolation. The dialect
classes supply the few statements that differ (the multi-row insert, the guard, the
doorbell); the read-model queries are mixed in from `readmodel.py`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, TypeVar

import msgspec
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from adapters.store import blobs, migrate, outbox, partitions
from adapters.store.bells import Bells
from adapters.store.conversations import join
from adapters.store.hub import Hub, Subscription
from adapters.store.readmodel import ReadModel
from adapters.store.rows import Append, chained, encode_append, merge
from adapters.store.settings import StoreSettings
from adapters.store.tables import events as t_events
from adapters.store.tables import responses as t_responses
from adapters.store.tail import each, follow
from adapters.store.transient import STATEMENT_ERRORS, guarded, is_transient, store_error
from domain import chain
from domain.errors import Conflict
from domain.events import TERMINAL_TAGS, AnyEvent
from domain.objects import TERMINAL_STATUSES, InputItem, OutputItem
from service.ports import StoredEvent
from service.prompts.conversation import conversation_items

log = logging.getLogger(__name__)

_Tail = TypeVar("_Tail", bound=AsyncGenerator[Any, None])

Failures = dict[str, BaseException]
# How many streams' last digests a store keeps (`_chain`): those of the streams it is
# writing, which is far fewer; an evicted one costs one read of its row when next appended.
_CHAIN_STREAMS = 50_000
# A page read's parameters: (stream, after, limit, max_bytes).
_PageParams = tuple[str, int, int, int]


def _is_terminal(row: Any) -> bool:
    return row[1] in TERMINAL_TAGS


def conflict_of(batch: Append) -> Conflict:
    """The error of a batch whose guard missed."""
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


# A tail's page (`read_page`): the first `limit` rows after a position, cut where they pass
# a byte budget, and how many the limit let through. Plain SQL, as the driver takes it: the
# Core statement of the same query cost three times the round trip in compiling and result
# processing. `{n}` is the driver's marker of parameter n; `{stream}` what reads the stream's
# partition alone (`partitions.same_partition`; nothing on SQLite).
PAGE_SQL = """
SELECT position, type, data, facts, recorded_at, fetched FROM (
    SELECT *, sum(size) OVER (ORDER BY position) - size AS before, count(*) OVER () AS fetched
    FROM (
        SELECT position, type, data, facts, recorded_at,
               length(data) + coalesce(length(facts), 0) AS size
        FROM events WHERE stream_id = {0} AND position > {1}{stream}
        ORDER BY position LIMIT {2}
    ) AS first
) AS sized
WHERE before < {3}
ORDER BY position
"""


class _Named(msgspec.Struct, frozen=True):
    id: str


class _Ended(msgspec.Struct, frozen=True):
    """What a conversation's join needs of a final response (msgspec skips the rest)."""

    conversation: _Named | None = None
    output: list[OutputItem] = msgspec.field(default_factory=list)


class _Asked(msgspec.Struct, frozen=True):
    input: list[InputItem] = msgspec.field(default_factory=list)
    extra: dict[str, Any] = msgspec.field(default_factory=dict)


_ended = msgspec.json.Decoder(_Ended)
_asked = msgspec.json.Decoder(_Asked)

_READ_COLUMNS = (
    t_events.c.position,
    t_events.c.type,
    t_events.c.data,
    t_events.c.facts,
    t_events.c.recorded_at,
)


class SqlEventStore(ReadModel):
    """The event log and read model on one SQL database (see the dialect subclasses)."""

    dialect: ClassVar[str]
    _PAGE: ClassVar[str]  # `_PAGE` with the driver's parameter markers

    def __init__(self, url: URL, engine: AsyncEngine, settings: StoreSettings) -> None:
        self.url = url
        self.engine = engine
        # What single statements (hot reads, a one-statement flush) connect with: the
        # engine itself here; PostgreSQL's runs each statement as its own transaction (no
        # BEGIN and ROLLBACK round trips; READ COMMITTED gives the statements of one
        # transaction no common snapshot anyway).
        self.statements = engine
        self.settings = settings
        self.hub = Hub(settings.tail_buffer)
        self.bells = Bells(settings.lease_owner)
        # The rows tails have read and still hold, by (stream, position): many readers of
        # one stream (a replay fanned out to many clients) then share one copy of each
        # event instead of pinning one each. A row never changes once written.
        self._held: weakref.WeakValueDictionary[tuple[str, int], StoredEvent] = (
            weakref.WeakValueDictionary()
        )
        # The page reads under way, by their parameters: readers of the same page join
        # one (`_joined_page`).
        self._reading: dict[_PageParams, asyncio.Future[Sequence[Any]]] = {}
        # The last (position, digest) this process committed on each stream it writes: the
        # next append links to it without reading the row (`_chained`).
        self._chain: OrderedDict[str, tuple[int, bytes]] = OrderedDict()

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start background helpers (the PostgreSQL listener); `open_store` calls it."""

    @guarded
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

    @guarded
    async def check_migrated(self) -> None:
        """Raise `NotMigrated` (naming the command that fixes it) unless at the head revision."""
        async with self.engine.connect() as conn:
            at_head = await conn.run_sync(migrate.connection_is_head)
        if not at_head:
            raise migrate.not_migrated(self.url)

    @guarded
    async def ring_work(self) -> None:
        """Wake the workers that can hear it: a response is queued (here, this process's;
        PostgreSQL also rings every other process)."""
        self.bells.work()

    # --- the log --------------------------------------------------------------------------

    def _partition_of(self, stream_id: str) -> sa.ColumnElement[bool]:
        """Added to a read of one stream's events: on PostgreSQL, the stream's partition
        alone is read (partitions.py)."""
        return partitions.same_partition(t_events.c.stream_id, stream_id, self.dialect)

    def _events_of(self, stream_id: str) -> tuple[sa.Table, sa.ColumnElement[bool]]:
        """The table a read of `stream_id`'s events names, and what it adds to its
        condition (PostgreSQL's names the stream's partition when it knows it)."""
        return t_events, self._partition_of(stream_id)

    async def _partition_gone(self, exc: BaseException) -> bool:
        """Whether a read failed because the partition it named was dropped meanwhile
        (`gc`); the store then looks at the partitions again and the read is retried."""
        return False

    @guarded
    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events of one stream with position > `after`, in order."""
        try:
            return await self._read(stream_id, after, limit)
        except STATEMENT_ERRORS as exc:
            if not await self._partition_gone(exc):
                raise
        return await self._read(stream_id, after, limit)

    async def _read(self, stream_id: str, after: int, limit: int | None) -> list[StoredEvent]:
        table, where = self._events_of(stream_id)
        c = table.c
        query = (
            sa.select(c.position, c.type, c.data, c.facts, c.recorded_at)
            .where(c.stream_id == stream_id, c.position > after, where)
            .order_by(c.position)
        )
        if limit is not None:
            query = query.limit(limit)
        async with self.statements.connect() as conn:
            result = await conn.execute(query)
            return await blobs.resolve(conn, [_stored(stream_id, row) for row in result])

    @guarded
    async def read_page(
        self, stream_id: str, after: int, limit: int, max_bytes: int
    ) -> tuple[list[StoredEvent], bool]:
        """Up to `limit` events after `after`, cut once they hold `max_bytes` (the first row
        always comes, however large), and whether more may follow (the page is full or was
        cut). The running size is summed over the limited rows only, so a page costs the
        same however long the stream is."""
        params = (stream_id, after, limit, max_bytes)
        rows = await self._joined_page(params)
        if rows is None:
            rows = await self._own_page(params)
        fetched = int(rows[0][5]) if rows else 0
        page, unresolved = self._shared(stream_id, rows)
        if unresolved:
            async with self.statements.connect() as conn:
                page = await blobs.resolve(conn, page)
            for event in page:
                self._held[(stream_id, event.position)] = event
        return page, fetched == limit or len(rows) < fetched

    async def _joined_page(self, params: _PageParams) -> Sequence[Any] | None:
        """The rows of a read of the same page already under way, where they are what a
        read started now would find; None where there is none, or where they may not be.

        A burst of replays of one response (clients that connect at once, many of which
        then stall: docs/performance.md, "Stalled readers") would otherwise read its
        first page once each, and a page of megabyte events is megabytes the database
        sends, the driver decodes and the process allocates fresh, each time, on the
        event loop: 256 such reads held `/health` for seconds. The rows of a page are
        final once its end is known: the page is full or cut (`more`), or its last event
        is terminal; else (the page reached the stream's end) a row committed since the
        read began may be missing, and the joiner reads for itself."""
        running = self._reading.get(params)
        if running is None:
            return None
        rows = await asyncio.shield(running)
        fetched = int(rows[0][5]) if rows else 0
        if rows and (fetched == params[2] or len(rows) < fetched or _is_terminal(rows[-1])):
            return rows
        return None

    async def _own_page(self, params: _PageParams) -> Sequence[Any]:
        """`_page_rows`, which readers of the same page may join meanwhile; it runs to its
        end even where this reader is cancelled (others may be waiting on it)."""
        task = asyncio.ensure_future(self._page_rows(params))
        self._reading[params] = task

        def done(task: asyncio.Future[Sequence[Any]]) -> None:
            if self._reading.get(params) is task:
                del self._reading[params]
            if not task.cancelled():
                task.exception()  # seen: its readers may all have gone

        task.add_done_callback(done)
        return await asyncio.shield(task)

    async def _page_rows(self, params: tuple[str, int, int, int]) -> Sequence[Any]:
        """The rows of `_PAGE` (a store may run it its own faster way)."""
        async with self.statements.connect() as conn:
            return list(await conn.exec_driver_sql(self._PAGE, params))

    def _shared(self, stream_id: str, rows: Sequence[Any]) -> tuple[list[StoredEvent], bool]:
        """The events of `rows`, each the copy other readers hold where there is one, and
        whether any may refer to a blob (`blobs.resolve`). A held event was checked (or
        resolved) when it was first read, so the many readers of one large event do not
        search its megabytes again each."""
        page: list[StoredEvent] = []
        unresolved = False
        for row in rows:
            key = (stream_id, row[0])
            held = self._held.get(key)
            if held is None:
                held = _stored(stream_id, row[:5])
                if blobs.needs(held.facts) or blobs.needs(held.data):
                    unresolved = True  # held once resolved (`read_page`)
                else:
                    self._held[key] = held
            page.append(held)
        return page, unresolved

    @guarded
    async def read_many(self, points: Sequence[tuple[str, int]], limit: int) -> list[StoredEvent]:
        """For each (stream, after): up to `limit` of its events with position > after. Each
        stream's events are in order; streams are not (PostgreSQL does it in one query)."""
        found: list[StoredEvent] = []
        for stream_id, after in points:
            found += await self.read(stream_id, after, limit)
        return found

    @guarded
    async def read_events(self, stream_id: str, after: int = -1) -> list[AnyEvent]:
        """The stream decoded into typed events; a corrupt row raises `CorruptEvent` naming
        its stream and position (it is never skipped)."""
        return [stored.event() for stored in await self.read(stream_id, after)]

    def subscribe(
        self, stream_id: str, after: int = -1, *, new: bool = False
    ) -> AsyncGenerator[StoredEvent, None]:
        """Every committed event with position > `after`, exactly once, in order, live;
        the iterator ends after the terminal event (`subscribe_batches`, one by one)."""
        tail, opened = self._follow(stream_id, after, new=new)
        return self._dropping(each(tail), opened)

    def subscribe_batches(
        self, stream_id: str, after: int = -1, *, new: bool = False
    ) -> AsyncGenerator[list[StoredEvent], None]:
        """The same tail, in the batches its events arrive in (a page read from the
        table, the commits of this process handed over): what a writer to the wire wants,
        one step a batch. An empty batch says the tail is idle (`tail.py`).

        `new`: the stream has no event yet. The tail is registered with the hub now, not
        when first iterated, and starts from what this process commits instead of reading
        the table (`follow`'s `opened`); a tail never iterated is unregistered when it is
        dropped."""
        tail, opened = self._follow(stream_id, after, new=new)
        return self._dropping(tail, opened)

    def _follow(
        self, stream_id: str, after: int, *, new: bool
    ) -> tuple[AsyncGenerator[list[StoredEvent], None], Subscription | None]:
        opened = None
        if new:
            opened = self.hub.open(stream_id)
            opened.position = after
        tail = follow(
            stream_id,
            after,
            hub=self.hub,
            read=self._tail_read,
            ended=self._ended,
            poll_interval=self.settings.poll_interval,
            page=self.settings.read_page,
            opened=opened,
        )
        return tail, opened

    def _dropping(self, tail: _Tail, opened: Subscription | None) -> _Tail:
        """`tail`, its subscription `opened` ahead (if any) closed when it is dropped."""
        if opened is not None:
            weakref.finalize(tail, self.hub.close, opened)
        return tail

    async def _tail_read(
        self, stream_id: str, after: int, limit: int
    ) -> tuple[list[StoredEvent], bool]:
        """A tail's read (a transient error is waited out by the tail: `follow`)."""
        return await self.read_page(stream_id, after, limit, self.settings.read_page_bytes)

    @guarded
    async def _ended(self, stream_id: str, last: int) -> bool:
        row = await self._status_version(stream_id)
        return row is not None and row[0] in TERMINAL_STATUSES and row[1] <= last

    async def _status_version(self, stream_id: str) -> tuple[str, int] | None:
        """The stream's status and version, or None when there is no such stream."""
        query = sa.select(t_responses.c.status, t_responses.c.version).where(
            t_responses.c.id == stream_id
        )
        async with self.statements.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else (row.status, row.version)

    # --- appends --------------------------------------------------------------------------

    @guarded
    async def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[AnyEvent],
        *,
        durable: bool = True,
        lease: bool = False,
    ) -> None:
        """Append in a transaction of its own (one commit per append; always durable)."""
        if not events:
            return
        batch = merge([encode_append(stream_id, expected_version, events, lease=lease)])
        failed = await self.commit([batch])
        if stream_id in failed:
            raise failed[stream_id]

    def create(
        self, stream_id: str, events: Sequence[AnyEvent], *, lease: bool = False
    ) -> asyncio.Future[None]:
        """`append` of a new stream's first events, in a task of its own (this store has no
        queue to put them in before it returns)."""
        if not events:
            raise ValueError("a stream is created by its first events")
        return asyncio.ensure_future(self.append(stream_id, -1, events, lease=lease))

    @guarded
    async def commit(self, batches: Sequence[Append], *, recheck: bool = False) -> Failures:
        """Commit the batches (one per stream) in one transaction; returns those that failed.

        A stream whose guard misses fails alone (`Conflict`) and the others still commit. A
        constraint violation aborts the whole transaction, so then each stream is retried
        in a savepoint of its own. Transient errors propagate (as `StoreUnavailable`) for the
        caller to retry; with `recheck` (a retry), a batch that a lost-acknowledgement commit
        already wrote is recognised by its bytes and counts as committed, not as a conflict.
        """
        if len({b.stream_id for b in batches}) != len(batches):
            raise ValueError("one batch per stream per commit")
        batches = await self._chained(batches)
        now = time.time()
        try:
            failed, done = await self._commit_together(batches, now, recheck)
        except STATEMENT_ERRORS as exc:
            if is_transient(exc):
                raise
            log.warning("flush of %d streams failed (%s); isolating them", len(batches), exc)
            failed, done = await self._commit_isolated(batches, now, recheck)
        committed = {b.stream_id: b.events for b in batches if b.stream_id not in failed}
        committed.update(done)
        self._remember(batches, {**failed, **done})
        self.hub.publish(committed)
        return failed

    async def _chained(self, batches: Sequence[Append]) -> list[Append]:
        """Each batch with its events' digests, linked to the stream's last digest: this
        process's own last commit on the stream where it made it, else the row's head,
        read in one query for all such streams. A head read for a version the stream has
        since left is harmless: the batch's guard misses and nothing is written."""
        known: dict[str, bytes] = {}
        unknown: list[str] = []
        for b in batches:
            if b.expected_version == -1:
                known[b.stream_id] = chain.GENESIS
                continue
            mine = self._chain.get(b.stream_id)
            if mine is not None and mine[0] == b.expected_version:
                known[b.stream_id] = mine[1]
            else:
                unknown.append(b.stream_id)
        if unknown:
            known.update(await self._heads_of(unknown))
        return [chained(b, known.get(b.stream_id, chain.GENESIS)) for b in batches]

    async def _heads_of(self, ids: Sequence[str]) -> dict[str, bytes]:
        """The head digests of these responses' rows."""
        c = t_responses.c
        async with self.statements.connect() as conn:
            rows = await conn.execute(sa.select(c.id, c.head_digest).where(c.id.in_(ids)))
            return {sid: bytes.fromhex(digest) for sid, digest in rows if digest is not None}

    def _remember(self, batches: Sequence[Append], failed: Mapping[str, object]) -> None:
        """Keep each committed stream's last digest for its next append; forget a failed
        one (its next append reads the row), an ended one (nothing more follows) and one a
        retry found already written (its digests were linked by the earlier attempt, from
        a previous digest this one may have read after that attempt moved the row)."""
        cache = self._chain
        for b in batches:
            if b.stream_id in failed or (
                b.lifecycle is not None and b.lifecycle.status in TERMINAL_STATUSES
            ):
                cache.pop(b.stream_id, None)
            elif b.head is not None:
                cache[b.stream_id] = (b.last, bytes.fromhex(b.head))
                cache.move_to_end(b.stream_id)
        while len(cache) > _CHAIN_STREAMS:
            cache.popitem(last=False)

    async def _commit_together(
        self, batches: Sequence[Append], now: float, recheck: bool
    ) -> tuple[Failures, dict[str, list[StoredEvent]]]:
        async with self._begin_write() as conn:
            failed, done = await self._write(conn, batches, now, recheck)
            await self._notify(conn, [b.stream_id for b in batches if b.stream_id not in failed])
        return failed, done

    async def _commit_isolated(
        self, batches: Sequence[Append], now: float, recheck: bool
    ) -> tuple[Failures, dict[str, list[StoredEvent]]]:
        failed: Failures = {}
        done: dict[str, list[StoredEvent]] = {}
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
        self, conn: AsyncConnection, batches: Sequence[Append], now: float, recheck: bool
    ) -> tuple[Failures, dict[str, list[StoredEvent]]]:
        """Guard first, then insert: the guarded row update (or the row insert) decides which
        streams this transaction may extend, and only their events are inserted. On
        PostgreSQL the guard's row lock also queues a concurrent writer of the same stream
        until we commit, after which its guard re-evaluates and misses."""
        won = await self._claim(conn, batches, now)
        lost = [b for b in batches if b.stream_id not in won]
        done = await self._already_written(conn, lost) if recheck and lost else {}
        failed: Failures = {b.stream_id: conflict_of(b) for b in lost if b.stream_id not in done}
        mine = [b for b in batches if b.stream_id in won]
        await blobs.store(conn, {k: v for b in mine for k, v in b.blobs.items()}, now)
        await self._insert_events(conn, mine)
        await self._join_conversations(conn, mine, now)
        await outbox.enqueue(conn, mine, now, self.dialect, routed=self.citus)
        return failed, done

    async def _join_conversations(
        self, conn: AsyncConnection, batches: Sequence[Append], now: float
    ) -> None:
        """A response that names a conversation and ends in this transaction adds its input
        and output items to the conversation, in the same transaction."""
        for batch in batches:
            final = joining(batch)
            if final is None or final.conversation is None:
                continue
            first = await conn.execute(
                sa.select(t_events.c.facts).where(
                    t_events.c.stream_id == batch.stream_id,
                    t_events.c.position == 0,
                    self._partition_of(batch.stream_id),
                )
            )
            facts = await blobs.resolve_facts(conn, first.scalar())
            asked = _asked.decode(facts) if facts else _Asked()
            items = conversation_items(asked.input, asked.extra, final.output)
            await join(conn, final.conversation.id, items, batch.stream_id, now)

    async def _already_written(
        self, conn: AsyncConnection, batches: Sequence[Append]
    ) -> dict[str, list[StoredEvent]]:
        """The batches whose exact rows are already in the log (an earlier attempt of this
        flush committed but its acknowledgement was lost)."""
        done: dict[str, list[StoredEvent]] = {}
        for batch in batches:
            query = (
                sa.select(*_READ_COLUMNS)
                .where(
                    t_events.c.stream_id == batch.stream_id,
                    t_events.c.position > batch.expected_version,
                    t_events.c.position <= batch.last,
                    self._partition_of(batch.stream_id),
                )
                .order_by(t_events.c.position)
            )
            rows = await conn.execute(query)
            stored = await blobs.resolve(conn, [_stored(batch.stream_id, r) for r in rows])
            mine = [(e.position, e.type, e.data) for e in batch.events]
            if [(e.position, e.type, e.data) for e in stored] == mine:
                done[batch.stream_id] = stored
        return done

    def begin_write(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A write transaction for the other tables of this database (the API keys)."""
        return self._begin_write()

    # --- dialect hooks --------------------------------------------------------------------

    def _begin_write(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A write transaction (SQLite takes its write lock up front)."""
        return self.engine.begin()

    async def _claim(
        self, conn: AsyncConnection, batches: Sequence[Append], now: float
    ) -> set[str]:
        """Create or advance the read-model rows whose guard holds; their ids."""
        raise NotImplementedError

    async def _insert_events(self, conn: AsyncConnection, batches: Sequence[Append]) -> None:
        raise NotImplementedError

    async def _notify(self, conn: AsyncConnection, stream_ids: Sequence[str]) -> None:
        """Ring other processes' doorbells for these streams (at commit); none by default."""


def joining(batch: Append) -> _Ended | None:
    """The final object of a response that ends in `batch` and names a conversation, which
    the same transaction must join its items to; None for any other batch."""
    life = batch.lifecycle
    if life is None or life.status not in TERMINAL_STATUSES:
        return None
    final = _ended.decode(life.snapshot)
    return final if final.conversation is not None else None


def _wrap(batch: Append, exc: sa_exc.DBAPIError) -> BaseException:
    if isinstance(exc, sa_exc.IntegrityError):
        conflict = conflict_of(batch)
        conflict.__cause__ = exc
        return conflict
    return store_error(exc)
