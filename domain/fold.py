"""The fold of a response's log: `evolve` (one event), `replay` (a stream) and `project`.

Lifecycle: queued -> in_progress -> completed | failed | cancelled | incomplete, and
queued -> cancelled | failed. Terminal states absorb; exactly one terminal event, last.
`evolve` is strict: it refuses any event that could not have been produced by the commands
(a gap in positions, a delta for an item that is not open, a snapshot that differs from the
fold), so replaying a corrupted log fails loudly at the offending position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import msgspec

from domain.errors import InvalidTransition, NotFound
from domain.events import (
    AnyEvent,
    CodeInterpreterCallCodeDelta,
    CodeInterpreterCallCodeDone,
    CodeInterpreterCallCompleted,
    CodeInterpreterCallInProgress,
    CodeInterpreterCallInterpreting,
    ContentPartAdded,
    ContentPartDone,
    CustomToolCallInputDelta,
    CustomToolCallInputDone,
    Event,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    LegacyResponseCancelled,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    McpCallCompleted,
    McpCallFailed,
    McpCallInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    McpListToolsInProgress,
    OutputItemAdded,
    OutputItemDone,
    OutputRefusalDelta,
    OutputRefusalDone,
    OutputTextDelta,
    OutputTextDone,
    ReasoningSummaryPartAdded,
    ReasoningSummaryPartDone,
    ReasoningSummaryTextDelta,
    ReasoningSummaryTextDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    ResponseCancelled,
    ResponseCompleted,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    ResponseInProgress,
    ResponseQueued,
    SchemaReasoningDelta,
    SchemaReasoningDone,
    TerminalEvent,
    ToolFacts,
    WebSearchCallCompleted,
    WebSearchCallInProgress,
    WebSearchCallSearching,
    tag_of,
)
from domain.objects import (
    BuiltinCall,
    CodeInterpreterCall,
    CompactionItem,
    ContentPart,
    CustomToolCall,
    FunctionCall,
    IncompleteDetails,
    McpApprovalRequest,
    McpCall,
    McpListTools,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Refusal,
    ResponseError,
    ResponseObject,
    SummaryText,
    Usage,
    WebSearchCall,
)
from domain.state import ResponseState

replace = msgspec.structs.replace

TextDeltaEvent = OutputTextDelta | OutputRefusalDelta | ReasoningTextDelta
TextDoneEvent = OutputTextDone | OutputRefusalDone | ReasoningTextDone
SummaryEvent = ReasoningSummaryTextDelta | ReasoningSummaryTextDone | ReasoningSummaryPartDone
PartKind = type[OutputText] | type[Refusal] | type[ReasoningText]


def evolve(state: ResponseState, event: AnyEvent) -> ResponseState:
    """Fold one event into the state; refuses anything the lifecycle does not allow."""
    _check_position(state, event)
    handler = _HANDLERS.get(type(event))
    if handler is None:  # pragma: no cover - the union is closed
        raise _fail(state, event, "unknown event")
    return handler(state, event)


def replay(events: Iterable[AnyEvent], state: ResponseState | None = None) -> ResponseState:
    """Fold a stream (or the rest of one) into its state."""
    state = state or ResponseState()
    for event in events:
        state = evolve(state, event)
    return state


def project(state: ResponseState) -> ResponseObject:
    """The OpenAI Response object that the state stands for."""
    if state.response is None:
        raise NotFound("the stream holds no response")
    return state.response


def terminal_snapshot(
    current: ResponseObject,
    status: Literal["completed", "failed", "cancelled", "incomplete"],
    *,
    completed_at: int | None,
    usage: Usage | None,
    error: ResponseError | None,
    incomplete_details: IncompleteDetails | None,
) -> ResponseObject:
    """The final response object: the folded output plus how it ended."""
    return replace(
        current,
        status=status,
        completed_at=completed_at,
        usage=usage,
        error=error,
        incomplete_details=incomplete_details,
    )


def content_parts(item: OutputItem) -> list[ContentPart]:
    """A copy of the item's content parts (messages and reasoning items have them)."""
    if isinstance(item, OutputMessage | ReasoningItem):
        return list(item.content)
    return []


# --- checks shared by the families ------------------------------------------------------------


