"""The one place a `Prompt` is made: the settings a response echoes, its input items and the
conversation before them, with the compaction and the cut its request's facts record.
"""

from __future__ import annotations

import msgspec

from domain.compaction import COMPACTION_FACT, compacted, from_last_compaction
from domain.events import RequestFacts
from domain.generation import Compaction, Prompt, Turn
from domain.objects import InputItem, ResponseObject
from domain.truncation import FACT as TRUNCATION_FACT
from domain.truncation import Truncation, cut
from service.prompts.tools import offered_tools


def build_prompt(
    response: ResponseObject,
    items: list[InputItem],
    history: list[Turn],
    include: list[str] | None = None,
    truncation: Truncation | None = None,
    compaction: Compaction | None = None,
) -> Prompt:
    """What an engine is asked: the settings the response echoes, the request's input items
    (from its facts) and the conversation before it, with what a compaction replaced given
    as its summary and less what `truncation: "auto"` cut (both recorded in the facts)."""
    if compaction is not None:
        history, items = compacted(history, items, compaction)
    history = from_last_compaction(history)
    if truncation is not None:
        kept = cut(history, items, truncation.dropped_turns, truncation.dropped_items)
        history, items = kept.history, kept.items
    return Prompt(
        response_id=response.id,
        model=response.model,
        instructions=response.instructions,
        history=history,
        input=items,
        tools=offered_tools(response),
        tool_choice=response.tool_choice,
        parallel_tool_calls=response.parallel_tool_calls,
        max_output_tokens=response.max_output_tokens,
        temperature=response.temperature,
        top_p=response.top_p,
        reasoning=response.reasoning,
        text=response.text,
        metadata=response.metadata,
        include=list(include or []),
        top_logprobs=response.top_logprobs or 0,
        presence_penalty=response.presence_penalty,
        frequency_penalty=response.frequency_penalty,
        hints=_hints(response),
        compaction=compaction,
    )


def prompt_from_facts(response: ResponseObject, facts: RequestFacts, history: list[Turn]) -> Prompt:
    """The prompt of a recorded request: its input, and the compaction and cut its facts
    record, over the conversation it continues."""
    return build_prompt(
        response,
        facts.input,
        history,
        facts.include,
        recorded_truncation(facts),
        recorded_compaction(facts),
    )


def _hints(response: ResponseObject) -> dict[str, str]:
    given = {
        "prompt_cache_key": response.prompt_cache_key,
        "safety_identifier": response.safety_identifier,
        "service_tier": None if response.service_tier == "default" else response.service_tier,
    }
    return {k: v for k, v in given.items() if v}


def recorded_compaction(facts: RequestFacts) -> Compaction | None:
    """The compaction made at create, as its facts record it."""
    raw = facts.extra.get(COMPACTION_FACT)
    return None if raw is None else msgspec.convert(raw, Compaction)


def recorded_truncation(facts: RequestFacts) -> Truncation | None:
    """The cut `truncation: "auto"` made at create, as its facts record it."""
    raw = facts.extra.get(TRUNCATION_FACT)
    return None if raw is None else msgspec.convert(raw, Truncation)
