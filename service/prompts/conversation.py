"""The conversation stage: a conversation's items as the prompts of its responses see them,
the items up to its last compaction as the turn before a response's input (`history_of`),
and what a response leaves in it for the next turn's prompt (`conversation_items`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from domain.compaction import COMPACTION_FACT, since_last_compaction
from domain.conversations import ConversationItem
from domain.generation import Turn
from domain.mcp import lists_sent
from domain.objects import (
    CompactionItem,
    ConversationRef,
    InputItem,
    ItemReference,
    McpApprovalRequest,
    McpApprovalResponse,
    OutputItem,
    SetAsideItem,
)
from service.bundle import Bundle
from service.conversations.api import visible
from service.prompts.references import RAN, as_input, response_of
from service.wire.set_aside import SET_ASIDE


async def history_of(
    svc: Bundle, conversation_id: str, owner: str, given: Sequence[InputItem | ItemReference] = ()
) -> list[Turn]:
    """What a response that names the conversation sees before its own input (`given`):
    the conversation's items (but those set aside) from its last compaction item on, as one
    earlier turn, then the MCP approval requests that `given` answers. The MCP tool lists
    set aside among those items are the turn's `listed`: no model is shown them, and the
    tool loop offers a listed server's tools from them rather than listing it again
    (service/tools/mcploop.py `listed_before`)."""
    await visible(svc, conversation_id, owner)
    items = (await svc.conversations.items(conversation_id)).items
    since = since_last_compaction(items)  # the lists set aside among them too
    shown = [i for i in since if not isinstance(i, SetAsideItem)]
    lists = lists_sent(i.listed() for i in since if isinstance(i, SetAsideItem))
    earlier = Turn(
        response_id=conversation_id, instructions=None, input=shown, output=[], listed=lists
    )
    return [earlier, *await _approvals_asked(svc, conversation_id, given, owner)]


class _Made(msgspec.Struct, frozen=True, kw_only=True):
    """What `_approvals_asked` needs of a final response object."""

    conversation: ConversationRef | None = None
    output: list[OutputItem] = msgspec.field(default_factory=list)


_made = msgspec.json.Decoder(_Made)


async def _approvals_asked(
    svc: Bundle, conversation_id: str, given: Sequence[InputItem | ItemReference], owner: str
) -> list[Turn]:
    """The approval requests `given` answers, each as the turn of the response that made
    it, read from that response by its id, which must be of this conversation and this
    owner (OpenAI's round trip with `conversation` in the place of `previous_response_id`).
    A conversation lists a response's approval requests since 2026-12-06 (the loop finds
    them in the history too); before, it held them only set aside."""
    wanted = {i.approval_request_id for i in given if isinstance(i, McpApprovalResponse)}
    turns = []
    for rid in sorted({r for r in map(response_of, wanted) if r is not None}):
        links = await svc.index.chain(rid, owner, 1)
        made = _made.decode(links[0].snapshot) if links else None
        if made is None or made.conversation is None or made.conversation.id != conversation_id:
            continue
        asked = [i for i in made.output if isinstance(i, McpApprovalRequest) and i.id in wanted]
        turns.append(Turn(response_id=rid, instructions=None, input=[], output=list(asked)))
    return [t for t in turns if t.output]


def conversation_items(
    asked: list[InputItem], extra: dict[str, Any], output: list[OutputItem]
) -> list[ConversationItem]:
    """What a response leaves in its conversation: its input as sent (the items it set
    aside in their place), then its output as input items. An MCP call or approval request
    is itself, as OpenAI lists it (the next turn's model is shown a call as a function call
    and its output, and the loop finds there the request an approval answers:
    service/tools/mcploop.py); the server's tool listings and built-in calls are set aside, listed
    as the response made them and shown to no model (a built-in call's answer is a hidden
    fact of its own response's log)."""
    given: list[ConversationItem] = list(asked)
    for aside in sorted(extra.get(SET_ASIDE, []), key=lambda a: int(a["at"])):
        given.insert(aside["at"], SetAsideItem.of(aside["item"]))
    kept = _kept_after_compaction(given, extra)
    for made in output:
        if isinstance(made, RAN):
            given.append(SetAsideItem.of(msgspec.to_builtins(made)))
        elif isinstance(made, CompactionItem) and kept is not None:
            given.insert(kept, as_input(made))
        else:
            given.append(as_input(made))
    return given


def _kept_after_compaction(given: list[ConversationItem], extra: dict[str, Any]) -> int | None:
    """Where a compaction made at create goes among the response's input (`given`, its
    items set aside in place): before the trailing input items the engine was still given
    (`kept_items`), so that the conversation's next turn, which starts from its last
    compaction item (domain/compaction.py `since_last_compaction`), sees what this one's
    engine saw. None: no compaction was made."""
    made = extra.get(COMPACTION_FACT)
    if made is None:
        return None
    typed = [n for n, item in enumerate(given) if not isinstance(item, SetAsideItem)]
    first_kept = len(typed) - int(made.get("kept_items", 0))
    return typed[first_kept] if 0 <= first_kept < len(typed) else len(given)