def _fail(state: ResponseState, event: AnyEvent, why: str) -> InvalidTransition:
    rid = state.response.id if state.response else "?"
    return InvalidTransition(
        f"{rid}: event {event.sequence_number} ({type(event).__name__}) is illegal: {why}"
    )


def _check_position(state: ResponseState, event: AnyEvent) -> None:
    if event.sequence_number != state.version + 1:
        raise _fail(state, event, f"expected position {state.version + 1}")
    if event.sequence_number == 1 and state.response is not None:
        # What follows `response.created` is fixed: `queued` (background) or `in_progress`.
        second = ResponseQueued if state.response.background else ResponseInProgress
        if not isinstance(event, second):
            raise _fail(state, event, f"response.created must be followed by {tag_of(second)}")


def _resp(state: ResponseState, event: AnyEvent) -> ResponseObject:
    if state.response is None:
        raise _fail(state, event, "the stream does not start with response.created")
    if state.response.terminal:
        raise _fail(state, event, f"the response is already {state.response.status}")
    return state.response


def _open_item(state: ResponseState, event: AnyEvent, index: int, item_id: str) -> OutputItem:
    resp = _resp(state, event)
    if state.open_index != index:
        raise _fail(state, event, f"output item {index} is not open")
    item = resp.output[index]
    if item.id != item_id:
        raise _fail(state, event, f"item_id {item_id} is not {item.id}")
    return item


def _set_item(
    state: ResponseState, index: int, item: OutputItem, **changes: object
) -> ResponseState:
    assert state.response is not None
    output = list(state.response.output)
    output[index] = item
    return replace(state, response=replace(state.response, output=output), **changes)


def _with_parts(item: OutputItem, parts: list[ContentPart]) -> OutputItem:
    # Only message parts ever reach messages and only reasoning text reaches reasoning
    # items (`_part_added` checks it), so the list is already of the right kind.
    return replace(item, content=parts)


def _not_closing(state: ResponseState, event: AnyEvent) -> None:
    if state.closing:
        raise _fail(state, event, "the final text was already sent")


def _must_be_closing(state: ResponseState, event: AnyEvent, what: str) -> None:
    if not state.closing:
        raise _fail(state, event, f"the {what} was not sent first")


def _snapshot_check(
    state: ResponseState, event: AnyEvent, expected: ResponseObject, got: ResponseObject
) -> None:
    if expected != got:
        raise _fail(state, event, "its response snapshot differs from the fold of the log")


# --- lifecycle --------------------------------------------------------------------------------


def _created(state: ResponseState, event: ResponseCreated) -> ResponseState:
    if state.response is not None:
        raise _fail(state, event, "the response was already created")
    r = event.response
    want = "queued" if r.background else "in_progress"
    ended = r.error or r.incomplete_details or r.completed_at is not None
    if r.status != want or r.output or r.usage is not None or ended:
        raise _fail(state, event, f"a new response must be {want} with no output")
    return ResponseState(version=event.sequence_number, response=r, facts=event.facts)


def _queued(state: ResponseState, event: ResponseQueued) -> ResponseState:
    resp = _resp(state, event)
    if resp.status != "queued" or state.version != 0:
        raise _fail(state, event, "response.queued must follow response.created")
    _snapshot_check(state, event, resp, event.response)
    return replace(state, version=event.sequence_number)


def _in_progress(state: ResponseState, event: ResponseInProgress) -> ResponseState:
    resp = _resp(state, event)
    if state.started:
        raise _fail(state, event, "the response already started")
    _snapshot_check(state, event, replace(resp, status="in_progress"), event.response)
    return replace(state, version=event.sequence_number, response=event.response, started=True)


_TERMINAL_STATUS: dict[type[Event], Literal["completed", "failed", "cancelled", "incomplete"]] = {
    ResponseCompleted: "completed",
    ResponseFailed: "failed",
    ResponseIncomplete: "incomplete",
    ResponseCancelled: "cancelled",
    LegacyResponseCancelled: "cancelled",
}


