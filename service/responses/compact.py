"""`POST /v1/responses/compact`: a long conversation made short by the model itself.

The answer is OpenAI's compacted response: its id is the summarising response's
(service/prompts/compaction.py), its `output` the conversation's user messages followed by
one `compaction` item, whose `encrypted_content` is the summary sealed like stateless
reasoning and whose id `cmp_<suffix>` names the summarising response.
"""

from __future__ import annotations

from typing import Any

import msgspec

from domain.objects import InputItem, InputMessage, ItemReference, Usage
from service.bundle import Bundle
from service.prompts.compaction import summarised, summarising
from service.prompts.item_ids import assign_ids
from service.prompts.pipeline import Purpose, prepare_prompt
from service.responses.modes import create_and_wait
from service.wire.create_request import CreateRequest


class Compacted(msgspec.Struct, frozen=True, kw_only=True):
    """openai-python `CompactedResponse`."""

    id: str
    object: str = "response.compaction"
    created_at: int
    output: list[dict[str, Any]]
    usage: Usage | None


async def compact(svc: Bundle, req: CreateRequest, owner: str) -> Compacted:
    prepared = await prepare_prompt(svc, req, owner, Purpose.COMPACT)
    given = prepared.items
    asked = summarising(req, given)
    final, blob = await summarised(svc, create_and_wait, asked, owner)
    earlier = [item for turn in prepared.history for item in turn.input if _is_user(item)]
    kept = [*earlier, *_recorded(final.id, asked, given)]
    users = [_without_empty_id(msgspec.to_builtins(m)) for m in kept]
    item = {"id": "cmp_" + final.id.removeprefix("resp_"), "type": "compaction"}
    item["encrypted_content"] = blob
    return Compacted(
        id=final.id, created_at=final.created_at, output=[*users, item], usage=final.usage
    )


def _recorded(rid: str, asked: CreateRequest, given: list[InputItem]) -> list[InputItem]:
    """The request's user messages under the ids the summarising response `rid` recorded
    them with (its input ends with them and its ask), so each can be referenced later
    (`item_reference`) and a client sends them back as it got them."""
    sent = [item for item in asked.input if not isinstance(item, ItemReference)]
    named = assign_ids(rid, sent)[-len(given) - 1 : -1] if given else []
    return [item for item in named if _is_user(item)]


def _is_user(item: InputItem) -> bool:
    return isinstance(item, InputMessage) and item.role == "user"


def _without_empty_id(item: dict[str, Any]) -> dict[str, Any]:
    """A user message with no id leaves `id` out, as OpenAI's input message does (one from
    a log written before input items got ids has none)."""
    return {k: v for k, v in item.items() if k != "id" or v}
