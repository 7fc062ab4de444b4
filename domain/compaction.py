"""What a compaction leaves of a conversation: the engine is given the sealed summary in the
place of everything it replaced (domain only: the summary is written by
service/prompts/compaction.py and opened by service/reasoning/sealing.py).

Three places hold a compaction: the response being created (`Compaction`, from its request's
facts: its earlier turns and all but its trailing input items are replaced), an earlier
turn whose output holds a compaction item (every turn before it is replaced, and its own
input up to its last user message), and a conversation's items (every item before the last
compaction item is replaced: OpenAI's "the latest compaction item carries the necessary
context to continue the conversation").
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from domain.generation import Compaction, Turn, any_turn
from domain.objects import (
    CompactionItem,
    CustomToolCallOutput,
    FunctionCallOutput,
    InputCompaction,
    InputCustomToolCall,
    InputFunctionCall,
    InputItem,
    InputMessage,
)

_Item = TypeVar("_Item")

# The key of the request facts' `extra` that records a compaction made at create.
COMPACTION_FACT = "compaction"


def summary_item(item: CompactionItem) -> InputCompaction:
    return InputCompaction(id=item.id, encrypted_content=item.encrypted_content)


def compacted(
    history: list[Turn], items: list[InputItem], compaction: Compaction
) -> tuple[list[Turn], list[InputItem]]:
    """The conversation a response made by a compaction continues: the summary, then the
    request's trailing input items it kept."""
    kept = items[len(items) - compaction.kept_items :] if compaction.kept_items else []
    return [], [summary_item(compaction.item), *kept]


def from_last_compaction(history: list[Turn]) -> list[Turn]:
    """The history from its last compacted turn on: that turn's input becomes the summary
    and what followed its last user message (nothing, when the compaction was the whole
    answer), and its output loses the compaction item."""
    if not any_turn(history, "compacted", _compacted):
        return history
    for k in range(len(history) - 1, -1, -1):
        turn = history[k]
        found = [x for x in turn.output if isinstance(x, CompactionItem)]
        if not found:
            continue
        rest = [x for x in turn.output if not isinstance(x, CompactionItem)]
        kept = turn.input[kept_from(turn.input) :] if rest else []
        head = msgspec.structs.replace(turn, input=[summary_item(found[-1]), *kept], output=rest)
        return [head, *history[k + 1 :]]
    return history


def _compacted(turn: Turn) -> bool:
    return any(isinstance(x, CompactionItem) for x in turn.output)


def kept_from(items: list[InputItem]) -> int:
    """Where the input items a compaction keeps begin: at the last user message (the first
    item when there is none), or later, past every tool output whose call is not kept. Such
    a call is replaced by the summary with what came before it, and an engine cannot render
    an output without its call (adapters/engines/harmony/render.py): a tool loop's step,
    whose input is the outputs of calls the previous response made, keeps nothing."""
    begin = last_user(items)
    while True:
        kept = items[begin:]
        calls = {i.call_id for i in kept if isinstance(i, InputFunctionCall | InputCustomToolCall)}
        orphans = [
            n
            for n, item in enumerate(kept)
            if isinstance(item, FunctionCallOutput | CustomToolCallOutput)
            and item.call_id not in calls
        ]
        if not orphans:
            return begin
        begin += orphans[-1] + 1


def last_user(items: list[InputItem]) -> int:
    """The index of the last user message (0 when there is none: keep everything)."""
    for i in range(len(items) - 1, -1, -1):
        item = items[i]
        if isinstance(item, InputMessage) and item.role == "user":
            return i
    return 0


def since_last_compaction(items: list[_Item]) -> list[_Item]:
    """A conversation's items from its last compaction item on (all, when it has none; those
    set aside among them too, when they are given). A response compacted at create leaves
    the item in its conversation before the input items it kept (service/prompts/references.py
    `conversation_items`), so its next turn starts as a `previous_response_id`
    continuation of it would (`from_last_compaction`)."""
    for i in range(len(items) - 1, -1, -1):
        if isinstance(items[i], InputCompaction):
            return items[i:]
    return items
