"""`POST /v1/responses/compact`: a long conversation made short by the model itself.

The answer is OpenAI's compacted response: its id is the summarising response's
(service/prompts/compaction.py), its `output` the conversation's user messages followed by
one `compaction` item, whose `encrypted_content` is the summary sealed like stateless
reasoning and whose id `cmp_<suffix>` names the summarising response.
"""

from __future__ import annotations

from typing import Any

import msgspec

from domain.objects import InputItem, InputMessage, Usage
from service.bundle import Bundle
from service.prompts.compaction import summarised, summarising
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
    final, blob = await summarised(svc, create_and_wait, summarising(req, given), owner)
    earlier = [item for turn in prepared.history for item in turn.input]
    users = [msgspec.to_builtins(m) for m in [*earlier, *given] if _is_user(m)]
    item = {"id": "cmp_" + final.id.removeprefix("resp_"), "type": "compaction"}
    item["encrypted_content"] = blob
    return Compacted(
        id=final.id, created_at=final.created_at, output=[*users, item], usage=final.usage
    )


def _is_user(item: InputItem) -> bool:
    return isinstance(item, InputMessage) and item.role == "user"
