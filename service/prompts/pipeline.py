"""A request turned into the parts of its engine's prompt: the stages of service/prompts/ run
once each, in order, for a create, a token count or a compaction (`Purpose`), into one
frozen `Prepared`.

The order is the refusals' order: the prompt template a request names is read into it
first (template.py); what it continues (its history) and what its references name next,
so that the seal and the input checks judge the input as the engine would be given it;
all of them, and the tools stage, run before the compaction, whose summarising response is
the first thing written; the window is fitted last, to the prompt the compaction left.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from domain.compaction import COMPACTION_FACT, compacted, from_last_compaction
from domain.generation import Compaction, Turn
from domain.objects import InputItem, ResponseObject
from domain.truncation import FACT as TRUNCATION_FACT
from domain.truncation import Truncation
from service.bundle import Bundle
from service.prompts.checks import check_calls, check_media
from service.prompts.compaction import Summarise, auto_compact
from service.prompts.history import history_for
from service.prompts.item_ids import assign_ids
from service.prompts.references import resolve_with_aside
from service.prompts.seal import check_sealed
from service.prompts.template import with_template
from service.prompts.tools import check_tools
from service.prompts.window import fit
from service.wire.create_request import CreateRequest

# The id of a prompt made only to be counted: never stored, nor given out.
UNSTORED = "resp_" + "0" * 32


class Purpose(enum.Enum):
    """What a prompt is prepared for, which says the stages run after the seal."""

    CREATE = "create"  # all: input checks, tools, compaction, window (over it: refused or cut)
    COUNT = "count"  # items named as an UNSTORED response's; window (over it: kept whole)
    COMPACT = "compact"  # none: the request is itself summarised


class Prepared(msgspec.Struct, frozen=True, kw_only=True):
    """What the stages made of a request, before anything of its own is written."""

    response: ResponseObject  # the request's (a count's: with the id UNSTORED)
    history: list[Turn]  # what comes before the input (a create's: from its last compaction)
    items: list[InputItem]  # the input, each reference resolved, those set aside left out
    extra: dict[str, Any]  # the request's facts, with what the stages made recorded
    compaction: Compaction | None = None
    truncation: Truncation | None = None


async def prepare_prompt(
    svc: Bundle,
    req: CreateRequest,
    owner: str,
    purpose: Purpose,
    *,
    history: list[Turn] | None = None,
    summarise: Summarise | None = None,
) -> Prepared:
    """Run the stages, each refusing what it must before anything is written (the
    compaction's own summarising response excepted: `summarise`, a create's only).
    `history`: the conversation before the input when the caller already holds it (a
    WebSocket connection's cache of its last response); else it is read from the log."""
    req = await with_template(svc, req, owner)
    response = req.response
    if purpose is Purpose.COUNT:
        response = msgspec.structs.replace(response, id=UNSTORED)
    if history is None:
        history = await history_for(svc, req.response, owner, req.input)
    items, extra = await resolve_with_aside(svc, req.input, req.extra, owner)
    if purpose is Purpose.COUNT:
        items = assign_ids(UNSTORED, items)
    check_sealed(svc.sealer, items)
    if purpose is Purpose.COMPACT:
        return Prepared(response=response, history=history, items=items, extra=extra)
    compaction = None
    if purpose is Purpose.CREATE:
        check_media(svc, response.model, items)
        check_calls(history, items)
        check_tools(svc, response)
        history = from_last_compaction(history)
        assert summarise is not None, "a create's compaction is a response of its own"
        # Made by a response of its own, before this one starts.
        compaction = await auto_compact(svc, req, history, items, owner, summarise)
    view = (history, items) if compaction is None else compacted(history, items, compaction)
    truncation = (await fit(svc, response, *view, refuse=purpose is Purpose.CREATE)).truncation
    return Prepared(
        response=response,
        history=history,
        items=items,
        extra=_recorded(extra, compaction, truncation),
        compaction=compaction,
        truncation=truncation,
    )


def _recorded(
    extra: dict[str, Any], compaction: Compaction | None, truncation: Truncation | None
) -> dict[str, Any]:
    """The request's facts with the compaction and the cut made at create: the input is
    kept whole, as sent; what the engine is given instead is a fact (service/prompts/build.py
    `prompt_from_facts` rebuilds it)."""
    if compaction is not None:
        extra = {**extra, COMPACTION_FACT: msgspec.to_builtins(compaction)}
    if truncation is not None:
        extra = {**extra, TRUNCATION_FACT: msgspec.to_builtins(truncation)}
    return extra
