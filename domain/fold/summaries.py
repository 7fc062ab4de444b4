"""How a reasoning item's summary parts fold: added, streamed into and done one at a
time, outside any content part."""

from __future__ import annotations

import msgspec

from domain.events import (
    Event,
    ReasoningSummaryPartAdded,
    ReasoningSummaryPartDone,
    ReasoningSummaryTextDelta,
    ReasoningSummaryTextDone,
)
from domain.fold.shared import Handler, fail, must_be_closing, not_closing, open_item, set_item
from domain.objects import ReasoningItem, SummaryText
from domain.state import ResponseState

replace = msgspec.structs.replace

SummaryEvent = ReasoningSummaryTextDelta | ReasoningSummaryTextDone | ReasoningSummaryPartDone


def _open_summary(state: ResponseState, event: SummaryEvent) -> tuple[ReasoningItem, SummaryText]:
    s = event.summary_index
    item = open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, ReasoningItem) or state.open_summary != s:
        raise fail(state, event, f"summary part {s} is not open")
    return item, item.summary[s]


def _summary_part_added(state: ResponseState, event: ReasoningSummaryPartAdded) -> ResponseState:
    i, s = event.output_index, event.summary_index
    item = open_item(state, event, i, event.item_id)
    if not isinstance(item, ReasoningItem) or s != len(item.summary) or event.part.text:
        raise fail(state, event, f"cannot add summary part {s}")
    if state.open_part is not None or state.open_summary is not None:
        raise fail(state, event, "another part is still open")
    new = replace(item, summary=[*item.summary, event.part])
    return set_item(state, i, new, version=event.sequence_number, open_summary=s)


def _summary_delta(state: ResponseState, event: ReasoningSummaryTextDelta) -> ResponseState:
    item, part = _open_summary(state, event)
    not_closing(state, event)
    summary = list(item.summary)
    summary[event.summary_index] = replace(part, text=part.text + event.delta)
    new = replace(item, summary=summary)
    return set_item(state, event.output_index, new, version=event.sequence_number)


def _summary_done(state: ResponseState, event: ReasoningSummaryTextDone) -> ResponseState:
    _, part = _open_summary(state, event)
    not_closing(state, event)
    if part.text != event.text:
        raise fail(state, event, "the summary text differs from its deltas")
    return replace(state, version=event.sequence_number, closing=True)


def _summary_part_done(state: ResponseState, event: ReasoningSummaryPartDone) -> ResponseState:
    _, part = _open_summary(state, event)
    if part != event.part:
        raise fail(state, event, "the summary part differs from its deltas")
    must_be_closing(state, event, "summary's final text")
    return replace(state, version=event.sequence_number, open_summary=None, closing=False)


HANDLERS: dict[type[Event], Handler] = {
    ReasoningSummaryPartAdded: _summary_part_added,
    ReasoningSummaryTextDelta: _summary_delta,
    ReasoningSummaryTextDone: _summary_done,
    ReasoningSummaryPartDone: _summary_part_done,
}