def _terminal(state: ResponseState, event: TerminalEvent) -> ResponseState:
    resp = _resp(state, event)
    if state.open_index is not None:
        raise _fail(state, event, f"output item {state.open_index} is still open")
    status = _TERMINAL_STATUS[type(event)]
    got = event.response
    _check_ending(state, event, status, got)
    expected = terminal_snapshot(
        resp,
        status,
        completed_at=got.completed_at,
        usage=got.usage,
        error=got.error if status == "failed" else None,
        incomplete_details=got.incomplete_details if status == "incomplete" else None,
    )
    _snapshot_check(state, event, expected, got)
    return replace(state, version=event.sequence_number, response=got)


def _check_ending(
    state: ResponseState, event: TerminalEvent, status: str, got: ResponseObject
) -> None:
    """How a response ended must agree with what its snapshot says about it."""
    if status in ("completed", "incomplete") and not state.started:
        raise _fail(state, event, f"a response that never started cannot be {status}")
    if status == "failed" and got.error is None:
        raise _fail(state, event, "a failed response must carry an error")
    if status == "incomplete" and got.incomplete_details is None:
        raise _fail(state, event, "an incomplete response must say why")
    if (got.completed_at is None) == (status == "completed"):
        raise _fail(state, event, "completed_at is set exactly when the response completed")


# --- output items -----------------------------------------------------------------------------


def _item_added(state: ResponseState, event: OutputItemAdded) -> ResponseState:
    resp = _resp(state, event)
    i, item = event.output_index, event.item
    if not state.started or state.open_index is not None:
        raise _fail(state, event, "an item is still open, or the response never started")
    if i != len(resp.output):
        raise _fail(state, event, f"a new item must be at index {len(resp.output)}")
    if isinstance(item, McpListTools):
        if item.tools or item.error is not None:
            raise _fail(state, event, "a new tool list must be empty")
    elif isinstance(item, McpApprovalRequest | CompactionItem):
        pass  # added whole, as OpenAI does: nothing streams into it (and neither has a status)
    elif item.status != "in_progress":
        raise _fail(state, event, f"a new item must be in_progress at index {len(resp.output)}")
    if (
        (isinstance(item, McpCall) and (item.arguments or item.output or item.error))
        or content_parts(item)
        or (isinstance(item, FunctionCall) and item.arguments)
        or (isinstance(item, CustomToolCall) and item.input)
        or (isinstance(item, CodeInterpreterCall) and (item.code or item.outputs))
    ):
        raise _fail(state, event, "a new item must be empty")
    return replace(
        _with_facts(state, item.id, event.facts),
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
    item = _open_item(state, event, i, done.id or "")
    if state.open_part is not None or state.open_summary is not None:
        raise _fail(state, event, "a content part is still open")
    if isinstance(item, FunctionCall | CustomToolCall):
        _must_be_closing(state, event, "call's final arguments")
    if isinstance(item, McpListTools | McpCall | McpApprovalRequest):
        return _mcp_item_done(state, event, item)
    if isinstance(item, WebSearchCall | CodeInterpreterCall):
        return _builtin_done(state, event, item)
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
        raise _fail(state, event, "the final item differs from its deltas")
    return _set_item(state, i, done, version=event.sequence_number, open_index=None, closing=False)


# --- content parts ----------------------------------------------------------------------------


def _open_part(
    state: ResponseState, event: AnyEvent, index: int, item_id: str, content_index: int
) -> tuple[OutputItem, ContentPart]:
    item = _open_item(state, event, index, item_id)
    if state.open_part != content_index:
        raise _fail(state, event, f"content part {content_index} is not open")
    content = item.content if isinstance(item, OutputMessage | ReasoningItem) else ()
    return item, content[content_index]


def _part_added(state: ResponseState, event: ContentPartAdded) -> ResponseState:
    i, c, part = event.output_index, event.content_index, event.part
    item = _open_item(state, event, i, event.item_id)
    parts = content_parts(item)
    fits = (isinstance(item, OutputMessage) and isinstance(part, OutputText | Refusal)) or (
        isinstance(item, ReasoningItem) and isinstance(part, ReasoningText)
    )
    empty = (part.refusal if isinstance(part, Refusal) else part.text) == ""
    if not fits or not empty or c != len(parts) or state.open_part is not None:
        raise _fail(state, event, f"cannot add a {type(part).__name__} at {c}")
    if state.open_summary is not None:
        raise _fail(state, event, "a summary part is still open")
    parts.append(part)
    return _set_item(state, i, _with_parts(item, parts), version=event.sequence_number, open_part=c)


def _part_done(state: ResponseState, event: ContentPartDone) -> ResponseState:
    c = event.content_index
    _, have = _open_part(state, event, event.output_index, event.item_id, c)
    if have != event.part:
        raise _fail(state, event, "the final part differs from its deltas")
    _must_be_closing(state, event, "part's final text")
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
        raise _fail(state, event, f"content part {c} is a {type(part).__name__}")
    if _NAMING.get(type(event), state.reasoning_events) != state.reasoning_events:
        raise _fail(state, event, f"the response names reasoning events {state.reasoning_events}")
    _not_closing(state, event)
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
    return _set_item(state, event.output_index, new, version=event.sequence_number)


def _text_done(state: ResponseState, event: TextDoneEvent) -> ResponseState:
    _, part = _open_text_part(state, event)
    have = part.refusal if isinstance(part, Refusal) else part.text
    want = event.refusal if isinstance(event, OutputRefusalDone) else event.text
    if have != want:
        raise _fail(state, event, "the final text differs from its deltas")
    return replace(state, version=event.sequence_number, closing=True)


# --- reasoning summaries ----------------------------------------------------------------------


def _open_summary(state: ResponseState, event: SummaryEvent) -> tuple[ReasoningItem, SummaryText]:
    s = event.summary_index
    item = _open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, ReasoningItem) or state.open_summary != s:
        raise _fail(state, event, f"summary part {s} is not open")
    return item, item.summary[s]


