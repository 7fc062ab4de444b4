"""`item_reference` input items: the item an earlier response of the same owner holds.

Item ids name their place in the log: the server derives every id it gives from the response
id and the item's position (`msg_<suffix>_2` is output 2 of `resp_<suffix>`, `msg_<suffix>_in0`
input 0; domain/builder.py `item_id`, service/prompts/item_ids.py `assign_ids`). So a reference
is read from that one response, through the read model's owner check, without an index of
its own. An item added to a conversation through the API has an id of the server's that
names the conversation (`msg_<conversation suffix>_<16 random hex digits>`,
service/conversations/api.py), and is read from that conversation's items, through its owner
check. An id a client chose for its own item names no place and cannot be referenced (nor
can an item added to a conversation before its ids named the whole conversation): it is
answered as OpenAI answers an unknown item.

The references stage (service/prompts/pipeline.py) puts the item itself in the reference's
place before the request is recorded, so the log holds what the model saw and replays
without the other response. Items added to a conversation by reference
(`POST /v1/conversations/{id}/items`, or a new conversation's `items`) are resolved the same
way (`conversation_items_of`): the conversation's log holds the item under its id, as OpenAI
lists it. An MCP call or approval request is passed back as itself (the model is shown a
call as a function call and its output, and the loop finds the request an approval
answers: service/tools/mcploop.py); an item of a kind no engine is given (an MCP listing, a
built-in call, an item an earlier request set aside) is set aside in its place, as if the
client had sent it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from domain.conversations import ConversationItem
from domain.errors import NotFound
from domain.objects import (
    CodeInterpreterCall,
    CompactionItem,
    CustomToolCall,
    FunctionCall,
    InputCompaction,
    InputCustomToolCall,
    InputFunctionCall,
    InputItem,
    InputMessage,
    InputReasoning,
    ItemReference,
    McpListTools,
    OutputItem,
    OutputMessage,
    ReasoningItem,
    SetAsideItem,
    WebSearchCall,
)
from service.bundle import Bundle
from service.wire.set_aside import SET_ASIDE

# <prefix>_<response suffix>_<output index> or _in<input index>
_ITEM_ID = re.compile(r"^[a-z]+_([A-Za-z0-9]{1,128})_(in)?([0-9]{1,9})$")
# <prefix>_<conversation suffix>_<16 random hex digits>: an item added through the API
# (service/ids.py: a suffix is 50 hex digits, 48 for ids of before)
_CONVERSATION_ITEM_ID = re.compile(r"^[a-z]+_([0-9a-f]{48,50})_[0-9a-f]{16}$")


class _Final(msgspec.Struct, frozen=True, kw_only=True):
    output: list[OutputItem] = msgspec.field(default_factory=list)


class _Asked(msgspec.Struct, frozen=True, kw_only=True):
    input: list[InputItem]
    extra: dict[str, Any] = msgspec.field(default_factory=dict)


# Output items of the server's own tool steps that no model is shown: passed back by
# reference, they are set aside. (MCP calls and approval requests are input items.)
RAN = McpListTools | WebSearchCall | CodeInterpreterCall
# A referenced item: one the model may be shown, or one set aside (as plain JSON).
Resolved = InputItem | dict[str, Any]


_final = msgspec.json.Decoder(_Final)


def response_of(item_id: str) -> str | None:
    """The id of the response whose output or input holds an item of a server-given id."""
    found = _ITEM_ID.match(item_id)
    return None if found is None else f"resp_{found.group(1)}"


_asked = msgspec.json.Decoder(_Asked)


async def resolve_references(
    svc: Bundle, items: list[InputItem | ItemReference], owner: str
) -> list[InputItem]:
    """The input with every reference replaced by the item it names; those set aside are
    left out (what a prompt is built from)."""
    resolved = await _resolved(svc, items, owner)
    return [item for item in resolved if not isinstance(item, dict)]


async def resolve_with_aside(
    svc: Bundle, items: list[InputItem | ItemReference], extra: dict[str, Any], owner: str
) -> tuple[list[InputItem], dict[str, Any]]:
    """The input with every reference replaced by the item it names, and the request's
    facts (`extra`) with the referenced items that are set aside added to `SET_ASIDE`, at
    their index in the input as sent (where the reference stood)."""
    resolved = await _resolved(svc, items, owner)
    aside = list(extra.get(SET_ASIDE, []))
    taken = {a["at"] for a in aside}
    free = (at for at in range(len(resolved) + len(aside)) if at not in taken)
    typed: list[InputItem] = []
    for at, item in zip(free, resolved, strict=False):
        if isinstance(item, dict):
            aside.append({"at": at, "item": item})
        else:
            typed.append(item)
    if len(aside) == len(extra.get(SET_ASIDE, [])):
        return typed, extra
    return typed, {**extra, SET_ASIDE: sorted(aside, key=lambda a: int(a["at"]))}


async def conversation_items_of(
    svc: Bundle, items: Sequence[ConversationItem | ItemReference], owner: str
) -> list[ConversationItem]:
    """Items to add to a conversation, each reference replaced by the item it names (its
    id kept); one of a kind no model is shown is set aside, as a response's is when it
    leaves its items in its conversation (`conversation_items`). An unknown or foreign id
    is the 404 of a create's input, about `items[i]`."""
    out: list[ConversationItem] = []
    read: _Read = {}
    for n, item in enumerate(items):
        if not isinstance(item, ItemReference):
            out.append(item)
            continue
        found = await _resolve(svc, item, owner, read, f"items[{n}]")
        out.append(SetAsideItem.of(found) if isinstance(found, dict) else found)
    return out


