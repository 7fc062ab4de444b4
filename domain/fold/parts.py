"""How content parts fold, and the text, refusal and reasoning text streamed into them:
each delta into an open part of its own kind, each final text equal to its deltas."""

from __future__ import annotations

import msgspec

from domain.events import (
    AnyEvent,
    ContentPartAdded,
    ContentPartDone,
    Event,
    OutputRefusalDelta,
    OutputRefusalDone,
    OutputTextDelta,
    OutputTextDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    SchemaReasoningDelta,
    SchemaReasoningDone,
)
from domain.fold.shared import Handler, fail, must_be_closing, not_closing, open_item, set_item
from domain.objects import (
    ContentPart,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Refusal,
)
from domain.state import ResponseState

replace = msgspec.structs.replace

TextDeltaEvent = OutputTextDelta | OutputRefusalDelta | ReasoningTextDelta
TextDoneEvent = OutputTextDone | OutputRefusalDone | ReasoningTextDone
PartKind = type[OutputText] | type[Refusal] | type[ReasoningText]


def content_parts(item: OutputItem) -> list[ContentPart]:
    """A copy of the item's content parts (messages and reasoning items have them)."""
    if isinstance(item, OutputMessage | ReasoningItem):
        return list(item.content)
    return []


def _with_parts(item: OutputItem, parts: list[ContentPart]) -> OutputItem:
    # Only message parts ever reach messages and only reasoning text reaches reasoning
    # items (`_part_added` checks it), so the list is already of the right kind.
    return replace(item, content=parts)


def _open_part(
    state: ResponseState, event: AnyEvent, index: int, item_id: str, content_index: int
) -> tuple[OutputItem, ContentPart]:
    item = open_item(state, event, index, item_id)
    if state.open_part != content_index:
        raise fail(state, event, f"content part {content_index} is not open")
    content = item.content if isinstance(item, OutputMessage | ReasoningItem) else ()
    return item, content[content_index]


def _part_added(state: ResponseState, event: ContentPartAdded) -> ResponseState:
    i, c, part = event.output_index, event.content_index, event.part
    item = open_item(state, event, i, event.item_id)
    parts = content_parts(item)
    fits = (isinstance(item, OutputMessage) and isinstance(part, OutputText | Refusal)) or (
        isinstance(item, ReasoningItem) and isinstance(part, ReasoningText)
    )
    empty = (part.refusal if isinstance(part, Refusal) else part.text) == ""
    if not fits or not empty or c != len(parts) or state.open_part is not None:
        raise fail(state, event, f"cannot add a {type(part).__name__} at {c}")
    if state.open_summary is not None:
        raise fail(state, event, "a summary part is still open")
    parts.append(part)
    return set_item(state, i, _with_parts(item, parts), version=event.sequence_number, open_part=c)


def _part_done(state: ResponseState, event: ContentPartDone) -> ResponseState:
    c = event.content_index
    _, have = _open_part(state, event, event.output_index, event.item_id, c)
    if have != event.part:
        raise fail(state, event, "the final part differs from its deltas")
    must_be_closing(state, event, "part's final text")
    return replace(state, version=event.sequence_number, open_part=None, closing=False)


# --- text, refusal and reasoning text deltas --------------------------------------------------

# A text event streams into a part of its own kind only: a refusal delta aimed at an
# output_text part would put refusal text where clients read the answer.
_PART_KIND: dict[type[Event], PartKind] = {
    OutputTextDelta: OutputText,
    OutputTextDone: OutputText,
    OutputRefusalDelta: Refusal,
    OutputRefusalDone: Refusal,
    ReasoningTextDelta: ReasoningText,
    ReasoningTextDone: ReasoningText,
    SchemaReasoningDelta: ReasoningText,
    SchemaReasoningDone: ReasoningText,
}
# Reasoning text events go by the names the response's creation chose, and only by those.
_NAMING: dict[type[Event], str] = {
    ReasoningTextDelta: "openai",
    ReasoningTextDone: "openai",
    SchemaReasoningDelta: "open_responses",
    SchemaReasoningDone: "open_responses",
}


def _open_text_part(
    state: ResponseState, event: TextDeltaEvent | TextDoneEvent
) -> tuple[OutputItem, OutputText | Refusal | ReasoningText]:
    """The open part the event streams into; it must be of the event's kind and still open."""
    c = event.content_index
    item, part = _open_part(state, event, event.output_index, event.item_id, c)
    if not isinstance(part, _PART_KIND[type(event)]):
        raise fail(state, event, f"content part {c} is a {type(part).__name__}")
    if _NAMING.get(type(event), state.reasoning_events) != state.reasoning_events:
        raise fail(state, event, f"the response names reasoning events {state.reasoning_events}")
    not_closing(state, event)
    return item, part


def _text_delta(state: ResponseState, event: TextDeltaEvent) -> ResponseState:
    item, part = _open_text_part(state, event)
    parts = content_parts(item)
    if isinstance(part, Refusal):
        parts[event.content_index] = replace(part, refusal=part.refusal + event.delta)
    elif isinstance(part, OutputText) and isinstance(event, OutputTextDelta) and event.logprobs:
        parts[event.content_index] = replace(
            part, text=part.text + event.delta, logprobs=[*part.logprobs, *event.logprobs]
        )
    else:
        parts[event.content_index] = replace(part, text=part.text + event.delta)
    new = _with_parts(item, parts)
    return set_item(state, event.output_index, new, version=event.sequence_number)


def _text_done(state: ResponseState, event: TextDoneEvent) -> ResponseState:
    _, part = _open_text_part(state, event)
    have = part.refusal if isinstance(part, Refusal) else part.text
    want = event.refusal if isinstance(event, OutputRefusalDone) else event.text
    if have != want:
        raise fail(state, event, "the final text differs from its deltas")
    return replace(state, version=event.sequence_number, closing=True)


HANDLERS: dict[type[Event], Handler] = {
    ContentPartAdded: _part_added,
    ContentPartDone: _part_done,
    OutputTextDelta: _text_delta,
    OutputTextDone: _text_done,
    OutputRefusalDelta: _text_delta,
    OutputRefusalDone: _text_done,
    ReasoningTextDelta: _text_delta,
    ReasoningTextDone: _text_done,
    SchemaReasoningDelta: _text_delta,
    SchemaReasoningDone: _text_done,
}
