"""How MCP items fold: a tool listing, a call's arguments, its start (and one retry) and
result, and the item closed with what its execution gave."""

from __future__ import annotations

from typing import Any

import msgspec

from domain.events import (
    Event,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    McpCallCompleted,
    McpCallFailed,
    McpCallInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    McpListToolsInProgress,
    OutputItemDone,
)
from domain.fold.shared import (
    Handler,
    calling,
    fail,
    must_be_closing,
    not_closing,
    open_item,
    set_item,
)
from domain.objects import McpApprovalRequest, McpCall, McpListTools
from domain.state import ResponseState

replace = msgspec.structs.replace


def mcp_item_done(
    state: ResponseState, event: OutputItemDone, item: McpListTools | McpCall | McpApprovalRequest
) -> ResponseState:
    """An MCP item closes with what its execution gave (the tools, the output or error),
    which no delta streamed: only its identity must match what was opened and streamed."""
    i, done = event.output_index, event.item
    if isinstance(item, McpListTools):
        ok = (
            isinstance(done, McpListTools)
            and state.closing
            and done.server_label == item.server_label
        )
    elif isinstance(item, McpCall):
        ok = (
            isinstance(done, McpCall)
            and state.mcp_step == "ended"
            and (done.server_label, done.name, done.arguments)
            == (item.server_label, item.name, item.arguments)
            and done.status in ("completed", "failed", "incomplete")
        )
    else:
        ok = done == item
    if not ok:
        raise fail(state, event, "the final MCP item differs from its steps")
    return set_item(
        state, i, done, version=event.sequence_number, open_index=None, closing=False, mcp_step=None
    )


def _open_list(state: ResponseState, event: Any) -> McpListTools:
    item = open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, McpListTools):
        raise fail(state, event, f"output item {event.output_index} is not an MCP tool list")
    return item


def _list_in_progress(state: ResponseState, event: McpListToolsInProgress) -> ResponseState:
    _open_list(state, event)
    not_closing(state, event)
    return replace(state, version=event.sequence_number)


def _list_ended(
    state: ResponseState, event: McpListToolsCompleted | McpListToolsFailed
) -> ResponseState:
    _open_list(state, event)
    not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _open_mcp_call(state: ResponseState, event: Any) -> McpCall:
    item = open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, McpCall):
        raise fail(state, event, f"output item {event.output_index} is not an MCP call")
    return item


def _mcp_arguments_delta(state: ResponseState, event: McpCallArgumentsDelta) -> ResponseState:
    item = _open_mcp_call(state, event)
    not_closing(state, event)
    new = replace(item, arguments=item.arguments + event.delta)
    return set_item(state, event.output_index, new, version=event.sequence_number)


def _mcp_arguments_done(state: ResponseState, event: McpCallArgumentsDone) -> ResponseState:
    item = _open_mcp_call(state, event)
    if item.arguments != event.arguments:
        raise fail(state, event, "the final arguments differ from their deltas")
    not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _mcp_calling(state: ResponseState, event: McpCallInProgress) -> ResponseState:
    _open_mcp_call(state, event)
    return calling(state, event)


def _mcp_ended(state: ResponseState, event: McpCallCompleted | McpCallFailed) -> ResponseState:
    _open_mcp_call(state, event)
    must_be_closing(state, event, "call's final arguments")
    # A call may fail without ever being started (its arguments were cut off, or it was
    # refused); it completes only once started.
    if state.mcp_step == "ended" or (
        isinstance(event, McpCallCompleted) and state.mcp_step not in ("calling", "retried")
    ):
        raise fail(state, event, "the call's result does not follow its start")
    return replace(state, version=event.sequence_number, mcp_step="ended")


HANDLERS: dict[type[Event], Handler] = {
    McpListToolsInProgress: _list_in_progress,
    McpListToolsCompleted: _list_ended,
    McpListToolsFailed: _list_ended,
    McpCallArgumentsDelta: _mcp_arguments_delta,
    McpCallArgumentsDone: _mcp_arguments_done,
    McpCallInProgress: _mcp_calling,
    McpCallCompleted: _mcp_ended,
    McpCallFailed: _mcp_ended,
}
