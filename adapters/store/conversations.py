"""Conversation streams on the same database as the responses (the `Conversations` port).

Each change appends one event to the conversation's stream in `events` and updates its
read model (`conversations`, `conversation_items`) in the same transaction. The append
guard is the row's `version`: `UPDATE … SET version = version + 1 … RETURNING version`
takes the row lock (PostgreSQL) or the write lock (SQLite), so concurrent appends to one
conversation queue and each gets the next position; none is lost or interleaved inside
another. `join` is the same append inside the log writer's transaction, when a response
that names the conversation ends (adapters/store/sql.py), so a response never ends
without its items in the conversation, nor do items join from a response that did not end.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.store import blobs
from adapters.store.tables import conversation_items as t_items
from adapters.store.tables import conversations as t_conv
from adapters.store.tables import events as t_events
from adapters.store.transient import guarded
from domain import chain
from domain.conversations import (
    ConversationEvent,
    ConversationItem,
    ConversationObject,
    Created,
    ItemDeleted,
    ItemsAdded,
    Removed,
    Updated,
)
from domain.errors import DuplicateItems
from service.ports import AuditedItem, ConversationItems, ConversationRow, ConversationSummary

_item = msgspec.json.Decoder(ConversationItem)
_meta = msgspec.json.Decoder(dict[str, str])


class SqlConversations:
    """`Conversations` over the store's engine (`begin_write` gives its transactions), and
    `ConversationAudit` (an auditor's reads, below)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    @guarded
    async def create(
        self,
        conversation: ConversationObject,
        owner: str,
        items: list[ConversationItem],
        now: float,
    ) -> None:
        async with self._store.begin_write() as conn:
            await conn.execute(
                t_conv.insert().values(
                    id=conversation.id,
                    owner=owner,
                    created_at=now,
                    updated_at=now,
                    version=-1,
                    metadata=msgspec.json.encode(conversation.metadata).decode(),
                )
            )
            await append(
                conn,
                conversation.id,
                Created(sequence_number=0, conversation=conversation, owner=owner),
                now,
            )
            if items:
                await _add(conn, conversation.id, items, None, now)

    @guarded
    async def get(self, conversation_id: str) -> ConversationRow | None:
        async with self._store.engine.connect() as conn:
            row = (
                await conn.execute(sa.select(t_conv).where(t_conv.c.id == conversation_id))
            ).first()
        if row is None:
            return None
        m = row._mapping
        return ConversationRow(
            id=m["id"],
            owner=m["owner"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            version=m["version"],
            metadata=_meta.decode(m["metadata"]),
            deleted_at=m["deleted_at"],
        )

    @guarded
    async def update(self, conversation_id: str, metadata: dict[str, str], now: float) -> bool:
        async with self._store.begin_write() as conn:
            position = await append(
                conn, conversation_id, Updated(sequence_number=0, metadata=metadata), now
            )
            if position is None:
                return False
            await conn.execute(
                t_conv.update()
                .where(t_conv.c.id == conversation_id)
                .values(metadata=msgspec.json.encode(metadata).decode())
            )
        return True

    @guarded
    async def delete(self, conversation_id: str, now: float) -> bool:
        async with self._store.begin_write() as conn:
            if await append(conn, conversation_id, Removed(sequence_number=0), now) is None:
                return False
            await conn.execute(
                t_conv.update().where(t_conv.c.id == conversation_id).values(deleted_at=now)
            )
        return True

    @guarded
    async def add_items(
        self, conversation_id: str, items: list[ConversationItem], now: float
    ) -> bool:
        async with self._store.begin_write() as conn:
            return await _add(conn, conversation_id, items, None, now, refuse_taken=True)

    @guarded
    async def items(
        self,
        conversation_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: str = "asc",
        listing: bool = False,
    ) -> ConversationItems:
        newest_first = order == "desc"
        key = (t_items.c.position, t_items.c.seq)
        query = sa.select(t_items.c.data).where(
            t_items.c.conversation_id == conversation_id, t_items.c.deleted_at.is_(None)
        )

        async def page(conn: AsyncConnection) -> tuple[list[Any], dict[str, str]] | None:
            # Built anew each time: a read the replica failed is run again on the primary.
            wanted = query
            if after is not None:
                mark = (
                    await conn.execute(
                        sa.select(*key).where(
                            t_items.c.conversation_id == conversation_id,
                            t_items.c.item_id == after,
                        )
                    )
                ).first()
                if mark is None:
                    return None
                row = sa.tuple_(*key)
                wanted = wanted.where(row < tuple(mark) if newest_first else row > tuple(mark))
            wanted = wanted.order_by(*(c.desc() if newest_first else c for c in key))
            if limit is not None:
                wanted = wanted.limit(limit + 1)
            rows = [r[0] for r in await conn.execute(wanted)]
            return rows, await blobs.load(conn, {d for r in rows for d in blobs.references(r)})

        if listing:
            read = await self._store.reading(page)
        else:
            async with self._store.engine.connect() as conn:
                read = await page(conn)
        if read is None:
            return ConversationItems(items=[], has_more=False)
        rows, found = read
        rows = [blobs.put_back(r, found) for r in rows]
        more = limit is not None and len(rows) > limit
        kept = rows[:limit] if limit is not None else rows
        return ConversationItems(items=[_item.decode(d) for d in kept], has_more=more)

    @guarded
    async def item(self, conversation_id: str, item_id: str) -> ConversationItem | None:
        # The unique index on (conversation_id, item_id) finds it.
        query = sa.select(t_items.c.data).where(
            t_items.c.conversation_id == conversation_id,
            t_items.c.item_id == item_id,
            t_items.c.deleted_at.is_(None),
        )
        async with self._store.engine.connect() as conn:
            data = (await conn.execute(query)).scalar()
            if data is None:
                return None
            found = await blobs.load(conn, set(blobs.references(data)))
        return _item.decode(blobs.put_back(data, found))

    @guarded
    async def delete_item(self, conversation_id: str, item_id: str, now: float) -> bool:
        try:
            async with self._store.begin_write() as conn:
                # The append first: it finds the conversation not deleted, and its row lock
                # queues every other change to it until this one commits.
                event = ItemDeleted(sequence_number=0, item_id=item_id)
                if await append(conn, conversation_id, event, now) is None:
                    return False
                hit = await conn.execute(
                    t_items.update()
                    .where(
                        t_items.c.conversation_id == conversation_id,
                        t_items.c.item_id == item_id,
                        t_items.c.deleted_at.is_(None),
                    )
                    .values(deleted_at=now)
                )
                if hit.rowcount != 1:
                    raise _NoSuchItem  # leaving the block rolls the append back
        except _NoSuchItem:
            return False
        return True

    async def summaries(
        self,
        owner: str | None,
        limit: int,
        *,
        since: float | None = None,
        until: float | None = None,
        after: str | None = None,
    ) -> list[ConversationSummary]:
        return await summaries(self._store, owner, limit, since=since, until=until, after=after)

    async def ids(self) -> list[str]:
        return await conversation_ids(self._store)

    async def audited_items(self, conversation_id: str) -> list[AuditedItem]:
        return await audited_items(self._store, conversation_id)


class _NoSuchItem(Exception):
    """No visible item of that id: the delete's transaction is rolled back."""


async def summaries(
    store: Any,
    owner: str | None,
    limit: int,
    *,
    since: float | None = None,
    until: float | None = None,
    after: str | None = None,
) -> list[ConversationSummary]:
    """Conversations newest first (deleted ones too), with their live item counts; created
    from `since` (inclusive) to `until` (exclusive), and after the conversation `after`
    (the last id of the previous page)."""
    count = (
        sa.select(sa.func.count())
        .where(t_items.c.conversation_id == t_conv.c.id, t_items.c.deleted_at.is_(None))
        .scalar_subquery()
    )
    query = sa.select(t_conv, count.label("items")).order_by(
        t_conv.c.created_at.desc(), t_conv.c.id.desc()
    )
    c = t_conv.c
    if owner is not None:
        query = query.where(c.owner == owner)
    if since is not None:
        query = query.where(c.created_at >= since)
    if until is not None:
        query = query.where(c.created_at < until)
    if after is not None:
        made = sa.select(c.created_at).where(c.id == after).scalar_subquery()
        query = query.where(
            sa.or_(c.created_at < made, sa.and_(c.created_at == made, c.id < after))
        )

    async def read(conn: AsyncConnection) -> Sequence[sa.RowMapping]:
        return (await conn.execute(query.limit(limit))).mappings().all()

    rows = await store.reading(read)
    return [
        ConversationSummary(
            id=r["id"],
            owner=r["owner"],
            created_at=r["created_at"],
            items=r["items"],
            deleted=r["deleted_at"] is not None,
        )
        for r in rows
    ]


async def conversation_ids(store: Any, page: int = 1000) -> list[str]:
    """Every conversation's id (for `verify --all`), a page of the table at a time."""
    found: list[str] = []
    while True:
        query = sa.select(t_conv.c.id).order_by(t_conv.c.id).limit(page)
        if found:
            query = query.where(t_conv.c.id > found[-1])
        ids: list[str] = await store.reading(functools.partial(_scalars, query=query))
        found += ids
        if len(ids) < page:
            return found


async def _scalars(conn: AsyncConnection, query: sa.Select[Any]) -> list[Any]:
    return list((await conn.execute(query)).scalars())


async def audited_items(store: Any, conversation_id: str) -> list[AuditedItem]:
    """Every item of the conversation in its order, deleted ones included."""
    query = (
        sa.select(t_items)
        .where(t_items.c.conversation_id == conversation_id)
        .order_by(t_items.c.position, t_items.c.seq)
    )

    async def read(conn: AsyncConnection) -> tuple[Sequence[sa.RowMapping], dict[str, str]]:
        rows = (await conn.execute(query)).mappings().all()
        refs = {d for r in rows for d in blobs.references(r["data"])}
        return rows, await blobs.load(conn, refs)

    rows, found = await store.reading(read)
    return [
        AuditedItem(
            item=_item.decode(blobs.put_back(r["data"], found)),
            response_id=r["response_id"],
            deleted=r["deleted_at"] is not None,
        )
        for r in rows
    ]


async def append(
    conn: AsyncConnection, conversation_id: str, event: ConversationEvent, now: float
) -> int | None:
    """Append `event` at the conversation's next position (its `sequence_number` is set
    to it); None, with nothing written, if the conversation is gone."""
    # RETURNING gives the head digest as it was (this statement does not set it): the
    # previous link of the event appended here, read under the row's lock.
    moved = await conn.execute(
        t_conv.update()
        .where(t_conv.c.id == conversation_id, t_conv.c.deleted_at.is_(None))
        .values(version=t_conv.c.version + 1, updated_at=now)
        .returning(t_conv.c.version, t_conv.c.head_digest)
    )
    row = moved.first()
    if row is None:
        return None
    position, head = int(row[0]), row[1]
    return await _write(conn, conversation_id, position, head, event, now)


async def _write(
    conn: AsyncConnection,
    conversation_id: str,
    position: int,
    head: str | None,
    event: ConversationEvent,
    now: float,
) -> int:
    """The event at `position`, linked to `head` (the previous event's digest), and the
    row's head digest moved to it."""
    event = msgspec.structs.replace(event, sequence_number=position)
    wire = msgspec.json.encode(event)
    # Its images and files are stored once (adapters/store/blobs.py), as a request's are.
    found: dict[str, str] = {}
    data = blobs.extract(wire.decode(), found)
    await blobs.store(conn, found, now)
    tag = str(type(event).__struct_config__.tag)
    previous = chain.GENESIS if position == 0 or head is None else bytes.fromhex(head)
    digest = chain.link(previous, conversation_id, position, tag, chain.content(wire, None))
    await conn.execute(
        t_events.insert().values(
            stream_id=conversation_id,
            position=position,
            type=tag,
            data=data,
            facts=None,
            recorded_at=now,
            digest=digest.hex(),
        )
    )
    await conn.execute(
        t_conv.update().where(t_conv.c.id == conversation_id).values(head_digest=digest.hex())
    )
    return position


async def join(
    conn: AsyncConnection,
    conversation_id: str,
    items: Sequence[ConversationItem],
    response_id: str,
    now: float | None = None,
) -> bool:
    """A response's items join its conversation, inside the writer's transaction."""
    return await _add(conn, conversation_id, list(items), response_id, now or time.time())


async def _add(
    conn: AsyncConnection,
    conversation_id: str,
    items: list[ConversationItem],
    response_id: str | None,
    now: float,
    *,
    refuse_taken: bool = False,
) -> bool:
    event = ItemsAdded(sequence_number=0, items=items, response_id=response_id)
    position = await append(conn, conversation_id, event, now)
    if position is None:
        return False
    if refuse_taken and items:
        # After the append, whose row lock queues every other change to this conversation,
        # so no item can arrive between this read and the insert. Raising rolls the append
        # back: nothing of the request is written.
        taken = await conn.execute(
            sa.select(t_items.c.item_id).where(
                t_items.c.conversation_id == conversation_id,
                t_items.c.item_id.in_([item.id for item in items]),
            )
        )
        if ids := frozenset(taken.scalars()):
            raise DuplicateItems(ids)
    if items:
        # An item already in the conversation (an id a client passed again) is not added
        # twice: the insert skips it rather than failing the transaction, which for a
        # response's join is the log writer's.
        insert = (pg_insert if conn.dialect.name == "postgresql" else sqlite_insert)(t_items)
        found: dict[str, str] = {}  # the event stored them already; this only swaps
        await conn.execute(
            insert.on_conflict_do_nothing(),
            [
                {
                    "conversation_id": conversation_id,
                    "position": position,
                    "seq": seq,
                    "item_id": item.id,
                    "data": blobs.extract(msgspec.json.encode(item).decode(), found),
                    "response_id": response_id,
                }
                for seq, item in enumerate(items)
            ],
        )
    return True
