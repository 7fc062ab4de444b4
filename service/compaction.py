"""`POST /v1/responses/compact`: a long conversation made short by the model itself.

The summary is written by a response of its own, made through the same engine and stored
like any other (its `metadata` says `resplog_compaction`), so the log shows exactly what was
summarised (its request's input items) and into what (its output). The answer is OpenAI's
compacted response: its id is that response's, its `output` the conversation's user
messages followed by one `compaction` item, whose `encrypted_content` is the summary sealed
like stateless reasoning (service/sealing.py) and whose id `cmp_<suffix>` names the
summarising response. A later request that passes the compaction item as input gives the
engine the summary in the place of the conversation it replaced.
"""

from __future__ import annotations

from typing import Any

import msgspec

from domain.errors import EngineError
from domain.objects import (
    InputItem,
    InputMessage,
    InputText,
    OutputMessage,
    OutputText,
    ReasoningText,
    ResponseObject,
    Usage,
)
from service.bundle import Bundle
from service.history import load_history
from service.references import resolve_references
from service.responses import create_and_wait
from service.sealing import check_sealed
from service.wire import CreateRequest

MARK = "resplog_compaction"
INSTRUCTIONS = (
    "You are compacting a conversation so that it can continue within a small context. "
    "Write a summary of everything above that the assistant needs to continue the task: "
    "the user's goals and constraints, decisions made, facts learned, tool calls and their "
    "results that still matter, and what remains to be done. Write only the summary."
)
ASK = "Summarize the conversation so far, as instructed."


class Compacted(msgspec.Struct, frozen=True, kw_only=True):
    """openai-python `CompactedResponse`."""

    id: str
    object: str = "response.compaction"
    created_at: int
    output: list[dict[str, Any]]
    usage: Usage | None


async def compact(svc: Bundle, req: CreateRequest, owner: str) -> Compacted:
    history = await load_history(svc, req.response.previous_response_id, owner)
    given = await resolve_references(svc, req.input, owner)
    check_sealed(svc.sealer, given)
    final = await create_and_wait(svc, _summarising(req, given), owner)
    if final.status != "completed":
        raise EngineError(
            f"the summarising response {final.id} ended {final.status}", code="compaction_failed"
        )
    blob = svc.sealer.seal([], [ReasoningText(text=_text(final))], source=final.id)
    earlier = [item for turn in history for item in turn.input]
    users = [msgspec.to_builtins(m) for m in [*earlier, *given] if _is_user(m)]
    item = {"id": "cmp_" + final.id.removeprefix("resp_"), "type": "compaction"}
    item["encrypted_content"] = blob
    return Compacted(
        id=final.id, created_at=final.created_at, output=[*users, item], usage=final.usage
    )


def _summarising(req: CreateRequest, given: list[InputItem]) -> CreateRequest:
    """The request of the response that writes the summary: the conversation, then the ask;
    no tools; stored and marked, so the log shows the compaction."""
    own = req.response.instructions
    instructions = INSTRUCTIONS + (f"\n\nThe conversation's instructions:\n{own}" if own else "")
    response = msgspec.structs.replace(
        req.response,
        instructions=instructions,
        tools=[],
        tool_choice="none",
        background=False,
        store=True,
        metadata={MARK: "1"},
    )
    ask = InputMessage(id="", role="user", content=[InputText(text=ASK)])
    return msgspec.structs.replace(req, response=response, input=[*given, ask], stream=False)


def _text(final: ResponseObject) -> str:
    return "".join(
        part.text
        for item in final.output
        if isinstance(item, OutputMessage)
        for part in item.content
        if isinstance(part, OutputText)
    )


def _is_user(item: InputItem) -> bool:
    return isinstance(item, InputMessage) and item.role == "user"
