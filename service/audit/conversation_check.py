"""`verify` of a conversation's stream: its events, folded, must give its read model.

A conversation stream's rows are dense from 0, begin with `conversation.created` naming the
row's owner, and fold (items added in order, deleted ones flagged, the latest metadata, the
deletion) to exactly the `conversations` row and its `conversation_items` rows.
"""

from __future__ import annotations

import msgspec

from domain.conversations import (
    ConversationEvent,
    Created,
    ItemDeleted,
    ItemsAdded,
    Removed,
    Updated,
)
from service.audit.verify import Finding
from service.ports import ConversationRow, ItemRow, Rebuilt, StoredEvent

_event = msgspec.json.Decoder(ConversationEvent)


class Folded(msgspec.Struct, kw_only=True):
    owner: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    items: list[tuple[str, bool]] = msgspec.field(default_factory=list)  # (id, deleted)
    deleted: bool = False
    version: int = -1


def check_conversation(
    row: ConversationRow, events: list[StoredEvent], items: list[tuple[str, bool]]
) -> list[Finding]:
    """The violations of one conversation stream; `items` are its item rows in order."""
    cid, found, state = row.id, [], Folded()
    for expected, stored in enumerate(events):
        if stored.position != expected:
            return [Finding(stream_id=cid, position=expected, kind="gap", message="missing")]
        try:
            event = _event.decode(stored.data)
        except msgspec.DecodeError as exc:
            return [Finding(stream_id=cid, position=expected, kind="corrupt", message=str(exc))]
        problem = _fold(state, event, expected)
        if problem:
            found.append(
                Finding(stream_id=cid, position=expected, kind="transition", message=problem)
            )
    model = Folded(
        owner=row.owner,
        metadata=row.metadata,
        items=items,
        deleted=row.deleted_at is not None,
        version=row.version,
    )
    if not found and model != state:
        found.append(
            Finding(
                stream_id=cid,
                position=None,
                kind="read_model",
                message="the read model differs from the fold of the log",
            )
        )
    return found


def _fold(state: Folded, event: ConversationEvent, position: int) -> str | None:
    state.version = position
    if (position == 0) != isinstance(event, Created):
        return "a conversation stream begins with conversation.created, and only there"
    if event.sequence_number != position:
        return f"sequence_number {event.sequence_number} at position {position}"
    match event:
        case Created(conversation=c, owner=owner):
            state.owner, state.metadata = owner, dict(c.metadata)
        case ItemsAdded(items=added):
            known = {i for i, _ in state.items}
            for item in added:
                if item.id not in known:  # an item already there is not added again
                    known.add(item.id)
                    state.items.append((item.id, False))
        case ItemDeleted(item_id=item_id):
            state.items = [(i, d or i == item_id) for i, d in state.items]
        case Updated(metadata=metadata):
            state.metadata = dict(metadata)
        case Removed():
            state.deleted = True
    return None


# --- rebuilding the read model (import) -------------------------------------------------------


_items_encoder = msgspec.json.Encoder()


def rebuild(conversation_id: str, events: list[StoredEvent]) -> Rebuilt | None:
    """The read model a conversation's events make, as the store made it while they were
    appended: each append stamps `updated_at` and the event's `recorded_at` with the same
    time, an item already there is skipped (keeping its neighbours' `seq`), a delete stamps
    the item or the conversation. None if the stream does not begin with its creation."""
    decoded: list[ConversationEvent] = []
    for stored in events:
        try:
            decoded.append(_event.decode(stored.data))
        except msgspec.DecodeError:
            return None
    if not decoded or not isinstance(decoded[0], Created):
        return None
    first = decoded[0]
    metadata, deleted_at = dict(first.conversation.metadata), None
    items: list[ItemRow] = []
    known: dict[str, int] = {}
    for stored, event in zip(events, decoded, strict=True):
        match event:
            case ItemsAdded(items=added, response_id=rid):
                for seq, item in enumerate(added):
                    if item.id in known:
                        continue
                    known[item.id] = len(items)
                    data = _items_encoder.encode(item).decode()
                    items.append(
                        ItemRow(
                            position=stored.position,
                            seq=seq,
                            item_id=item.id,
                            data=data,
                            response_id=rid,
                        )
                    )
            case ItemDeleted(item_id=item_id) if item_id in known:
                i = known[item_id]
                if items[i].deleted_at is None:
                    items[i] = msgspec.structs.replace(items[i], deleted_at=stored.recorded_at)
            case Updated(metadata=new):
                metadata = dict(new)
            case Removed():
                deleted_at = stored.recorded_at
    row = ConversationRow(
        id=conversation_id,
        owner=first.owner,
        created_at=events[0].recorded_at,
        updated_at=events[-1].recorded_at,
        version=events[-1].position,
        metadata=metadata,
        deleted_at=deleted_at,
    )
    return Rebuilt(row=row, items=items)
