"""Conversations (the Conversations API's streams) for an auditor, any owner's: listed
newest first, one's items in order (deleted ones marked), and the turns of a conversation
or of a response's `previous_response_id` chain (`resplog conversation`, the audit view)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from domain.conversations import ConversationItem
from domain.errors import NotFound
from service.audit.conversation import (
    ConversationView,
    TurnView,
    added_turn,
    conversation,
    turn_view,
)
from service.audit.reading import replay, response_turns
from service.ports import AuditedItem, ConversationRow, ConversationSummary

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit


class ConversationPage(msgspec.Struct, frozen=True, kw_only=True):
    rows: list[ConversationSummary]
    has_more: bool


async def list_conversations(
    audit: Audit,
    owner: str | None,
    limit: int,
    *,
    since: float | None = None,
    until: float | None = None,
    after: str | None = None,
) -> ConversationPage:
    """Conversations newest first (deleted ones too) with their live item counts, created
    in [since, until), after the conversation `after`."""
    found = await audit.conversations.summaries(
        owner, limit + 1, since=since, until=until, after=after
    )
    return ConversationPage(rows=found[:limit], has_more=len(found) > limit)


async def conversation_items(audit: Audit, cid: str) -> tuple[ConversationRow, list[AuditedItem]]:
    """The conversation's row and every item in its order, deleted ones included."""
    row = await audit.conversations.get(cid)
    if row is None:
        raise NotFound(f"conversation {cid} not found")
    return row, await audit.conversations.audited_items(cid)


async def conversation_turns(audit: Audit, cid: str) -> list[TurnView]:
    """A conversation's turns in its order: each response that added items (folded from its
    own log), and the items added through the API, a turn per run of them."""
    row = await audit.conversations.get(cid)
    if row is None:
        raise NotFound(f"conversation {cid} not found")
    turns: list[TurnView] = []
    added: list[tuple[ConversationItem, bool]] = []
    for entry in await audit.conversations.audited_items(cid):
        if entry.response_id is None:
            added.append((entry.item, entry.deleted))
            continue
        if added:
            turns.append(added_turn(added, row.owner, int(row.created_at)))
            added = []
        if turns and turns[-1].response_id == entry.response_id:
            continue
        _, folded = await replay(audit.log, entry.response_id)
        if folded.request is not None:
            turns.append(turn_view(folded.request, folded.response, folded.end))
    if added:
        turns.append(added_turn(added, row.owner, int(row.created_at)))
    return turns


async def turns_of(audit: Audit, rid: str) -> ConversationView:
    """Every turn of a conversation (`conv_…`), or every turn that leads to a response."""
    if rid.startswith("conv_"):
        return conversation(rid, await conversation_turns(audit, rid), None)
    turns, missing = await response_turns(audit.log, rid)
    return conversation(rid, turns, missing)