def _summary_part_added(state: ResponseState, event: ReasoningSummaryPartAdded) -> ResponseState:
    i, s = event.output_index, event.summary_index
    item = _open_item(state, event, i, event.item_id)
    if not isinstance(item, ReasoningItem) or s != len(item.summary) or event.part.text:
        raise _fail(state, event, f"cannot add summary part {s}")
    if state.open_part is not None or state.open_summary is not None:
        raise _fail(state, event, "another part is still open")
    new = replace(item, summary=[*item.summary, event.part])
    return _set_item(state, i, new, version=event.sequence_number, open_summary=s)


def _summary_delta(state: ResponseState, event: ReasoningSummaryTextDelta) -> ResponseState:
    item, part = _open_summary(state, event)
    _not_closing(state, event)
    summary = list(item.summary)
    summary[event.summary_index] = replace(part, text=part.text + event.delta)
    new = replace(item, summary=summary)
    return _set_item(state, event.output_index, new, version=event.sequence_number)


def _summary_done(state: ResponseState, event: ReasoningSummaryTextDone) -> ResponseState:
    _, part = _open_summary(state, event)
    _not_closing(state, event)
    if part.text != event.text:
        raise _fail(state, event, "the summary text differs from its deltas")
    return replace(state, version=event.sequence_number, closing=True)


def _summary_part_done(state: ResponseState, event: ReasoningSummaryPartDone) -> ResponseState:
    _, part = _open_summary(state, event)
    if part != event.part:
        raise _fail(state, event, "the summary part differs from its deltas")
    _must_be_closing(state, event, "summary's final text")
    return replace(state, version=event.sequence_number, open_summary=None, closing=False)


# --- function-call arguments ------------------------------------------------------------------


def _arguments_delta(state: ResponseState, event: FunctionCallArgumentsDelta) -> ResponseState:
    i = event.output_index
    item = _open_item(state, event, i, event.item_id)
    if not isinstance(item, FunctionCall):
        raise _fail(state, event, f"output item {i} is not a function call")
    _not_closing(state, event)
    new = replace(item, arguments=item.arguments + event.delta)
    return _set_item(state, i, new, version=event.sequence_number)


def _arguments_done(state: ResponseState, event: FunctionCallArgumentsDone) -> ResponseState:
    item = _open_item(state, event, event.output_index, event.item_id)
    if (
        not isinstance(item, FunctionCall)
        or item.arguments != event.arguments
        or item.name != event.name
    ):
        raise _fail(state, event, "the final arguments differ from their deltas")
    _not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _input_delta(state: ResponseState, event: CustomToolCallInputDelta) -> ResponseState:
    i = event.output_index
    item = _open_item(state, event, i, event.item_id)
    if not isinstance(item, CustomToolCall):
        raise _fail(state, event, f"output item {i} is not a custom tool call")
    _not_closing(state, event)
    new = replace(item, input=item.input + event.delta)
    return _set_item(state, i, new, version=event.sequence_number)


