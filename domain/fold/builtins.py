"""How built-in tool calls fold (domain/builtins.py): a web search or a code interpreter
call, its code streamed, its start and result, its hidden facts kept beside the state."""

from __future__ import annotations

from typing import Any

import msgspec

from domain.events import (
    CodeInterpreterCallCodeDelta,
    CodeInterpreterCallCodeDone,
    CodeInterpreterCallCompleted,
    CodeInterpreterCallInProgress,
    CodeInterpreterCallInterpreting,
    Event,
    OutputItemDone,
    ToolFacts,
    WebSearchCallCompleted,
    WebSearchCallInProgress,
    WebSearchCallSearching,
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
from domain.objects import BuiltinCall, CodeInterpreterCall, WebSearchCall
from domain.state import ResponseState

replace = msgspec.structs.replace


def with_facts(state: ResponseState, item_id: str | None, facts: ToolFacts | None) -> ResponseState:
    """The hidden facts of a built-in call's item event, merged into what the state keeps."""
    if facts is None or item_id is None:
        return state
    had = state.tool_facts.get(item_id, ToolFacts())
    merged = ToolFacts(
        arguments=facts.arguments if facts.arguments is not None else had.arguments,
        output=facts.output if facts.output is not None else had.output,
    )
    return replace(state, tool_facts={**state.tool_facts, item_id: merged})


def _open_builtin(state: ResponseState, event: Any, kind: type[BuiltinCall]) -> BuiltinCall:
    item = open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, kind):
        raise fail(state, event, f"output item {event.output_index} is not a {kind.__name__}")
    return item


def _search_in_progress(state: ResponseState, event: WebSearchCallInProgress) -> ResponseState:
    """A web search call is added whole: its action is complete once it is in progress."""
    _open_builtin(state, event, WebSearchCall)
    not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _code_in_progress(state: ResponseState, event: CodeInterpreterCallInProgress) -> ResponseState:
    _open_builtin(state, event, CodeInterpreterCall)
    not_closing(state, event)
    return replace(state, version=event.sequence_number)


def _code_delta(state: ResponseState, event: CodeInterpreterCallCodeDelta) -> ResponseState:
    item = _open_builtin(state, event, CodeInterpreterCall)
    assert isinstance(item, CodeInterpreterCall)
    not_closing(state, event)
    new = replace(item, code=(item.code or "") + event.delta)
    return set_item(state, event.output_index, new, version=event.sequence_number)


def _code_done(state: ResponseState, event: CodeInterpreterCallCodeDone) -> ResponseState:
    item = _open_builtin(state, event, CodeInterpreterCall)
    assert isinstance(item, CodeInterpreterCall)
    if (item.code or "") != event.code:
        raise fail(state, event, "the final code differs from its deltas")
    not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _builtin_calling(
    state: ResponseState, event: WebSearchCallSearching | CodeInterpreterCallInterpreting
) -> ResponseState:
    kind = WebSearchCall if isinstance(event, WebSearchCallSearching) else CodeInterpreterCall
    _open_builtin(state, event, kind)
    return calling(state, event)


def _builtin_completed(
    state: ResponseState, event: WebSearchCallCompleted | CodeInterpreterCallCompleted
) -> ResponseState:
    kind = WebSearchCall if isinstance(event, WebSearchCallCompleted) else CodeInterpreterCall
    _open_builtin(state, event, kind)
    must_be_closing(state, event, "call's final arguments")
    if state.mcp_step not in ("calling", "retried"):
        raise fail(state, event, "the call's result does not follow its start")
    return replace(state, version=event.sequence_number, mcp_step="ended")


def builtin_done(state: ResponseState, event: OutputItemDone, item: BuiltinCall) -> ResponseState:
    """A built-in call closes `completed` after its `completed` event, else `failed` or
    `incomplete`, with what the tool gave (outputs) but the same call."""
    done = event.item
    same = isinstance(done, type(item)) and done.id == item.id
    if isinstance(item, WebSearchCall) and isinstance(done, WebSearchCall):
        same = same and done.action == item.action
    if isinstance(item, CodeInterpreterCall) and isinstance(done, CodeInterpreterCall):
        same = same and (done.code, done.container_id) == (item.code, item.container_id)
    ended = state.mcp_step == "ended"
    status = getattr(done, "status", None)
    ok = status == "completed" if ended else status in ("failed", "incomplete")
    if not (same and ok and state.closing):
        raise fail(state, event, "the final built-in call differs from its steps")
    changed = with_facts(state, done.id, event.facts)
    return set_item(
        changed,
        event.output_index,
        done,
        version=event.sequence_number,
        open_index=None,
        closing=False,
        mcp_step=None,
    )


HANDLERS: dict[type[Event], Handler] = {
    WebSearchCallInProgress: _search_in_progress,
    WebSearchCallSearching: _builtin_calling,
    WebSearchCallCompleted: _builtin_completed,
    CodeInterpreterCallInProgress: _code_in_progress,
    CodeInterpreterCallCodeDelta: _code_delta,
    CodeInterpreterCallCodeDone: _code_done,
    CodeInterpreterCallInterpreting: _builtin_calling,
    CodeInterpreterCallCompleted: _builtin_completed,
}
