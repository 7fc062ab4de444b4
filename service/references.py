"""`item_reference` input items: the item an earlier response of the same owner holds.

Item ids name their place in the log: the server derives every id it gives from the response
id and the item's position (`msg_<suffix>_2` is output 2 of `resp_<suffix>`, `msg_<suffix>_in0`
input 0; domain/builder.py `item_id`, service/responses.py `assign_ids`). So a reference is
read from that one response, through the read model's owner check, without an index of
its own. An id a client chose for its own input item names no place and cannot be
referenced: it is answered as OpenAI answers an unknown item.

The create use-case puts the item itself in the reference's place before the request is
recorded, so the log holds what the model saw and replays without the other response.
"""

from __future__ import annotations

import re

import msgspec

from domain.errors import InvalidRequest, NotFound
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
    McpApprovalRequest,
    McpCall,
    McpListTools,
    OutputItem,
    OutputMessage,
    ReasoningItem,
    WebSearchCall,
)
from service.bundle import Bundle
from service.mcploop import as_input as loop_input

# <prefix>_<response suffix>_<output index> or _in<input index>
_ITEM_ID = re.compile(r"^[a-z]+_([A-Za-z0-9]{1,128})_(in)?([0-9]{1,9})$")


class _Final(msgspec.Struct, frozen=True, kw_only=True):
    output: list[OutputItem] = msgspec.field(default_factory=list)


class _Asked(msgspec.Struct, frozen=True, kw_only=True):
    input: list[InputItem]


_final = msgspec.json.Decoder(_Final)


def response_of(item_id: str) -> str | None:
    """The id of the response whose output or input holds an item of a server-given id."""
    found = _ITEM_ID.match(item_id)
    return None if found is None else f"resp_{found.group(1)}"


_asked = msgspec.json.Decoder(_Asked)


async def resolve_references(
    svc: Bundle, items: list[InputItem | ItemReference], owner: str
) -> list[InputItem]:
    """The input with every reference replaced by the item it names."""
    return [
        await _resolve(svc, item, owner) if isinstance(item, ItemReference) else item
        for item in items
    ]


async def _resolve(svc: Bundle, ref: ItemReference, owner: str) -> InputItem:
    found = _ITEM_ID.match(ref.id)
    if found is not None:
        links = await svc.index.chain(f"resp_{found.group(1)}", owner, 1)
        facts = links[0].request_facts if links else None
        if facts is not None:
            link = links[0]
            listed: list[InputItem | OutputItem] = (
                list(_asked.decode(facts).input)
                if found.group(2)
                else list(_final.decode(link.snapshot).output)
            )
            item = next((i for i in listed if i.id == ref.id), None)
            if item is not None:
                return as_input(item)
    raise NotFound(
        f"Item with id '{ref.id[:128]}' not found. Items are not persisted when `store` is "
        "set to false. Try again with `store` set to true, or remove this item from your "
        "input.",
        param="input",
    )


def conversation_items(output: list[OutputItem]) -> list[InputItem]:
    """What a response's output leaves in its conversation, as input items: an MCP call as
    its function call and output, as the next turn's model is shown it
    (service/mcploop.py); the server's tool listings, approval requests and built-in calls
    not at all (a built-in call's answer is a hidden fact of its own response's log)."""
    ran = McpListTools | McpCall | McpApprovalRequest | WebSearchCall | CodeInterpreterCall
    out: list[InputItem] = []
    for item in output:
        out += loop_input([item]) if isinstance(item, ran) else [as_input(item)]
    return out


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
        case McpListTools() | McpCall() | McpApprovalRequest():
            # The server ran these itself; the turn that holds them carries them.
            raise InvalidRequest(
                f"Item '{item.id}' is an MCP item; pass it with previous_response_id.",
                param="input",
            )
        case WebSearchCall() | CodeInterpreterCall():
            raise InvalidRequest(
                f"Item '{item.id}' is a built-in tool call; pass it with previous_response_id.",
                param="input",
            )
    return item
