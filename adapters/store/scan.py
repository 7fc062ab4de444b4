"""Streaming reads of the whole log for the admin tools: read-model rows in keyset pages,
each followed by its events, in memory bounded by the page sizes.

Rows are paged by `(created_at, id)` and events by `(stream_id, position)`, always compared in
SQL, so the database's own ordering (its collation) is the only one that matters. Nothing is
read by a global sequence: docs/storage.md explains why such a feed skips rows.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.store.sql import SqlEventStore
from adapters.store.tables import conversations as t_conversations
from adapters.store.tables import events as t_events
from adapters.store.tables import prompts as t_prompts
from adapters.store.tables import responses as t_responses
from adapters.store.tables import row_of
from adapters.store.transient import guarded, guarded_iter
from service.ports import Head, Key, ResponsePage, ResponseRow, Selection, StoredEvent

_CHUNK = 500  # ids per IN (...) list
_KEYS_PAGE = 10_000  # rows' keys per page for `cuts`


def _where(selection: Selection) -> list[sa.ColumnElement[bool]]:
    c = t_responses.c
    conds: list[sa.ColumnElement[bool]] = []
    key = sa.tuple_(c.created_at, c.id)
    if selection.after is not None:
        conds.append(key > sa.tuple_(*selection.after))
    if selection.through is not None:
        conds.append(key <= sa.tuple_(*selection.through))
    if selection.owner is not None:
        conds.append(c.owner == selection.owner)
    if selection.since is not None:
        conds.append(c.created_at >= selection.since)
    if selection.until is not None:
        conds.append(c.created_at < selection.until)
    if selection.statuses is not None:
        conds.append(c.status.in_(selection.statuses))
    return conds


def _page(selection: Selection, key: Key | None, limit: int, *columns: Any) -> sa.Select[Any]:
    """A keyset page of the selected rows in the scan's order, after `key` (which is past
    the selection's own `after`, where it has one)."""
    if key is not None:
        selection = msgspec.structs.replace(selection, after=key)
    c = t_responses.c
    return sa.select(*columns).where(*_where(selection)).order_by(c.created_at, c.id).limit(limit)


