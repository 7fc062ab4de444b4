"""How a client-run call's input folds: a function call's arguments and a custom tool
call's input, streamed and then final."""

from __future__ import annotations

import msgspec

from domain.events import (
    CustomToolCallInputDelta,
    CustomToolCallInputDone,
    Event,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
)
from domain.fold.shared import Handler, fail, not_closing, open_item, set_item
from domain.objects import CustomToolCall, FunctionCall
from domain.state import ResponseState

replace = msgspec.structs.replace


def _arguments_delta(state: ResponseState, event: FunctionCallArgumentsDelta) -> ResponseState:
    i = event.output_index
    item = open_item(state, event, i, event.item_id)
    if not isinstance(item, FunctionCall):
        raise fail(state, event, f"output item {i} is not a function call")
    not_closing(state, event)
    new = replace(item, arguments=item.arguments + event.delta)
    return set_item(state, i, new, version=event.sequence_number)


def _arguments_done(state: ResponseState, event: FunctionCallArgumentsDone) -> ResponseState:
    item = open_item(state, event, event.output_index, event.item_id)
    if (
        not isinstance(item, FunctionCall)
        or item.arguments != event.arguments
        or item.name != event.name
    ):
        raise fail(state, event, "the final arguments differ from their deltas")
    not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _input_delta(state: ResponseState, event: CustomToolCallInputDelta) -> ResponseState:
    i = event.output_index
    item = open_item(state, event, i, event.item_id)
    if not isinstance(item, CustomToolCall):
        raise fail(state, event, f"output item {i} is not a custom tool call")
    not_closing(state, event)
    new = replace(item, input=item.input + event.delta)
    return set_item(state, i, new, version=event.sequence_number)


def _input_done(state: ResponseState, event: CustomToolCallInputDone) -> ResponseState:
    item = open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, CustomToolCall) or item.input != event.input:
        raise fail(state, event, "the final input differs from its deltas")
    not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


HANDLERS: dict[type[Event], Handler] = {
    FunctionCallArgumentsDelta: _arguments_delta,
    FunctionCallArgumentsDone: _arguments_done,
    CustomToolCallInputDelta: _input_delta,
    CustomToolCallInputDone: _input_done,
}
