"""What the fold's families of handlers share: the checks on the open response, item
and phase, writing an item back, and the start of a call a server runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from domain.errors import InvalidTransition
from domain.events import AnyEvent
from domain.objects import OutputItem, ResponseObject
from domain.state import ResponseState

replace = msgspec.structs.replace

# A handler folds one event of its class into the state.
Handler = Callable[[ResponseState, Any], ResponseState]


def fail(state: ResponseState, event: AnyEvent, why: str) -> InvalidTransition:
    """The error refusing `event` in this state, naming the response and position."""
    rid = state.response.id if state.response else "?"
    return InvalidTransition(
        f"{rid}: event {event.sequence_number} ({type(event).__name__}) is illegal: {why}"
    )


def live_response(state: ResponseState, event: AnyEvent) -> ResponseObject:
    """The response, created and not yet ended, that `event` must apply to."""
    if state.response is None:
        raise fail(state, event, "the stream does not start with response.created")
    if state.response.terminal:
        raise fail(state, event, f"the response is already {state.response.status}")
    return state.response


def open_item(state: ResponseState, event: AnyEvent, index: int, item_id: str) -> OutputItem:
    """The open output item at `index`, which `event` must name by its id."""
    resp = live_response(state, event)
    if state.open_index != index:
        raise fail(state, event, f"output item {index} is not open")
    item = resp.output[index]
    if item.id != item_id:
        raise fail(state, event, f"item_id {item_id} is not {item.id}")
    return item


def set_item(
    state: ResponseState, index: int, item: OutputItem, **changes: object
) -> ResponseState:
    """The state with the item at `index` replaced, and `changes` made."""
    assert state.response is not None
    output = list(state.response.output)
    output[index] = item
    return replace(state, response=replace(state.response, output=output), **changes)


def not_closing(state: ResponseState, event: AnyEvent) -> None:
    """Nothing streams after the final text (or arguments) of what is open."""
    if state.closing:
        raise fail(state, event, "the final text was already sent")


def must_be_closing(state: ResponseState, event: AnyEvent, what: str) -> None:
    """What closes the open item or part follows its final text (`what`)."""
    if not state.closing:
        raise fail(state, event, f"the {what} was not sent first")


def snapshot_check(
    state: ResponseState, event: AnyEvent, expected: ResponseObject, got: ResponseObject
) -> None:
    """A snapshot in an event must equal the fold of the log before it."""
    if expected != got:
        raise fail(state, event, "its response snapshot differs from the fold of the log")


def calling(state: ResponseState, event: AnyEvent) -> ResponseState:
    """A server-run call is handed to its server; once more when a process that took over
    the loop retries a call of an idempotent tool that was in flight (never a third time)."""
    must_be_closing(state, event, "call's final arguments")
    step = {None: "calling", "calling": "retried"}.get(state.mcp_step)
    if step is None:
        raise fail(state, event, "the call was already started, and retried")
    return replace(state, version=event.sequence_number, mcp_step=step)