def _input_done(state: ResponseState, event: CustomToolCallInputDone) -> ResponseState:
    item = _open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, CustomToolCall) or item.input != event.input:
        raise _fail(state, event, "the final input differs from its deltas")
    _not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


# --- MCP items ------------------------------------------------------------------------------


def _mcp_item_done(
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
        raise _fail(state, event, "the final MCP item differs from its steps")
    return _set_item(
        state, i, done, version=event.sequence_number, open_index=None, closing=False, mcp_step=None
    )


def _open_list(state: ResponseState, event: Any) -> McpListTools:
    item = _open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, McpListTools):
        raise _fail(state, event, f"output item {event.output_index} is not an MCP tool list")
    return item


def _list_in_progress(state: ResponseState, event: McpListToolsInProgress) -> ResponseState:
    _open_list(state, event)
    _not_closing(state, event)
    return replace(state, version=event.sequence_number)


def _list_ended(
    state: ResponseState, event: McpListToolsCompleted | McpListToolsFailed
) -> ResponseState:
    _open_list(state, event)
    _not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _open_mcp_call(state: ResponseState, event: Any) -> McpCall:
    item = _open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, McpCall):
        raise _fail(state, event, f"output item {event.output_index} is not an MCP call")
    return item


def _mcp_arguments_delta(state: ResponseState, event: McpCallArgumentsDelta) -> ResponseState:
    item = _open_mcp_call(state, event)
    _not_closing(state, event)
    new = replace(item, arguments=item.arguments + event.delta)
    return _set_item(state, event.output_index, new, version=event.sequence_number)


def _mcp_arguments_done(state: ResponseState, event: McpCallArgumentsDone) -> ResponseState:
    item = _open_mcp_call(state, event)
    if item.arguments != event.arguments:
        raise _fail(state, event, "the final arguments differ from their deltas")
    _not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _mcp_calling(state: ResponseState, event: McpCallInProgress) -> ResponseState:
    _open_mcp_call(state, event)
    return _calling(state, event)


def _calling(state: ResponseState, event: AnyEvent) -> ResponseState:
    """A server-run call is handed to its server; once more when a process that took over
    the loop retries a call of an idempotent tool that was in flight (never a third time)."""
    _must_be_closing(state, event, "call's final arguments")
    step = {None: "calling", "calling": "retried"}.get(state.mcp_step)
    if step is None:
        raise _fail(state, event, "the call was already started, and retried")
    return replace(state, version=event.sequence_number, mcp_step=step)


def _mcp_ended(state: ResponseState, event: McpCallCompleted | McpCallFailed) -> ResponseState:
    _open_mcp_call(state, event)
    _must_be_closing(state, event, "call's final arguments")
    # A call may fail without ever being started (its arguments were cut off, or it was
    # refused); it completes only once started.
    if state.mcp_step == "ended" or (
        isinstance(event, McpCallCompleted) and state.mcp_step not in ("calling", "retried")
    ):
        raise _fail(state, event, "the call's result does not follow its start")
    return replace(state, version=event.sequence_number, mcp_step="ended")


# --- built-in tool calls (domain/builtins.py) ----------------------------------------------


def _with_facts(
    state: ResponseState, item_id: str | None, facts: ToolFacts | None
) -> ResponseState:
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
    item = _open_item(state, event, event.output_index, event.item_id)
    if not isinstance(item, kind):
        raise _fail(state, event, f"output item {event.output_index} is not a {kind.__name__}")
    return item


def _search_in_progress(state: ResponseState, event: WebSearchCallInProgress) -> ResponseState:
    """A web search call is added whole: its action is complete once it is in progress."""
    _open_builtin(state, event, WebSearchCall)
    _not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _code_in_progress(state: ResponseState, event: CodeInterpreterCallInProgress) -> ResponseState:
    _open_builtin(state, event, CodeInterpreterCall)
    _not_closing(state, event)
    return replace(state, version=event.sequence_number)


