"""Prompt template streams on the same database as the responses (the `Prompts` port).

A new version is one event appended to the template's stream in `events` and its row in
`prompts` moved to that version, in one transaction. The append guard is the row's
`version`, as a conversation's (adapters/store/conversations.py): `UPDATE … SET version =
version + 1 … RETURNING version` takes the row lock (PostgreSQL) or the write lock
(SQLite), so two versions added at once get one position each. The first version inserts
the row; a concurrent first version of the same id fails on its primary key and is tried
again as the next version. Each version is linked into the stream's hash chain
(domain/chain.py) as a conversation's events are: from the row's head digest, read under
the same lock, which moves to the new event's. A version's images and files are stored
once, as a request's are (adapters/store/blobs.py).
"""

from __future__ import annotations

from typing import Any

import msgspec
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.store import blobs
from adapters.store.tables import events as t_events
from adapters.store.tables import prompts as t_prompts
from adapters.store.transient import guarded
from domain import chain
from domain.templates import PromptTemplate, VersionAdded
from service.ports import PromptSummary, PromptVersion

_event = msgspec.json.Decoder(VersionAdded)


class SqlPrompts:
    """`Prompts` over the store's engine (`begin_write` gives its transactions)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    @guarded
    async def add(
        self, prompt_id: str, owner: str, template: PromptTemplate, now: float
    ) -> int | None:
        for _ in range(2):  # a first version that lost its insert goes again as the next
            try:
                async with self._store.begin_write() as conn:
                    return await _add(conn, prompt_id, owner, template, now)
            except sa_exc.IntegrityError:
                continue
            except _NotTheirs:
                return None
        return None

    @guarded
    async def get(self, prompt_id: str) -> PromptSummary | None:
        async with self._store.engine.connect() as conn:
            row = (
                await conn.execute(sa.select(t_prompts).where(t_prompts.c.id == prompt_id))
            ).first()
        return None if row is None else _summary(row._mapping)

    @guarded
    async def version(self, prompt_id: str, version: int) -> PromptVersion | None:
        found = await self._store.read(prompt_id, after=version - 2, limit=1)
        if not found or found[0].position != version - 1:
            return None
        event = _event.decode(found[0].data)
        return PromptVersion(
            id=prompt_id,
            owner=event.owner,
            version=version,
            created_at=found[0].recorded_at,
            template=event.template,
        )

    @guarded
    async def summaries(self, owner: str | None, limit: int) -> list[PromptSummary]:
        c = t_prompts.c
        query = sa.select(t_prompts).order_by(c.updated_at.desc(), c.id.desc()).limit(limit)
        if owner is not None:
            query = query.where(c.owner == owner)
        async with self._store.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [_summary(r) for r in rows]


def _summary(row: Any) -> PromptSummary:
    """The row as the port gives it: `version` the latest version, where the column is its
    position in the stream (one less)."""
    return PromptSummary(
        id=row["id"],
        owner=row["owner"],
        version=row["version"] + 1,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class _NotTheirs(Exception):
    """Another owner has the id: the add's transaction is rolled back."""


async def _add(
    conn: AsyncConnection, prompt_id: str, owner: str, template: PromptTemplate, now: float
) -> int:
    """The next version, written (raises `_NotTheirs` if another owner has the id)."""
    # RETURNING gives the head digest as it was (this statement does not set it): the
    # previous link of the version appended here, read under the row's lock.
    moved = await conn.execute(
        t_prompts.update()
        .where(t_prompts.c.id == prompt_id)
        .values(version=t_prompts.c.version + 1, updated_at=now)
        .returning(t_prompts.c.version, t_prompts.c.owner, t_prompts.c.head_digest)
    )
    row = moved.first()
    head: str | None = None
    if row is None:
        await conn.execute(
            t_prompts.insert().values(
                id=prompt_id, owner=owner, created_at=now, updated_at=now, version=0
            )
        )
        position = 0
    elif row.owner != owner:
        raise _NotTheirs  # leaving the transaction's block rolls the update back
    else:
        position, head = int(row.version), row.head_digest
    event = VersionAdded(
        sequence_number=position, owner=owner, version=position + 1, template=template
    )
    wire = msgspec.json.encode(event)
    found: dict[str, str] = {}
    data = blobs.extract(wire.decode(), found)
    await blobs.store(conn, found, now)
    tag = str(event.__struct_config__.tag)
    # The content digest is of the bytes a reader receives: the event with its blobs in.
    previous = chain.GENESIS if position == 0 or head is None else bytes.fromhex(head)
    digest = chain.link(previous, prompt_id, position, tag, chain.content(wire, None)).hex()
    await conn.execute(
        t_events.insert().values(
            stream_id=prompt_id,
            position=position,
            type=tag,
            data=data,
            facts=None,
            recorded_at=now,
            digest=digest,
        )
    )
    await conn.execute(
        t_prompts.update().where(t_prompts.c.id == prompt_id).values(head_digest=digest)
    )
    return position + 1
