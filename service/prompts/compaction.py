"""`POST /v1/responses/compact`: a long conversation made short by the model itself.

The summary is written by a response of its own, made through the same engine and stored
like any other (its `metadata` says `resplog_compaction`), so the log shows exactly what was
summarised (its request's input items) and into what (its output). The answer is OpenAI's
compacted response: its id is that response's, its `output` the conversation's user
messages followed by one `compaction` item, whose `encrypted_content` is the summary sealed
like stateless reasoning (service/reasoning/sealing.py) and whose id `cmp_<suffix>` names the
summarising response. A later request that passes the compaction item as input gives the
engine the summary in the place of the conversation it replaced.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from domain.compaction import kept_from
from domain.errors import EngineError
from domain.generation import Compaction, TokenUsage, Turn
from domain.objects import (
    CompactionItem,
    ConversationRef,
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
from service.prompts.history import load_history
from service.prompts.references import as_input, resolve_references
from service.reasoning.sealing import check_sealed
from service.responses.create import create_and_wait
from service.tools.mcploop import engine_prompt
from service.wire.create_request import CreateRequest

log = logging.getLogger("resplog.compaction")

MARK = "resplog_compaction"
# Where the decoder keeps Codex's trigger and `context_management` (the request's facts).
TRIGGER = "compaction_trigger"
CONTEXT_MANAGEMENT = "context_management"
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


async def auto_compact(
    svc: Bundle, req: CreateRequest, history: list[Turn], items: list[InputItem], owner: str
) -> Compaction | None:
    """The compaction a create asks for, made now by a summarising response of its own:
    Codex's `compaction_trigger` (the compaction is then the whole answer), or
    `context_management`'s `compact_threshold` crossed by the prompt's token count (the
    summary then replaces the conversation but for the request's items from its last
    user message on, tool outputs whose calls it replaced excepted: `kept_from`). None
    when neither applies."""
    trigger = bool(req.extra.get(TRIGGER))
    threshold = compact_threshold(req.extra)
    if not trigger and threshold is None:
        return None
    counted = None
    if not trigger:
        from service.responses.create import build_prompt

        try:
            prompt = engine_prompt(build_prompt(req.response, items, history))
            counted = await svc.engine.count_tokens(prompt)
        except EngineError as exc:
            log.warning("cannot count the prompt for context_management: %s", exc)
            return None
        if threshold is None or counted <= threshold:
            return None
    final = await create_and_wait(svc, _summarising(req, items, history), owner)
    if final.status != "completed":
        raise EngineError(
            f"the summarising response {final.id} ended {final.status}", code="compaction_failed"
        )
    blob = svc.sealer.seal([], [ReasoningText(text=_text(final))], source=final.id)
    item = CompactionItem(id="cmp_" + final.id.removeprefix("resp_"), encrypted_content=blob)
    used = final.usage
    return Compaction(
        item=item,
        summarized_by=final.id,
        only=trigger,
        kept_items=0 if trigger else len(items) - kept_from(items),
        usage=TokenUsage(
            input_tokens=used.input_tokens if used else 0,
            output_tokens=used.output_tokens if used else 0,
        ),
        input_tokens=counted,
        threshold=threshold,
    )


def compact_threshold(extra: dict[str, Any]) -> int | None:
    """`context_management: [{"type": "compaction", "compact_threshold": N}]`, as the
    decoder kept it (service/wire/context.py checked its shape)."""
    for entry in extra.get(CONTEXT_MANAGEMENT) or []:
        if entry.get("type") == "compaction" and isinstance(entry.get("compact_threshold"), int):
            return int(entry["compact_threshold"])
    return None


def _summarising(
    req: CreateRequest, given: list[InputItem], history: list[Turn] | None = None
) -> CreateRequest:
    """The request of the response that writes the summary: the conversation, then the ask;
    no tools; stored and marked, so the log shows the compaction. A request on a
    `conversation` gives the conversation's items (`history`, from its last compaction on)
    as input instead: a response on the conversation itself would join it when it ends."""
    if isinstance(req.response.conversation, ConversationRef):
        earlier = [i for turn in history or [] for i in [*turn.input, *map(as_input, turn.output)]]
        given = [*earlier, *given]
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
        conversation=msgspec.UNSET,
    )
    ask = InputMessage(id="", role="user", content=[InputText(text=ASK)])
    # Not the request's own extras: a summarising response never compacts in its turn.
    return msgspec.structs.replace(
        req, response=response, input=[*given, ask], stream=False, extra={}
    )


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
