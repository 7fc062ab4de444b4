"""The `Conversations` port's contract, on PostgreSQL and SQLite.

Every change is one event of the conversation's stream, and its rows are what `verify`
folds the stream to. An item id is a conversation's once: an add that names an id the
conversation has, or had (a deleted item keeps its id), is refused whole, with nothing
written (no event, no row, no version), and the check runs in the add's own transaction,
so two adds of one id at the same time cannot both succeed.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from adapters.store.conversations import SqlConversations, audited_items
from adapters.store.sql import SqlEventStore
from domain.conversations import ConversationItem, ConversationObject
from domain.errors import DuplicateItems
from domain.objects import InputMessage, InputText
from service.audit.conversation_check import check_conversation
from service.ports import ConversationItems, ConversationRow

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


async def _folds_to_its_rows(store: SqlEventStore, convs: SqlConversations, cid: str) -> None:
    """`verify`'s check: the conversation's events, folded, give exactly its rows."""
    row = await convs.get(cid)
    assert row is not None
    items = [(a.item.id, a.deleted) for a in await audited_items(store, cid)]
    assert check_conversation(row, await store.read(cid), items) == []


async def test_a_page_of_items_in_either_order_after_an_item(store: SqlEventStore) -> None:
    convs = SqlConversations(store)
    ids = [f"msg_{n}" for n in range(7)]
    cid = await _conversation(convs, *ids[:3])
    assert await convs.add_items(cid, [_message(i) for i in ids[3:]], 2.0)
    assert await convs.delete_item(cid, "msg_4", 3.0)
    shown = [i for i in ids if i != "msg_4"]

    def listed(page: ConversationItems) -> tuple[list[str], bool]:
        return [i.id for i in page.items], page.has_more

    assert listed(await convs.items(cid)) == (shown, False)
    assert listed(await convs.items(cid, limit=2)) == (shown[:2], True)
    assert listed(await convs.items(cid, after="msg_1", limit=3)) == (shown[2:5], True)
    assert listed(await convs.items(cid, after="msg_5", limit=3)) == (shown[5:], False)
    assert listed(await convs.items(cid, order="desc", limit=2)) == (shown[::-1][:2], True)
    assert listed(await convs.items(cid, order="desc", after="msg_3")) == (shown[:3][::-1], False)
    # A deleted item still marks its place; an unknown one gives nothing.
    assert listed(await convs.items(cid, after="msg_4", limit=1)) == (["msg_5"], True)
    assert listed(await convs.items(cid, after="msg_nope")) == ([], False)
    await _folds_to_its_rows(store, convs, cid)


async def test_one_item_by_its_id_in_its_own_conversation_only(store: SqlEventStore) -> None:
    convs = SqlConversations(store)
    cid = await _conversation(convs, "msg_a", "msg_b")
    other = await _conversation(convs, "msg_c")
    found = await convs.item(cid, "msg_b")
    assert found == _message("msg_b")
    assert await convs.item(other, "msg_b") is None
    assert await convs.item(cid, "msg_c") is None
    assert await convs.delete_item(cid, "msg_b", 2.0)
    assert await convs.item(cid, "msg_b") is None
    assert await convs.delete_item(cid, "msg_b", 3.0) is False  # once
    assert await convs.delete_item(cid, "msg_nope", 3.0) is False
    await _folds_to_its_rows(store, convs, cid)


async def test_every_change_is_one_event_and_a_deleted_conversation_takes_none(
    store: SqlEventStore,
) -> None:
    convs = SqlConversations(store)
    cid = await _conversation(convs, "msg_a")  # created, and its items added: two events
    assert await convs.update(cid, {"topic": "tea"}, 2.0)
    assert await convs.add_items(cid, [_message("msg_b")], 3.0)
    assert await convs.delete_item(cid, "msg_a", 4.0)
    row = await convs.get(cid)
    assert row is not None
    assert (row.version, row.metadata, row.updated_at, row.deleted_at) == (
        4,
        {"topic": "tea"},
        4.0,
        None,
    )
    events = await store.read(cid)
    assert [e.position for e in events] == [0, 1, 2, 3, 4]
    await _folds_to_its_rows(store, convs, cid)
    assert await convs.delete(cid, 5.0)
    gone = await convs.get(cid)
    assert gone is not None and gone.deleted_at == 5.0 and gone.version == 5
    assert await convs.update(cid, {"topic": "x"}, 6.0) is False
    assert await convs.delete(cid, 6.0) is False
    assert await convs.delete_item(cid, "msg_b", 6.0) is False
    assert len(await store.read(cid)) == 6  # nothing after the deletion
    await _folds_to_its_rows(store, convs, cid)
    assert await convs.get("conv_never") is None
    assert await convs.update("conv_never", {}, 1.0) is False
    assert await convs.delete("conv_never", 1.0) is False