def _code_delta(state: ResponseState, event: CodeInterpreterCallCodeDelta) -> ResponseState:
    item = _open_builtin(state, event, CodeInterpreterCall)
    assert isinstance(item, CodeInterpreterCall)
    _not_closing(state, event)
    new = replace(item, code=(item.code or "") + event.delta)
    return _set_item(state, event.output_index, new, version=event.sequence_number)


def _code_done(state: ResponseState, event: CodeInterpreterCallCodeDone) -> ResponseState:
    item = _open_builtin(state, event, CodeInterpreterCall)
    assert isinstance(item, CodeInterpreterCall)
    if (item.code or "") != event.code:
        raise _fail(state, event, "the final code differs from its deltas")
    _not_closing(state, event)
    return replace(state, version=event.sequence_number, closing=True)


def _builtin_calling(
    state: ResponseState, event: WebSearchCallSearching | CodeInterpreterCallInterpreting
) -> ResponseState:
    kind = WebSearchCall if isinstance(event, WebSearchCallSearching) else CodeInterpreterCall
    _open_builtin(state, event, kind)
    return _calling(state, event)


def _builtin_completed(
    state: ResponseState, event: WebSearchCallCompleted | CodeInterpreterCallCompleted
) -> ResponseState:
    kind = WebSearchCall if isinstance(event, WebSearchCallCompleted) else CodeInterpreterCall
    _open_builtin(state, event, kind)
    _must_be_closing(state, event, "call's final arguments")
    if state.mcp_step not in ("calling", "retried"):
        raise _fail(state, event, "the call's result does not follow its start")
    return replace(state, version=event.sequence_number, mcp_step="ended")


def _builtin_done(state: ResponseState, event: OutputItemDone, item: BuiltinCall) -> ResponseState:
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
        raise _fail(state, event, "the final built-in call differs from its steps")
    changed = _with_facts(state, done.id, event.facts)
    return _set_item(
        changed,
        event.output_index,
        done,
        version=event.sequence_number,
        open_index=None,
        closing=False,
        mcp_step=None,
    )


# --- dispatch ---------------------------------------------------------------------------------

# A table rather than one `match`, so that each handler is typed for its own event class
# and each family's rules read on their own.
_HANDLERS: dict[type[Event], Callable[[ResponseState, Any], ResponseState]] = {
    ResponseCreated: _created,
    ResponseQueued: _queued,
    ResponseInProgress: _in_progress,
    ResponseCompleted: _terminal,
    ResponseFailed: _terminal,
    ResponseIncomplete: _terminal,
    ResponseCancelled: _terminal,
    LegacyResponseCancelled: _terminal,
    OutputItemAdded: _item_added,
    OutputItemDone: _item_done,
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
    ReasoningSummaryPartAdded: _summary_part_added,
    ReasoningSummaryTextDelta: _summary_delta,
    ReasoningSummaryTextDone: _summary_done,
    ReasoningSummaryPartDone: _summary_part_done,
    FunctionCallArgumentsDelta: _arguments_delta,
    FunctionCallArgumentsDone: _arguments_done,
    CustomToolCallInputDelta: _input_delta,
    CustomToolCallInputDone: _input_done,
    McpListToolsInProgress: _list_in_progress,
    McpListToolsCompleted: _list_ended,
    McpListToolsFailed: _list_ended,
    McpCallArgumentsDelta: _mcp_arguments_delta,
    McpCallArgumentsDone: _mcp_arguments_done,
    McpCallInProgress: _mcp_calling,
    McpCallCompleted: _mcp_ended,
    McpCallFailed: _mcp_ended,
    WebSearchCallInProgress: _search_in_progress,
    WebSearchCallSearching: _builtin_calling,
    WebSearchCallCompleted: _builtin_completed,
    CodeInterpreterCallInProgress: _code_in_progress,
    CodeInterpreterCallCodeDelta: _code_delta,
    CodeInterpreterCallCodeDone: _code_done,
    CodeInterpreterCallInterpreting: _builtin_calling,
    CodeInterpreterCallCompleted: _builtin_completed,
}
