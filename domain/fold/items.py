"""How output items fold: added empty and in progress at the next index, done as their
deltas built them (MCP and built-in calls close through their own families)."""

from __future__ import annotations

import msgspec

from domain.events import Event, OutputItemAdded, OutputItemDone
from domain.fold.builtins import builtin_done, with_facts
from domain.fold.mcp import mcp_item_done
from domain.fold.parts import content_parts
from domain.fold.shared import Handler, fail, live_response, must_be_closing, open_item, set_item
from domain.objects import (
    BuiltinCall,
    CodeInterpreterCall,
    CompactionItem,
    CustomToolCall,
    FunctionCall,
    McpApprovalRequest,
    McpCall,
    McpListTools,
    ReasoningItem,
    WebSearchCall,
)
from domain.state import ResponseState

replace = msgspec.structs.replace


def _item_added(state: ResponseState, event: OutputItemAdded) -> ResponseState:
    resp = live_response(state, event)
    i, item = event.output_index, event.item
    if not state.started or state.open_index is not None:
        raise fail(state, event, "an item is still open, or the response never started")
    if i != len(resp.output):
        raise fail(state, event, f"a new item must be at index {len(resp.output)}")
    if isinstance(item, McpListTools):
        if item.tools or item.error is not None:
            raise fail(state, event, "a new tool list must be empty")
    elif isinstance(item, McpApprovalRequest | CompactionItem):
        pass  # added whole, as OpenAI does: nothing streams into it (and neither has a status)
    elif item.status != "in_progress":
        raise fail(state, event, f"a new item must be in_progress at index {len(resp.output)}")
    if (
        (isinstance(item, McpCall) and (item.arguments or item.output or item.error))
        or content_parts(item)
        or (isinstance(item, FunctionCall) and item.arguments)
        or (isinstance(item, CustomToolCall) and item.input)
        or (isinstance(item, CodeInterpreterCall) and (item.code or item.outputs))
    ):
        raise fail(state, event, "a new item must be empty")
    return replace(
        with_facts(state, item.id, event.facts),
        version=event.sequence_number,
        response=replace(resp, output=[*resp.output, item]),
        open_index=i,
        open_part=None,
        open_summary=None,
        closing=False,
        mcp_step=None,
    )


def _item_done(state: ResponseState, event: OutputItemDone) -> ResponseState:
    i, done = event.output_index, event.item
    item = open_item(state, event, i, done.id or "")
    if state.open_part is not None or state.open_summary is not None:
        raise fail(state, event, "a content part is still open")
    if isinstance(item, FunctionCall | CustomToolCall):
        must_be_closing(state, event, "call's final arguments")
    if isinstance(item, McpListTools | McpCall | McpApprovalRequest):
        return mcp_item_done(state, event, item)
    if isinstance(item, WebSearchCall | CodeInterpreterCall):
        return builtin_done(state, event, item)
    # A reasoning item may gain its sealed content as it closes (service/reasoning/sealing.py).
    if (
        isinstance(item, ReasoningItem)
        and isinstance(done, ReasoningItem)
        and not item.encrypted_content
    ):
        item = replace(item, encrypted_content=done.encrypted_content)
    if isinstance(item, CompactionItem) or isinstance(done, CompactionItem):
        differs = item != done
    elif isinstance(done, McpListTools | McpCall | McpApprovalRequest | BuiltinCall):
        differs = True  # an MCP or built-in call closes through its own handler, above
    else:
        ended = done.status in ("completed", "incomplete")
        differs = not ended or replace(item, status=done.status) != done
    if differs:
        raise fail(state, event, "the final item differs from its deltas")
    return set_item(state, i, done, version=event.sequence_number, open_index=None, closing=False)


HANDLERS: dict[type[Event], Handler] = {
    OutputItemAdded: _item_added,
    OutputItemDone: _item_done,
}
