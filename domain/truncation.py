"""`truncation: "auto"`: the oldest part of a conversation dropped so the prompt fits the
model's context window.

OpenAI's words for the parameter: "If the input to this Response exceeds the model's
context window size, the model will truncate the response to fit the context window by
dropping items from the beginning of the conversation" (openai-python
`ResponseCreateParams.truncation`). Here the drop is whole earlier turns first (a turn's
input and output go together), then the request's own oldest input items; the last input
item is never dropped. A tool output whose call was dropped goes with it, so no engine is
given an answer to a question it cannot see.

The cut is recorded in the request's facts (`Truncation`), so every process that builds the
prompt again from the log (a worker that claims a queued response) drops exactly the same.
"""

from __future__ import annotations

import msgspec

from domain.generation import Turn
from domain.objects import (
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    InputCustomToolCall,
    InputFunctionCall,
    InputItem,
    OutputItem,
)

# The key of the request facts' `extra` that records a cut.
FACT = "truncation"


class Truncation(msgspec.Struct, frozen=True, kw_only=True):
    """What `truncation: "auto"` dropped, and the count that made it fit."""

    dropped_turns: int = 0
    dropped_items: int = 0
    input_tokens: int  # of the prompt as cut, as the engine counts
    context_window: int


def cut(history: list[Turn], items: list[InputItem], turns: int, count: int) -> Cut:
    """The conversation without its `turns` oldest turns and `count` oldest input items,
    and without the tool outputs whose calls went with them."""
    kept_turns = history[turns:]
    kept_items = items[count:]
    calls = {
        item.call_id
        for item in [*(x for t in kept_turns for x in (*t.input, *t.output)), *kept_items]
        if isinstance(item, FunctionCall | CustomToolCall | InputFunctionCall | InputCustomToolCall)
    }

    def answered(item: InputItem | OutputItem) -> bool:
        if isinstance(item, FunctionCallOutput | CustomToolCallOutput):
            return item.call_id in calls
        return True

    return Cut(
        history=[
            msgspec.structs.replace(t, input=[x for x in t.input if answered(x)])
            for t in kept_turns
        ],
        items=[x for x in kept_items if answered(x)],
    )


class Cut(msgspec.Struct, frozen=True, kw_only=True):
    history: list[Turn]
    items: list[InputItem]


def steps(history: list[Turn], items: list[InputItem]) -> int:
    """How many cuts there are to try: each earlier turn, then each input item but the last."""
    return len(history) + max(0, len(items) - 1)


def at(history: list[Turn], step: int) -> tuple[int, int]:
    """The (turns, items) dropped by the `step`-th cut (0: nothing)."""
    turns = min(step, len(history))
    return turns, step - turns
