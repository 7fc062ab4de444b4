"""Writing an imported log (the `Archive` port): whole streams (their rows exactly as
exported, their read-model row as rebuilt) in one transaction per batch, so no stream is
ever half there."""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc

from adapters.store import blobs
from adapters.store.scan import LogScan
from adapters.store.sql import SqlEventStore
from adapters.store.tables import conversation_items as t_items
from adapters.store.tables import conversations as t_conversations
from adapters.store.tables import events as t_events
from adapters.store.tables import responses as t_responses
from adapters.store.tables import values_of
from adapters.store.transient import guarded
from domain import chain
from domain.errors import Conflict
from domain.events import LIFECYCLE_TAGS, LIFECYCLE_TYPES
from service.ports import Imported, ImportedConversation, StoredEvent


def _data(event: StoredEvent, found: dict[str, str]) -> str:
    """The event's data as a create stores it: its large parts as references."""
    data = event.data.decode()
    if event.type not in LIFECYCLE_TAGS or len(event.data) < blobs.PART_THRESHOLD:
        return data
    decoded = event.event()  # the import checked every event decodes
    if not isinstance(decoded, LIFECYCLE_TYPES):
        return data
    return blobs.extract_parts(data, blobs.large_parts(decoded.response), found)


def _chain(events: Sequence[StoredEvent]) -> list[str]:
    """The digests of a stream's events (whole, from position 0, as imported), as the
    writer links them (domain/chain.py): a stream imported is chained afresh from its
    bytes (an erased one's chain is then that of its erased bytes)."""
    digests: list[str] = []
    previous = chain.GENESIS
    for e in events:
        content = chain.content(e.data, e.facts)
        previous = chain.link(previous, e.stream_id, e.position, e.type, content)
        digests.append(previous.hex())
    return digests


@guarded
async def insert(store: SqlEventStore, streams: Sequence[Imported | ImportedConversation]) -> None:
    """Insert the streams in one transaction; `Conflict` (and nothing written) if any of
    them exists by now. A conversation gets its rows as rebuilt from its events."""
    digests = {s.events[0].stream_id: _chain(s.events) for s in streams if s.events}
    heads = {sid: d[-1] for sid, d in digests.items()}
    rows = [
        {**values_of(s.record), "head_digest": heads.get(s.record.id)}
        for s in streams
        if isinstance(s, Imported)
    ]
    chats = [s.rebuilt for s in streams if isinstance(s, ImportedConversation)]
    conversations = [
        {
            "head_digest": heads.get(c.row.id),
            "id": c.row.id,
            "owner": c.row.owner,
            "created_at": c.row.created_at,
            "updated_at": c.row.updated_at,
            "version": c.row.version,
            "metadata": msgspec.json.encode(c.row.metadata).decode(),
            "deleted_at": c.row.deleted_at,
        }
        for c in chats
    ]
    # The archive holds the facts as a client sent them (the export resolved the blobs);
    # the large data URLs go back into `blobs`, once, as a create would store them (a
    # conversation's events and item rows refer to them too).
    found: dict[str, str] = {}
    items = [
        {
            "conversation_id": c.row.id,
            **msgspec.structs.asdict(i),
            "data": blobs.extract(i.data, found),
        }
        for c in chats
        for i in c.items
    ]
    events = [
        {
            "stream_id": e.stream_id,
            "position": e.position,
            "type": e.type,
            "data": _data(e, found)
            if isinstance(s, Imported)
            else blobs.extract(e.data.decode(), found),
            "facts": None if e.facts is None else blobs.extract(e.facts.decode(), found),
            "recorded_at": e.recorded_at,
            "digest": digests[e.stream_id][e.position],
        }
        for s in streams
        for e in s.events
    ]
    try:
        async with store._begin_write() as conn:
            await blobs.store(conn, found, time.time())
            if rows:
                await conn.execute(sa.insert(t_responses), rows)
            if conversations:
                await conn.execute(sa.insert(t_conversations), conversations)
            if items:
                await conn.execute(sa.insert(t_items), items)
            await conn.execute(sa.insert(t_events), events)
    except sa_exc.IntegrityError:
        ids = ", ".join(s.events[0].stream_id for s in streams[:3] if s.events)
        raise Conflict(
            f"a stream of this batch ({ids}, …) was created while importing; "
            "the batch was not written"
        ) from None


class SqlArchive:
    """`Archive` over the store: `insert` below, and `LogScan`'s `existing`."""

    def __init__(self, store: SqlEventStore) -> None:
        self.store = store

    async def existing(self, ids: Sequence[str]) -> set[str]:
        return await LogScan(self.store).existing(ids)

    async def insert(self, streams: Sequence[Imported | ImportedConversation]) -> None:
        await insert(self.store, streams)
