"""The Conversations API's use-cases (one per route), over the `Conversations` port.

A conversation is visible to its owner until deleted: another owner's, or a deleted one, is
the same 404 as an id that never existed. Items added through the API get ids of the
server's (`<prefix>_<conversation id's suffix>_<16 random hex digits>`) unless the client
named them; a reference finds one by its id (service/prompts/references.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Sequence

import msgspec

from domain.conversations import (
    MAX_ITEMS_PER_REQUEST,
    ConversationDeleted,
    ConversationItem,
    ConversationObject,
)
from domain.errors import DuplicateItems, InvalidRequest, NotFound
from domain.objects import (
    INPUT_ID_PREFIX,
    ItemReference,
    SetAsideItem,
)
from service.bundle import Bundle
from service.ids import new_id
from service.ports import Batches, ConversationItems, ConversationRow
from service.prompts.references import conversation_items_of
from service.responses.reads import stored_now

_PREFIX: dict[type, str] = {**INPUT_ID_PREFIX, SetAsideItem: "item"}


def new_conversation_id(now: float) -> str:
    return new_id("conv", now)


def _not_found(conversation_id: str) -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.")


def _object(row: ConversationRow) -> ConversationObject:
    return ConversationObject(id=row.id, created_at=int(row.created_at), metadata=row.metadata)


async def visible(svc: Bundle, conversation_id: str, owner: str) -> ConversationRow:
    row = await svc.conversations.get(conversation_id)
    if row is None or row.owner != owner or row.deleted_at is not None:
        raise _not_found(conversation_id)
    return row


async def _given(
    svc: Bundle,
    conversation_id: str,
    items: Sequence[ConversationItem | ItemReference],
    owner: str,
) -> list[ConversationItem]:
    """The items a request adds: at most OpenAI's number, each reference replaced by the
    item it names (service/prompts/references.py), and ids of the server's for the unnamed."""
    if len(items) > MAX_ITEMS_PER_REQUEST:
        raise InvalidRequest(
            f"Invalid 'items': too many items ({len(items)}; the limit is "
            f"{MAX_ITEMS_PER_REQUEST}).",
            param="items",
            code="array_above_max_length",
        )
    return _with_ids(conversation_id, await conversation_items_of(svc, items, owner))


def _with_ids(conversation_id: str, items: list[ConversationItem]) -> list[ConversationItem]:
    # The whole conversation id, so that an `item_reference` finds the item from its id
    # alone (service/prompts/references.py), as a response's items are found from theirs.
    suffix = conversation_id.removeprefix("conv_")
    return [
        item
        if item.id
        else msgspec.structs.replace(
            item, id=f"{_PREFIX[type(item)]}_{suffix}_{secrets.token_hex(8)}"
        )
        for item in items
    ]


async def create_conversation(
    svc: Bundle,
    items: Sequence[ConversationItem | ItemReference],
    metadata: dict[str, str],
    owner: str,
) -> ConversationObject:
    now = svc.clock()
    cid = new_conversation_id(now)
    given = await _given(svc, cid, items, owner)
    _no_duplicates(given, ())
    conversation = ConversationObject(id=cid, created_at=int(now), metadata=metadata)
    await svc.conversations.create(conversation, owner, given, now)
    return conversation


async def retrieve(svc: Bundle, conversation_id: str, owner: str) -> ConversationObject:
    return _object(await visible(svc, conversation_id, owner))


async def update(
    svc: Bundle, conversation_id: str, metadata: dict[str, str], owner: str
) -> ConversationObject:
    row = await visible(svc, conversation_id, owner)
    if not await svc.conversations.update(conversation_id, metadata, svc.clock()):
        raise _not_found(conversation_id)
    return ConversationObject(id=row.id, created_at=int(row.created_at), metadata=metadata)


async def delete(svc: Bundle, conversation_id: str, owner: str) -> ConversationDeleted:
    await visible(svc, conversation_id, owner)
    if not await svc.conversations.delete(conversation_id, svc.clock()):
        raise _not_found(conversation_id)
    return ConversationDeleted(id=conversation_id)


async def add_items(
    svc: Bundle,
    conversation_id: str,
    items: Sequence[ConversationItem | ItemReference],
    owner: str,
) -> list[ConversationItem]:
    await visible(svc, conversation_id, owner)
    given = await _given(svc, conversation_id, items, owner)
    _no_duplicates(given, ())
    try:
        added = await svc.conversations.add_items(conversation_id, given, svc.clock())
    except DuplicateItems as exc:
        # The store checks the ids the conversation has (one indexed read, whatever its
        # size, deleted items included: their ids stay taken); the 400 names the first.
        _no_duplicates(given, exc.item_ids)
        raise
    if not added:
        raise _not_found(conversation_id)
    return given


def _no_duplicates(given: list[ConversationItem], known: Collection[str]) -> None:
    """OpenAI's 400 for an item whose id the conversation has, or the request has twice (a
    reference to an item already added names it again)."""
    for n, item in enumerate(given):
        if item.id in known or item.id in {g.id for g in given[:n]}:
            raise InvalidRequest(
                f"Duplicate item found with id {item.id}. Remove duplicate items from your "
                "input and try again.",
                param=f"items[{n}].id",
                code="invalid_value",
            )


async def list_items(
    svc: Bundle,
    conversation_id: str,
    owner: str,
    *,
    after: str | None,
    limit: int,
    order: str,
) -> ConversationItems:
    await visible(svc, conversation_id, owner)
    return await svc.conversations.items(
        conversation_id, after=after, limit=limit, order=order, listing=True
    )


async def get_item(svc: Bundle, conversation_id: str, item_id: str, owner: str) -> ConversationItem:
    await visible(svc, conversation_id, owner)
    item = await svc.conversations.item(conversation_id, item_id)
    if item is None:
        raise NotFound(f"Item with id '{item_id}' not found.")
    return item


async def delete_item(
    svc: Bundle, conversation_id: str, item_id: str, owner: str
) -> ConversationObject:
    row = await visible(svc, conversation_id, owner)
    if not await svc.conversations.delete_item(conversation_id, item_id, svc.clock()):
        raise NotFound(f"Item with id '{item_id}' not found.")
    return _object(row)


async def read_events(
    svc: Bundle, conversation_id: str, owner: str, *, after: int, follow: bool
) -> Batches:
    """The conversation's own log after `after`, in batches: with `follow`, a tail that
    goes on as it grows (a conversation has no end; new events arrive within the store's
    poll interval)."""
    await visible(svc, conversation_id, owner)
    if follow:
        return svc.store.subscribe_batches(conversation_id, after)
    return stored_now(svc, conversation_id, after)
