"""The `Conversations` port on PostgreSQL and SQLite: an item id is a conversation's once.

An add that names an id the conversation has, or had (a deleted item keeps its id), is
refused whole, with nothing written: no event, no row, no version. The check runs in the
add's own transaction, so two adds of one id at the same time cannot both succeed.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from adapters.store import SqlEventStore
from adapters.store.conversations import SqlConversations
from domain.conversations import ConversationItem, ConversationObject
from domain.errors import DuplicateItems
from domain.objects import InputMessage, InputText
from service.ports import ConversationRow

_ids = itertools.count()


def _message(item_id: str) -> ConversationItem:
    return InputMessage(id=item_id, role="user", content=[InputText(text=item_id)])


async def _conversation(convs: SqlConversations, *item_ids: str) -> str:
    cid = f"conv_store_{next(_ids)}_{id(convs):x}"
    conversation = ConversationObject(id=cid, created_at=1)
    await convs.create(conversation, "alice", [_message(i) for i in item_ids], 1.0)
    return cid


async def _state(
    store: SqlEventStore, convs: SqlConversations, cid: str
) -> tuple[ConversationRow | None, list[str], int]:
    items = await convs.items(cid)
    return await convs.get(cid), [i.id for i in items.items], len(await store.read(cid))


async def test_an_id_the_conversation_has_is_refused_and_nothing_is_written(
    store: SqlEventStore,
) -> None:
    convs = SqlConversations(store)
    cid = await _conversation(convs, "msg_a", "msg_b")
    before = await _state(store, convs, cid)
    with pytest.raises(DuplicateItems) as refused:
        await convs.add_items(cid, [_message("msg_new"), _message("msg_b")], 2.0)
    assert refused.value.item_ids == {"msg_b"}
    assert await _state(store, convs, cid) == before
    assert await convs.item(cid, "msg_new") is None


async def test_a_deleted_items_id_stays_taken(store: SqlEventStore) -> None:
    convs = SqlConversations(store)
    cid = await _conversation(convs, "msg_a")
    assert await convs.delete_item(cid, "msg_a", 2.0)
    before = await _state(store, convs, cid)
    with pytest.raises(DuplicateItems) as refused:
        await convs.add_items(cid, [_message("msg_a")], 3.0)
    assert refused.value.item_ids == {"msg_a"}
    assert await _state(store, convs, cid) == before


async def test_two_adds_of_one_id_at_once_add_it_once(store: SqlEventStore) -> None:
    convs = SqlConversations(store)
    cid = await _conversation(convs)
    results = await asyncio.gather(
        *(convs.add_items(cid, [_message("msg_same")], 2.0) for _ in range(4)),
        return_exceptions=True,
    )
    assert sum(r is True for r in results) == 1, results
    assert sum(isinstance(r, DuplicateItems) for r in results) == 3, results
    row, items, events = await _state(store, convs, cid)
    assert items == ["msg_same"]
    assert row is not None and row.version == 1 and events == 2  # created, one add


async def test_new_ids_are_added_and_a_gone_conversation_adds_nothing(
    store: SqlEventStore,
) -> None:
    convs = SqlConversations(store)
    cid = await _conversation(convs, "msg_a")
    assert await convs.add_items(cid, [_message("msg_b"), _message("msg_c")], 2.0)
    assert [i.id for i in (await convs.items(cid)).items] == ["msg_a", "msg_b", "msg_c"]
    assert await convs.delete(cid, 3.0)
    assert await convs.add_items(cid, [_message("msg_d")], 4.0) is False
    assert await convs.add_items("conv_never", [_message("msg_d")], 4.0) is False
