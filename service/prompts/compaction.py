"""The compaction stage: a conversation made short by the model itself, at create (Codex's
`compaction_trigger`, or `context_management`'s `compact_threshold` crossed).

The summary is written by a response of its own, made through the same engine and stored
like any other (its `metadata` says `resplog_compaction`), so the log shows exactly what was
summarised (its request's input items) and into what (its output). Its `encrypted_content`
is the summary sealed like stateless reasoning (service/reasoning/sealing.py) and its id
`cmp_<suffix>` names the summarising response. A later request that passes the compaction
item as input gives the engine the summary in the place of the conversation it replaced.
The stage runs the summarising response through the create it is given (`Summarise`), so
that it need not import the create that calls it; `POST /v1/responses/compact` is
service/responses/compact.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
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
)
from service.bundle import Bundle
from service.prompts.build import build_prompt
from service.prompts.engine import engine_prompt
from service.prompts.references import as_input
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


Summarise = Callable[[Bundle, CreateRequest, str], Awaitable[ResponseObject]]
"""How a summarising response is run: created for an owner and waited for to its final
object (the create's own: service/responses/create.py, service/responses/modes.py)."""


async def summarised(
    svc: Bundle, summarise: Summarise, req: CreateRequest, owner: str
) -> tuple[ResponseObject, str]:
    """The summarising response `req` (made by `summarising`), run to its end: its final
    object and its summary sealed (a `compaction_failed` error if it did not complete)."""
    final = await summarise(svc, req, owner)
    if final.status != "completed":
        raise EngineError(
            f"the summarising response {final.id} ended {final.status}", code="compaction_failed"
        )
    return final, svc.sealer.seal([], [ReasoningText(text=_text(final))], source=final.id)


async def auto_compact(
    svc: Bundle,
    req: CreateRequest,
    history: list[Turn],
    items: list[InputItem],
    owner: str,
    summarise: Summarise,
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
        try:
            prompt = engine_prompt(build_prompt(req.response, items, history))
            counted = await svc.engine.count_tokens(prompt)
        except EngineError as exc:
            log.warning("cannot count the prompt for context_management: %s", exc)
            return None
        if threshold is None or counted <= threshold:
            return None
    final, blob = await summarised(svc, summarise, summarising(req, items, history), owner)
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


def summarising(
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
        # The template is in the instructions and input already (service/prompts/template.py).
        prompt=msgspec.UNSET,
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
