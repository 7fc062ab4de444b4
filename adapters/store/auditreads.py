"""A conversation (`conv_…`) as the audit tools show it, for `resplog conversation` and the
`/audit` view: its turns in order, each response folded from its own log."""

from __future__ import annotations

from adapters.store.conversations import SqlConversations, audited_items
from adapters.store.scan import LogScan
from adapters.store.sql import SqlEventStore
from domain.conversations import ConversationItem
from domain.errors import NotFound
from service.audit.conversation import TurnView, added_turn, turn_view
from service.audit.reading import replay


async def conversation_turns(store: SqlEventStore, cid: str) -> list[TurnView]:
    """A conversation's turns in its order: each response that added items (folded from its
    own log), and the items added through the API, a turn per run of them."""
    row = await SqlConversations(store).get(cid)
    if row is None:
        raise NotFound(f"conversation {cid} not found")
    scan, turns = LogScan(store), []
    added: list[tuple[ConversationItem, bool]] = []
    for entry in await audited_items(store, cid):
        if entry.response_id is None:
            added.append((entry.item, entry.deleted))
            continue
        if added:
            turns.append(added_turn(added, row.owner, int(row.created_at)))
            added = []
        if turns and turns[-1].response_id == entry.response_id:
            continue
        _, folded = await replay(scan, entry.response_id)
        if folded.request is not None:
            turns.append(turn_view(folded.request, folded.response, folded.end))
    if added:
        turns.append(added_turn(added, row.owner, int(row.created_at)))
    return turns
