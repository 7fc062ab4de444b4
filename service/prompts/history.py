"""The history stage: the conversation a request continues, the chain its
`previous_response_id` ends (rebuilt from the log in one query) or its `conversation`'s items
(service/prompts/conversation.py).

A continuation needs, for every earlier turn, what was sent (the input items in the request
facts of the turn's first event) and what came back (the final object's output). The read
model walks the chain in one recursive query (`ResponseIndex.chain`), so a create at turn
500 makes one round trip, not a thousand; each link is decoded into only the fields a turn
needs. A process keeps the histories it read (service/prompts/chains.py), so a create that
continues a chain this process continued before reads only the previous response
(`ResponseIndex.chain_tip`) and decodes only its turn. `bench/chain_bench.py` measures a
create and the history read at turns 1, 500 and 1,000.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from domain.errors import InvalidRequest, NotFound
from domain.generation import History, Turn
from domain.mcp import lists_sent
from domain.objects import ConversationRef, InputItem, ItemReference, OutputItem, ResponseObject
from service.bundle import Bundle
from service.ports import ChainLink
from service.prompts.conversation import history_of
from service.wire.set_aside import SET_ASIDE

MAX_CHAIN = 1000


class _Answer(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn needs of a final response object (msgspec skips the other fields)."""

    instructions: str | None = None
    output: list[OutputItem] = msgspec.field(default_factory=list)


class _Aside(msgspec.Struct, frozen=True, kw_only=True):
    at: int
    item: dict[str, Any]


class _Extra(msgspec.Struct, frozen=True, kw_only=True):
    """The input items a request set aside (service/wire's `SET_ASIDE`)."""

    aside: list[_Aside] = msgspec.field(default_factory=list, name=SET_ASIDE)


class _Asked(msgspec.Struct, frozen=True, kw_only=True):
    """What a turn needs of a request's hidden facts."""

    input: list[InputItem]
    extra: _Extra = msgspec.field(default_factory=_Extra)


_answer = msgspec.json.Decoder(_Answer)
_asked = msgspec.json.Decoder(_Asked)


async def history_for(
    svc: Bundle,
    response: ResponseObject,
    owner: str,
    given: Sequence[InputItem | ItemReference] = (),
) -> list[Turn]:
    """What comes before a response's input (`given`): its conversation's items, or the
    chain its `previous_response_id` ends."""
    if isinstance(response.conversation, ConversationRef):
        return await history_of(svc, response.conversation.id, owner, given)
    return await load_history(svc, response.previous_response_id, owner)


async def load_history(svc: Bundle, previous_id: str | None, owner: str) -> list[Turn]:
    """The conversation that `previous_id` ends, oldest turn first, from the log alone: the
    previous response read alone and added to the history before it, when this process
    holds that (service/prompts/chains.py); else the chain walked."""
    if previous_id is None:
        return []
    tip = await svc.index.chain_tip(previous_id, owner)
    if tip.link is None:  # as the walk finds it: no link
        raise _previous_not_found(previous_id)
    if tip.breaks is not None:
        known = svc.chains.get(owner, previous_id, tip.breaks)
        if known is not None:  # read here before (a sibling's, or a retry's)
            return known
        before = tip.link.previous_response_id
        earlier: list[Turn] | None = (
            [] if before is None else svc.chains.get(owner, before, tip.breaks)
        )
        if earlier is not None:
            if len(earlier) >= MAX_CHAIN:
                raise too_long()
            history = History(earlier, _turn(tip.link, previous_id))
            svc.chains.put(owner, previous_id, tip.breaks, history)
            return history
    turns = await _walk(svc, tip.link, owner)
    history = History(turns[:-1], turns[-1])
    if tip.breaks is not None:  # read before the walk: a break meanwhile is a miss later
        svc.chains.put(owner, previous_id, tip.breaks, history)
    return history


async def _walk(svc: Bundle, tip: ChainLink, owner: str) -> list[Turn]:
    """The chain `tip` (already read) ends, walked from the response before it."""
    previous_id, before = tip.response_id, tip.previous_response_id
    links = [tip, *([] if before is None else await svc.index.chain(before, owner, MAX_CHAIN))]
    if len(links) > MAX_CHAIN:
        raise too_long()
    # The walk stopped at a response this owner cannot see (the named one, or an earlier
    # turn that was deleted): the error names the id the client sent, as OpenAI's does.
    if not links or links[-1].previous_response_id is not None:
        raise _previous_not_found(previous_id)
    return [_turn(link, previous_id) for link in reversed(links)]


def too_long() -> InvalidRequest:
    """The refusal of a continuation past `MAX_CHAIN` responses, in OpenAI's words."""
    return InvalidRequest(
        f"The conversation is longer than {MAX_CHAIN} responses.",
        param="previous_response_id",
        code="invalid_value",
    )


def _previous_not_found(previous_id: str) -> NotFound:
    return NotFound(
        f"Previous response with id '{previous_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


def _turn(link: ChainLink, previous_id: str) -> Turn:
    if link.status in ("queued", "in_progress"):
        raise InvalidRequest(
            f"Previous response '{link.response_id}' is still {link.status}; wait until it ends.",
            param="previous_response_id",
            code="previous_response_not_finished",
        )
    if link.request_facts is None:
        raise _previous_not_found(previous_id)
    if link.erased:
        raise InvalidRequest(
            f"Previous response '{link.response_id}' was erased: its content is gone, so the "
            "conversation cannot be continued from it.",
            param="previous_response_id",
            code="previous_response_erased",
        )
    answer = _answer.decode(link.snapshot)
    asked = _asked.decode(link.request_facts)
    # MCP tool lists its client passed back: set aside, shown to no model, but in the
    # context of every later turn (service/tools/mcploop.py `listed_before`).
    aside = sorted(asked.extra.aside, key=lambda a: a.at)
    return Turn(
        response_id=link.response_id,
        instructions=answer.instructions,
        input=asked.input,
        output=answer.output,
        listed=lists_sent(a.item for a in aside),
    )
