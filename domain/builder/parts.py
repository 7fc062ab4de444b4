"""Content parts and reasoning summaries: opened as text streams into them, each delta
and final text as the event of its part's kind, closed with their final text."""

from __future__ import annotations

from typing import Any

from domain.batch import Batch
from domain.events import (
    AnyEvent,
    ContentPartAdded,
    ContentPartDone,
    OutputRefusalDelta,
    OutputRefusalDone,
    OutputTextDelta,
    OutputTextDone,
    ReasoningEvents,
    ReasoningSummaryPartAdded,
    ReasoningSummaryPartDone,
    ReasoningSummaryTextDelta,
    ReasoningSummaryTextDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    SchemaReasoningDelta,
    SchemaReasoningDone,
)
from domain.fold.parts import content_parts
from domain.objects import ContentPart, OutputText, ReasoningItem, Refusal, SummaryText


def _ensure_part(batch: Batch, fresh: ContentPart) -> int:
    """The open part's index, if it is of `fresh`'s kind; else `fresh` is added and opened."""
    state = batch.state
    assert state.open_index is not None
    item = batch.response.output[state.open_index]
    if state.open_part is not None and type(content_parts(item)[state.open_part]) is type(fresh):
        return state.open_part
    close_part(batch)
    i, iid, c = state.open_index, item.id or "", len(content_parts(item))
    batch.add(
        lambda n: ContentPartAdded(
            sequence_number=n, item_id=iid, output_index=i, content_index=c, part=fresh
        )
    )
    return c


def add_text(
    batch: Batch, text: str, fresh: ContentPart, logprobs: list[dict[str, Any]] | None = None
) -> None:
    """Stream `text` into the open part of `fresh`'s kind, adding that part if need be."""
    c = _ensure_part(batch, fresh)
    i = batch.state.open_index
    assert i is not None
    iid, naming = batch.response.output[i].id or "", batch.state.reasoning_events
    batch.add(
        lambda n: _text_delta_event(
            fresh, n, iid, i, c, delta=text, naming=naming, logprobs=logprobs or []
        )
    )


# Reasoning text events by the naming the response's creation recorded (`RequestFacts`).
_REASONING_EVENTS = {
    "openai": (ReasoningTextDelta, ReasoningTextDone),
    "open_responses": (SchemaReasoningDelta, SchemaReasoningDone),
}


def _text_delta_event(
    part: ContentPart,
    n: int,
    iid: str,
    i: int,
    c: int,
    *,
    delta: str,
    naming: ReasoningEvents,
    logprobs: list[dict[str, Any]],
) -> AnyEvent:
    """The delta event that streams into a part of this kind."""
    if isinstance(part, OutputText):
        return OutputTextDelta(
            sequence_number=n,
            item_id=iid,
            output_index=i,
            content_index=c,
            delta=delta,
            logprobs=logprobs,
        )
    if isinstance(part, Refusal):
        return OutputRefusalDelta(
            sequence_number=n, item_id=iid, output_index=i, content_index=c, delta=delta
        )
    return _REASONING_EVENTS[naming][0](
        sequence_number=n, item_id=iid, output_index=i, content_index=c, delta=delta
    )


def add_summary(batch: Batch, text: str) -> None:
    """Stream `text` into the open reasoning item's summary part, adding one if none is open."""
    state = batch.state
    i = state.open_index
    assert i is not None
    item = batch.response.output[i]
    assert isinstance(item, ReasoningItem)
    iid = item.id
    if state.open_summary is None:
        close_part(batch)
        s = len(item.summary)
        batch.add(
            lambda n: ReasoningSummaryPartAdded(
                sequence_number=n,
                item_id=iid,
                output_index=i,
                summary_index=s,
                part=SummaryText(text=""),
            )
        )
    s2 = batch.state.open_summary
    assert s2 is not None
    batch.add(
        lambda n: ReasoningSummaryTextDelta(
            sequence_number=n, item_id=iid, output_index=i, summary_index=s2, delta=text
        )
    )


def close_part(batch: Batch) -> None:
    """Send the open part's (or summary's) final text, then close it."""
    state, resp = batch.state, batch.response
    i = state.open_index
    if i is None:
        return
    item = resp.output[i]
    if state.open_summary is not None and isinstance(item, ReasoningItem):
        _close_summary(batch, item, i, state.open_summary)
        return
    c = state.open_part
    if c is None:
        return
    iid, p, naming = item.id or "", content_parts(item)[c], state.reasoning_events
    batch.add(lambda n: _text_done_event(p, n, iid, i, c, naming))
    batch.add(
        lambda n: ContentPartDone(
            sequence_number=n, item_id=iid, output_index=i, content_index=c, part=p
        )
    )


def _close_summary(batch: Batch, item: ReasoningItem, i: int, s: int) -> None:
    iid, part = item.id, item.summary[s]
    batch.add(
        lambda n: ReasoningSummaryTextDone(
            sequence_number=n, item_id=iid, output_index=i, summary_index=s, text=part.text
        )
    )
    batch.add(
        lambda n: ReasoningSummaryPartDone(
            sequence_number=n, item_id=iid, output_index=i, summary_index=s, part=part
        )
    )


def _text_done_event(
    part: ContentPart, n: int, iid: str, i: int, c: int, naming: ReasoningEvents
) -> AnyEvent:
    """The event that carries a part's final text, by the part's kind."""
    if isinstance(part, OutputText):
        return OutputTextDone(
            sequence_number=n,
            item_id=iid,
            output_index=i,
            content_index=c,
            text=part.text,
            logprobs=part.logprobs,
        )
    if isinstance(part, Refusal):
        return OutputRefusalDone(
            sequence_number=n, item_id=iid, output_index=i, content_index=c, refusal=part.refusal
        )
    return _REASONING_EVENTS[naming][1](
        sequence_number=n, item_id=iid, output_index=i, content_index=c, text=part.text
    )
