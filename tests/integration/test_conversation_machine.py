"""A hypothesis state machine over the `Conversations` port, on PostgreSQL and SQLite: random
creates, adds (from a request, and a response's join inside a write transaction), item
deletes, updates and deletes, over a few conversations and a small pool of item ids so that
ids collide often. After every step each conversation's rows must match a plain model of
it, and its stream must fold (as `verify` folds it) to exactly those rows.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from adapters.store.conversations import SqlConversations, audited_items, join
from adapters.store.factory import open_store
from adapters.store.sql import SqlEventStore
from domain.conversations import ConversationItem, ConversationObject
from domain.errors import DuplicateItems
from domain.objects import InputMessage, InputText
from service.audit.conversation_check import check_conversation

T = TypeVar("T")
_runs = itertools.count()
item_ids = st.lists(st.sampled_from([f"msg_{n}" for n in range(6)]), max_size=3, unique=True)
metadata = st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"]), max_size=2)


def _message(item_id: str) -> ConversationItem:
    return InputMessage(id=item_id, role="user", content=[InputText(text=item_id)])


@dataclass
class Model:
    """What a conversation should be: its items in order (id, deleted), its metadata, and
    how many events its stream holds."""

    items: list[tuple[str, bool]] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    deleted: bool = False
    events: int = 1

    def taken(self) -> set[str]:
        return {i for i, _ in self.items}

    def visible(self) -> list[str]:
        return [i for i, deleted in self.items if not deleted]


class ConversationMachine(RuleBasedStateMachine):
    conversations = Bundle("conversations")
    url = ""  # the store's, set by the test

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store: SqlEventStore = self.loop.run_until_complete(open_store(self.url))
        self.convs = SqlConversations(self.store)
        self.models: dict[str, Model] = {}
        self.run = next(_runs)
        self.clock = itertools.count(1)

    def teardown(self) -> None:
        self.loop.run_until_complete(self.store.close())
        self.loop.close()

    def _do(self, work: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(work)

    @rule(target=conversations, ids=item_ids, meta=metadata)
    def create(self, ids: list[str], meta: dict[str, str]) -> str:
        cid = f"conv_machine_{self.run}_{len(self.models)}"
        conversation = ConversationObject(id=cid, created_at=1, metadata=meta)
        items = [_message(i) for i in ids]
        self._do(self.convs.create(conversation, "alice", items, float(next(self.clock))))
        self.models[cid] = Model(items=[(i, False) for i in ids], metadata=dict(meta))
        self.models[cid].events += 1 if ids else 0
        return cid

    @rule(cid=conversations, ids=item_ids.filter(bool))
    def add(self, cid: str, ids: list[str]) -> None:
        model = self.models[cid]
        now = float(next(self.clock))
        taken = frozenset(model.taken() & set(ids))
        refused: frozenset[str] = frozenset()
        try:
            added = self._do(self.convs.add_items(cid, [_message(i) for i in ids], now))
        except DuplicateItems as exc:
            added, refused = False, exc.item_ids
        if model.deleted:  # gone: nothing to refuse, nothing added
            assert (added, refused) == (False, frozenset())
        elif taken:  # refused whole, naming the ids it has
            assert (added, refused) == (False, taken)
        else:
            assert added is True
            model.items += [(i, False) for i in ids]
            model.events += 1

    @rule(cid=conversations, ids=item_ids.filter(bool))
    def a_response_joins(self, cid: str, ids: list[str]) -> None:
        """A response that named the conversation ends: its items join in the log writer's
        transaction, and an id the conversation has already is skipped, not refused."""
        model = self.models[cid]

        async def joined() -> bool:
            async with self.store.begin_write() as conn:
                items = [_message(i) for i in ids]
                return await join(conn, cid, items, "resp_machine", float(next(self.clock)))

        assert self._do(joined()) is not model.deleted
        if not model.deleted:
            taken = model.taken()
            model.items += [(i, False) for i in ids if i not in taken]
            model.events += 1

    @rule(cid=conversations, item_id=st.sampled_from([f"msg_{n}" for n in range(6)]))
    def delete_item(self, cid: str, item_id: str) -> None:
        model = self.models[cid]
        there = not model.deleted and item_id in model.visible()
        assert self._do(self.convs.delete_item(cid, item_id, float(next(self.clock)))) is there
        if there:
            model.items = [(i, d or i == item_id) for i, d in model.items]
            model.events += 1

    @rule(cid=conversations, meta=metadata)
    def update(self, cid: str, meta: dict[str, str]) -> None:
        model = self.models[cid]
        changed = self._do(self.convs.update(cid, meta, float(next(self.clock))))
        assert changed is not model.deleted
        if changed:
            model.metadata = dict(meta)
            model.events += 1

    @rule(cid=conversations)
    def delete(self, cid: str) -> None:
        model = self.models[cid]
        assert self._do(self.convs.delete(cid, float(next(self.clock)))) is not model.deleted
        if not model.deleted:
            model.deleted = True
            model.events += 1

    @invariant()
    def every_conversation_is_its_model_and_the_fold_of_its_log(self) -> None:
        for cid, model in self.models.items():
            row = self._do(self.convs.get(cid))
            assert row is not None
            assert (row.deleted_at is not None, row.metadata) == (model.deleted, model.metadata)
            page = self._do(self.convs.items(cid))
            assert [i.id for i in page.items] == model.visible()
            events = self._do(self.store.read(cid))
            assert len(events) == model.events == row.version + 1
            audited = self._do(audited_items(self.store, cid))
            items = [(a.item.id, a.deleted) for a in audited]
            assert items == model.items
            assert check_conversation(row, events, items) == []


def test_the_conversation_store_is_its_model_and_its_log(store_url: str) -> None:
    class OnThisStore(ConversationMachine):
        url = store_url

    run_state_machine_as_test(
        OnThisStore, settings=settings(max_examples=15, stateful_step_count=20, deadline=None)
    )
