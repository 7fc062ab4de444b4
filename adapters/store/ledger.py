"""The `Ledger` port: the hash chain's reads over the whole log, the checkpoint table and
erasure (service/audit/chain.py, service/audit/erasing.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.store import blobs
from adapters.store.sql import SqlEventStore
from adapters.store.tables import checkpoints as t_checkpoints
from adapters.store.tables import conversation_items as t_items
from adapters.store.tables import conversations as t_conversations
from adapters.store.tables import erasures as t_erasures
from adapters.store.tables import events as t_events
from adapters.store.tables import prompts as t_prompts
from adapters.store.tables import responses as t_responses
from adapters.store.transient import guarded
from service.ports import ChainHead, ChainRow, Erasure, SavedCheckpoint, StoredEvent

_PAGE = 2000


class SqlLedger:
    def __init__(self, store: SqlEventStore) -> None:
        self.store = store

    @guarded
    async def heads(self) -> list[ChainHead]:
        async def read(conn: AsyncConnection) -> list[ChainHead]:
            found: list[ChainHead] = []
            for table in (t_responses, t_conversations, t_prompts):
                c = table.c
                query = sa.select(c.id, c.version, c.head_digest).order_by(c.id)
                found += [ChainHead(*row) for row in await conn.execute(query)]
            return found

        return await self.store.reading(read)

    async def rows(self, stream_ids: Sequence[str] | None = None) -> AsyncIterator[list[ChainRow]]:
        e = t_events.c
        columns = (e.stream_id, e.position, e.type, e.data, e.facts, e.digest, e.content_digest)
        if stream_ids is not None:
            for sid in stream_ids:
                query = sa.select(*columns).where(e.stream_id == sid).order_by(e.position)
                page = await self._page(query)
                if page:
                    yield page
            return
        after: tuple[str, int] | None = None
        while True:
            query = sa.select(*columns).order_by(e.stream_id, e.position).limit(_PAGE)
            if after is not None:
                query = query.where(sa.tuple_(e.stream_id, e.position) > sa.tuple_(*after))
            page = await self._page(query)
            if not page:
                return
            yield page
            after = (page[-1].stream_id, page[-1].position)

    @guarded
    async def _page(self, query: sa.Select[Any]) -> list[ChainRow]:
        async def read(conn: AsyncConnection) -> tuple[Sequence[Any], list[StoredEvent]]:
            rows = (await conn.execute(query)).all()
            stored = [
                StoredEvent(sid, pos, typ, data.encode(), None if f is None else f.encode(), 0.0)
                for sid, pos, typ, data, f, _, _ in rows
            ]
            return rows, await blobs.resolve(conn, stored)

        rows, resolved = await self.store.reading(read)
        return [
            ChainRow(s.stream_id, s.position, s.type, s.data, s.facts, row[5], row[6])
            for s, row in zip(resolved, rows, strict=True)
        ]

    @guarded
    async def save_checkpoint(self, created_at: float, root: str, body: bytes) -> int:
        async with self.store.begin_write() as conn:
            result = await conn.execute(
                sa.insert(t_checkpoints)
                .values(created_at=created_at, root=root, body=body.decode())
                .returning(t_checkpoints.c.id)
            )
            return int(result.scalar_one())

    @guarded
    async def latest_checkpoint(self) -> SavedCheckpoint | None:
        c = t_checkpoints.c
        query = sa.select(c.id, c.created_at, c.body).order_by(c.id.desc()).limit(1)

        async def read(conn: AsyncConnection) -> Any:
            return (await conn.execute(query)).first()

        row = await self.store.reading(read)
        if row is None:
            return None
        return SavedCheckpoint(number=row[0], created_at=row[1], body=row[2].encode())

    @guarded
    async def erasures(self, stream_ids: Sequence[str] | None = None) -> list[Erasure]:
        c = t_erasures.c
        query = sa.select(c.stream_id, c.erased_at, c.reason).order_by(c.stream_id)
        if stream_ids is not None:
            query = query.where(c.stream_id.in_(list(stream_ids)))

        async def read(conn: AsyncConnection) -> Sequence[Any]:
            return (await conn.execute(query)).all()

        rows = await self.store.reading(read)
        return [Erasure(stream_id=r[0], erased_at=r[1], reason=r[2]) for r in rows]

    @guarded
    async def erase(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes, bytes | None, str]],
        erasure: Erasure,
        snapshot: bytes | None = None,
        items: Sequence[tuple[str, bytes]] = (),
        metadata: bytes | None = None,
    ) -> None:
        """The erased events, the row's snapshot (a response's) and item rows (a
        conversation's) replaced, and the erasure recorded, in one transaction; then the
        blobs nothing refers to any more are swept (`blobs.sweep` with no grace)."""
        e = t_events.c
        sqlite = self.store.dialect == "sqlite"
        async with self.store.begin_write() as conn:
            if sqlite:
                # The old bytes are overwritten with zeros where SQLite frees them, not
                # left in free pages of the file.
                await conn.exec_driver_sql("PRAGMA secure_delete = ON")
            for position, data, facts, content in events:
                await conn.execute(
                    sa.update(t_events)
                    .where(e.stream_id == stream_id, e.position == position)
                    .values(
                        data=data.decode(),
                        facts=None if facts is None else facts.decode(),
                        content_digest=content,
                    )
                )
            if snapshot is not None:
                await conn.execute(
                    sa.update(t_responses)
                    .where(t_responses.c.id == stream_id)
                    .values(snapshot=snapshot.decode())
                )
            if metadata is not None:
                await conn.execute(
                    sa.update(t_conversations)
                    .where(t_conversations.c.id == stream_id)
                    .values(metadata=metadata.decode())
                )
            for item_id, data in items:
                await conn.execute(
                    sa.update(t_items)
                    .where(t_items.c.conversation_id == stream_id, t_items.c.item_id == item_id)
                    .values(data=data.decode())
                )
            await conn.execute(
                sa.insert(t_erasures).values(
                    stream_id=stream_id, erased_at=erasure.erased_at, reason=erasure.reason
                )
            )
            await self.store.chains_broken(conn)  # a chain that holds it is no longer continued
            await blobs.sweep(conn, erasure.erased_at)
        if sqlite:
            # The write-ahead log still holds the pages as they were: fold it into the file
            # and empty it (a reader holding an old snapshot can delay this; docs/guides/
            # auditing.md says how to make erasure complete).
            async with self.store.engine.connect() as conn:
                await conn.exec_driver_sql("PRAGMA secure_delete = OFF")
                await conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