async def _resolved(
    svc: Bundle, items: list[InputItem | ItemReference], owner: str
) -> list[Resolved]:
    read: _Read = {}
    return [
        await _resolve(svc, item, owner, read) if isinstance(item, ItemReference) else item
        for item in items
    ]


# Whether each conversation a request's references named is the owner's and not deleted,
# read once a request however many of its references name it.
_Read = dict[str, bool]


async def _resolve(
    svc: Bundle, ref: ItemReference, owner: str, read: _Read, param: str = "input"
) -> Resolved:
    found = _ITEM_ID.match(ref.id)
    if found is not None:
        links = await svc.index.chain(f"resp_{found.group(1)}", owner, 1)
        facts = links[0].request_facts if links else None
        if facts is not None:
            if found.group(2):
                return _in_input(_asked.decode(facts), ref, param)
            output = _final.decode(links[0].snapshot).output
            item = next((i for i in output if i.id == ref.id), None)
            if isinstance(item, RAN):
                return msgspec.to_builtins(item)  # type: ignore[no-any-return]
            if item is not None:
                return as_input(item)
    added = _CONVERSATION_ITEM_ID.match(ref.id)
    if added is not None:
        kept = await _in_conversation(svc, f"conv_{added.group(1)}", ref.id, owner, read)
        if kept is not None:
            return kept.listed() if isinstance(kept, SetAsideItem) else kept
    raise _not_found(ref, param)


async def _in_conversation(
    svc: Bundle, conversation_id: str, item_id: str, owner: str, read: _Read
) -> ConversationItem | None:
    """An item added to a conversation of `owner` through the API (None: a deleted item,
    or one of a deleted or another owner's conversation). One of a kind no model is shown
    is set aside where it is named, as listed."""
    if conversation_id not in read:
        row = await svc.conversations.get(conversation_id)
        read[conversation_id] = row is not None and row.owner == owner and row.deleted_at is None
    if not read[conversation_id]:
        return None
    return await svc.conversations.item(conversation_id, item_id)


def _in_input(asked: _Asked, ref: ItemReference, param: str) -> Resolved:
    """The input item of an earlier request named by `ref`: a typed one, or one that
    request set aside (its facts keep it as sent, with its id)."""
    typed = next((i for i in asked.input if i.id == ref.id), None)
    if typed is not None:
        return typed
    for aside in asked.extra.get(SET_ASIDE, []):
        if aside["item"].get("id") == ref.id:
            return dict(aside["item"])
    raise _not_found(ref, param)


def _not_found(ref: ItemReference, param: str) -> NotFound:
    return NotFound(
        f"Item with id '{ref.id[:128]}' not found. Items are not persisted when `store` is "
        "set to false. Try again with `store` set to true, or remove this item from your "
        "input.",
        param=param,
    )


def as_input(item: InputItem | OutputItem) -> InputItem:
    """An output item passed back as input, in the input item's form."""
    match item:
        case OutputMessage(id=iid, content=content):
            return InputMessage(id=iid, role="assistant", content=list(content))
        case ReasoningItem(id=iid, summary=summary, content=content, encrypted_content=enc):
            return InputReasoning(id=iid, summary=summary, content=content, encrypted_content=enc)
        case FunctionCall(id=iid, call_id=cid, name=name, arguments=args, namespace=ns):
            return InputFunctionCall(
                id=iid or "", call_id=cid, name=name, arguments=args, namespace=ns
            )
        case CustomToolCall(id=iid, call_id=cid, name=name, input=text, namespace=ns):
            return InputCustomToolCall(
                id=iid or "", call_id=cid, name=name, input=text, namespace=ns
            )
        case CompactionItem(id=iid, encrypted_content=blob):
            return InputCompaction(id=iid, encrypted_content=blob)
        case McpListTools() | WebSearchCall() | CodeInterpreterCall():
            raise AssertionError(f"{item.id}: set aside by the caller, never an input item")
    return item