class LogScan:
    """Reads for `verify`, `export` and the other admin commands (the `LogReader` and
    `StreamScan` ports)."""

    def __init__(self, store: SqlEventStore, *, rows_page: int = 50, events_page: int = 200):
        self.store = store
        self.rows_page = rows_page
        self.events_page = events_page

    @guarded
    async def record(self, response_id: str) -> ResponseRow | None:
        query = sa.select(t_responses).where(t_responses.c.id == response_id)
        rows = await self._all(query)
        return None if not rows else row_of(rows[0])

    @guarded
    async def count(self, selection: Selection) -> int:
        query = sa.select(sa.func.count()).select_from(t_responses).where(*_where(selection))
        return int((await self._all(query))[0][0])

    @guarded
    async def cuts(self, selection: Selection, parts: int) -> list[Key]:
        """Up to `parts - 1` keys that split the selected streams into `parts` slices of
        about as many events (a row weighs its `version` + 1: its stream's events when it was
        read), never an empty one: slice i is `after=cuts[i-1], through=cuts[i]`, the first
        with no `after`, the last with no `through`. Events, not rows, because streams differ
        a hundredfold in length and a part's time is its events'. One pass over the rows'
        keys and versions (`ix_responses_created`, then the heap), in keyset pages."""
        c = t_responses.c
        weight = c.version + 1
        query = sa.select(sa.func.coalesce(sa.func.sum(weight), 0)).where(*_where(selection))
        total = int((await self._all(query))[0][0])
        targets = [total * i / parts for i in range(1, parts)]
        keys: list[Key] = []
        seen, previous = 0, None
        key: Key | None = None
        while targets:
            page_query = _page(selection, key, _KEYS_PAGE, c.created_at, c.id, weight)
            page = [(float(r[0]), str(r[1]), int(r[2])) for r in await self._all(page_query)]
            for created_at, rid, events in page:
                before, seen = seen, seen + events
                while targets and seen > targets[0]:  # this row crosses a target:
                    target = targets.pop(0)  # cut on whichever side of it is nearer
                    cut = (created_at, rid) if seen - target <= target - before else previous
                    if cut is not None and (not keys or keys[-1] != cut):
                        keys.append(cut)
                previous = (created_at, rid)
            if len(page) < _KEYS_PAGE:
                break
            key = previous
        if keys and not await self._any_after(selection, keys[-1]):
            keys.pop()  # a cut after the last row would leave the last part nothing
        return keys

    async def _any_after(self, selection: Selection, key: Key) -> bool:
        query = _page(selection, key, 1, t_responses.c.id)
        return bool(await self._all(query))

    @guarded_iter
    async def records(self, selection: Selection) -> AsyncGenerator[list[ResponseRow], None]:
        """The selected rows, oldest first, a page at a time."""
        key: Key | None = None
        while True:
            query = _page(selection, key, self.rows_page, t_responses)
            page = [row_of(r) for r in await self._all(query)]
            if page:
                yield page
            if len(page) < self.rows_page:
                return
            key = (page[-1].created_at, page[-1].id)

    async def _all(self, query: sa.Select[Any]) -> Sequence[Any]:
        """The rows of `query`, read where the store reads listings (`reading`: the
        replica once it has caught up, else the primary)."""

        async def read(conn: AsyncConnection) -> Sequence[Any]:
            rows: Sequence[Any] = (await conn.execute(query)).all()
            return rows

        return await self.store.reading(read)

    async def page(self, **filters: Any) -> ResponsePage:
        """The read model's rows newest first, filtered (`ReadModel.list`)."""
        return await self.store.list(**filters)

    async def events(self, stream_id: str, after: int = -1) -> AsyncIterator[StoredEvent]:
        """One stream's events after `after`, in order, a page at a time."""
        while True:
            page = await self.store.read(stream_id, after, self.events_page)
            for stored in page:
                yield stored
            if len(page) < self.events_page:
                return
            after = page[-1].position

    async def streams(self, selection: Selection) -> AsyncIterator[Head | StoredEvent]:
        """Each selected response's `Head`, then its events in order, oldest response first."""
        async for page in self.records(selection):
            async for item in self._emit([Head(r.id, r) for r in page]):
                yield item

    async def streams_of(self, ids: Sequence[str]) -> AsyncIterator[Head | StoredEvent]:
        """The same for the given ids (a row that is missing gives a `Head` without one)."""
        for start in range(0, len(ids), self.rows_page):
            chunk = list(ids[start : start + self.rows_page])
            found = await self._records_by_id(chunk)
            async for item in self._emit([Head(i, found.get(i)) for i in chunk]):
                yield item

    async def orphans(self) -> AsyncIterator[Head | StoredEvent]:
        """Response streams with events but no read-model row (a conversation's stream has
        a row of its own, in `conversations`, and a prompt's in `prompts`)."""
        async for chunk in self._orphan_ids():
            async for item in self._emit([Head(i, None) for i in chunk]):
                yield item

    @guarded_iter
    async def _orphan_ids(self) -> AsyncGenerator[list[str], None]:
        e, r, c, p = t_events.c, t_responses.c, t_conversations.c, t_prompts.c
        after: str | None = None
        while True:
            query = (
                sa.select(e.stream_id)
                .distinct()
                .where(~sa.exists().where(r.id == e.stream_id))
                .where(~sa.exists().where(c.id == e.stream_id))
                .where(~sa.exists().where(p.id == e.stream_id))
                .order_by(e.stream_id)
                .limit(self.rows_page)
            )
            if after is not None:
                query = query.where(e.stream_id > after)
            ids = [str(r[0]) for r in await self._all(query)]
            if ids:
                yield ids
            if len(ids) < self.rows_page:
                return
            after = ids[-1]

    @guarded
    async def existing(self, ids: Sequence[str]) -> set[str]:
        """Which of `ids` have a read-model row (a response's or a conversation's) or any
        event."""

        async def read(conn: AsyncConnection) -> set[str]:
            found: set[str] = set()
            for start in range(0, len(ids), _CHUNK):
                chunk = list(ids[start : start + _CHUNK])
                rows = sa.select(t_responses.c.id).where(t_responses.c.id.in_(chunk))
                logs = sa.select(t_events.c.stream_id).where(t_events.c.stream_id.in_(chunk))
                chats = sa.select(t_conversations.c.id).where(t_conversations.c.id.in_(chunk))
                found.update((await conn.execute(rows)).scalars())
                found.update((await conn.execute(chats)).scalars())
                found.update((await conn.execute(logs.distinct())).scalars())
            return found

        return await self.store.reading(read)

    @guarded
    async def _records_by_id(self, ids: Sequence[str]) -> dict[str, ResponseRow]:
        query = sa.select(t_responses).where(t_responses.c.id.in_(ids))
        return {rec.id: rec for rec in map(row_of, await self._all(query))}

    async def _emit(self, heads: Sequence[Head]) -> AsyncIterator[Head | StoredEvent]:
        """The first page of every stream in one read (one query on PostgreSQL), then each
        stream in turn, reading on where a stream is longer than a page."""
        first = await self.store.read_many([(h.stream_id, -1) for h in heads], self.events_page)
        by_stream: dict[str, list[StoredEvent]] = {}
        for stored in first:
            by_stream.setdefault(stored.stream_id, []).append(stored)
        for head in heads:
            yield head
            page = sorted(by_stream.pop(head.stream_id, []), key=lambda s: s.position)
            for stored in page:
                yield stored
            if len(page) == self.events_page:
                async for stored in self.events(head.stream_id, page[-1].position):
                    yield stored
