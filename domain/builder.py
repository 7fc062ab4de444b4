"""The event builder: turns an engine's semantic deltas into OpenAI stream events (`emit`),
and closes what is open when the engine finishes (`finish`) or the response ends early
(`close_item`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec
from msgspec import UNSET

from domain.batch import Batch, require
from domain.errors import InvalidTransition
from domain.events import (
    AnyEvent,
    CodeInterpreterCallCodeDelta,
    CodeInterpreterCallCodeDone,
    CodeInterpreterCallInProgress,
    ContentPartAdded,
    ContentPartDone,
    CustomToolCallInputDelta,
    CustomToolCallInputDone,
    EndFacts,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    McpCallFailed,
    McpListToolsFailed,
    OutputItemAdded,
    OutputItemDone,
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
    ResponseCompleted,
    ResponseIncomplete,
    SchemaReasoningDelta,
    SchemaReasoningDone,
    ToolFacts,
    WebSearchCallInProgress,
)
from domain.fold.lifecycle import terminal_snapshot
from domain.fold.parts import content_parts
from domain.generation import (
    AnyDelta,
    ApprovalRequest,
    ArgumentsDelta,
    BrowserCall,
    Compacted,
    EndItem,
    Finished,
    FunctionCallStart,
    InputDelta,
    ReasoningDelta,
    ReasoningSealed,
    RefusalDelta,
    SummaryDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import (
    CodeInterpreterCall,
    ContentPart,
    CustomToolCall,
    FunctionCall,
    IncompleteDetails,
    InputTokensDetails,
    ItemStatus,
    McpApprovalRequest,
    McpCall,
    McpListTools,
    OutputItem,
    OutputMessage,
    OutputText,
    OutputTokensDetails,
    ReasoningItem,
    ReasoningText,
    Refusal,
    SummaryText,
    Usage,
    WebSearchCall,
    phase_of,
)
from domain.state import Decision, ResponseState
from domain.tools import action, container_id

replace = msgspec.structs.replace

Phase = Literal["commentary", "final_answer"] | None  # None: the engine did not say


def emit(state: ResponseState, delta: AnyDelta) -> Decision:
    """Turn one semantic delta of an engine into OpenAI stream events."""
    resp = require(state, "in_progress")
    if not state.started:
        raise InvalidTransition(f"response {resp.id} has not started")
    if isinstance(delta, Finished):
        raise InvalidTransition("Finished is not a content delta; use finish()")
    batch = Batch(state)
    _BUILDERS[type(delta)](batch, delta)
    return batch.decision()


def finish(state: ResponseState, finished: Finished, *, now: int) -> Decision:
    """The engine finished: close what is open; `completed`, or `incomplete` if cut off."""
    require(state, "in_progress")
    batch = Batch(state)
    usage = to_usage(finished.usage)
    if finished.reason == "stop":
        _complete(batch, usage, now)
    else:
        _cut_off(
            batch, usage, "max_output_tokens" if finished.reason == "length" else "content_filter"
        )
    return batch.decision()


def to_usage(usage: TokenUsage) -> Usage:
    """An engine's token counts as OpenAI reports them."""
    return Usage(
        input_tokens=usage.input_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=usage.cached_tokens),
        output_tokens=usage.output_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=usage.reasoning_tokens),
        total_tokens=usage.input_tokens + usage.output_tokens,
    )


def item_id(response_id: str, prefix: str, output_index: int) -> str:
    """Item ids derive from the response id and position, so the builder stays pure."""
    return f"{prefix}_{response_id.removeprefix('resp_')}_{output_index}"


def close_item(batch: Batch, status: ItemStatus = "completed") -> None:
    """Close the open output item (and its open part), if any, as `status`."""
    i = batch.state.open_index
    if i is None:
        return
    _close_part(batch)
    item = batch.response.output[i]
    if isinstance(item, McpCall):
        _close_mcp_call(batch, i, item, status)
        return
    if isinstance(item, McpListTools):
        _close_tool_list(batch, i, item)
        return
    if isinstance(item, WebSearchCall | CodeInterpreterCall):
        _close_builtin(batch, i, status)
        return
    if isinstance(item, FunctionCall):
        iid, name, args = item.id or "", item.name, item.arguments
        batch.add(
            lambda n: FunctionCallArgumentsDone(
                sequence_number=n, item_id=iid, output_index=i, name=name, arguments=args
            )
        )
    elif isinstance(item, CustomToolCall):
        cid, text = item.id or "", item.input
        batch.add(
            lambda n: CustomToolCallInputDone(
                sequence_number=n, item_id=cid, output_index=i, input=text
            )
        )
    done = replace(item, status=status)
    batch.add(lambda n: OutputItemDone(sequence_number=n, output_index=i, item=done))


def end_mcp_arguments(batch: Batch) -> None:
    """The open MCP call's arguments are complete; the call stays open to be run."""
    i = batch.state.open_index
    item = batch.response.output[i] if i is not None else None
    if isinstance(item, McpCall) and i is not None and not batch.state.closing:
        iid, args = item.id, item.arguments
        batch.add(
            lambda n: McpCallArgumentsDone(
                sequence_number=n, item_id=iid, output_index=i, arguments=args
            )
        )


NOT_RUN = "The call was not run: the response ended first."
CUT_OFF = "The response ended while the call ran; what it did is unknown."


def _close_mcp_call(batch: Batch, i: int, item: McpCall, status: ItemStatus) -> None:
    """An MCP call closed by anything but its result (the response ended, was cut off or
    cancelled): failed, with why, so no call is left open and none is run afterwards."""
    end_mcp_arguments(batch)
    iid = item.id
    if batch.state.mcp_step != "ended":
        batch.add(lambda n: McpCallFailed(sequence_number=n, item_id=iid, output_index=i))
    current = batch.response.output[i]
    assert isinstance(current, McpCall)
    done = current
    if current.status == "in_progress":
        error = {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": NOT_RUN}]}
        done = replace(current, status="failed" if status == "completed" else status, error=error)
    batch.add(lambda n: OutputItemDone(sequence_number=n, output_index=i, item=done))


def _close_builtin(batch: Batch, i: int, status: ItemStatus) -> None:
    """A built-in call closed by the response's end before its result: `failed` (or the
    end's own status), never run afterwards."""
    end_code(batch)
    current = batch.response.output[i]
    assert isinstance(current, WebSearchCall | CodeInterpreterCall)
    ended = "failed" if status == "completed" else status
    why = NOT_RUN if batch.state.mcp_step is None else CUT_OFF
    if isinstance(current, CodeInterpreterCall):
        done: OutputItem = replace(current, status=ended, outputs=[{"type": "logs", "logs": why}])
    else:  # OpenAI's web search call has no `incomplete`
        done = replace(current, status="failed")
    facts = ToolFacts(output=why)
    batch.add(lambda n: OutputItemDone(sequence_number=n, output_index=i, item=done, facts=facts))


def end_code(batch: Batch) -> None:
    """The open `code_interpreter_call`'s code is complete; the call stays open to be run."""
    i = batch.state.open_index
    item = batch.response.output[i] if i is not None else None
    if isinstance(item, CodeInterpreterCall) and i is not None and not batch.state.closing:
        iid, code = item.id, item.code or ""
        batch.add(
            lambda n: CodeInterpreterCallCodeDone(
                sequence_number=n, item_id=iid, output_index=i, code=code
            )
        )


def _close_tool_list(batch: Batch, i: int, item: McpListTools) -> None:
    iid = item.id
    if not batch.state.closing:
        batch.add(lambda n: McpListToolsFailed(sequence_number=n, item_id=iid, output_index=i))
    done = replace(item, error="The tools were not listed: the response ended first.")
    batch.add(lambda n: OutputItemDone(sequence_number=n, output_index=i, item=done))


# --- how the engine finished ------------------------------------------------------------------


def _complete(batch: Batch, usage: Usage, now: int) -> None:
    close_item(batch)
    final = terminal_snapshot(
        batch.response,
        "completed",
        completed_at=now,
        usage=usage,
        error=None,
        incomplete_details=None,
    )
    batch.add(lambda n: ResponseCompleted(sequence_number=n, response=final))


def _cut_off(
    batch: Batch, usage: Usage, why: Literal["max_output_tokens", "content_filter"]
) -> None:
    close_item(batch, "incomplete")
    final = terminal_snapshot(
        batch.response,
        "incomplete",
        completed_at=None,
        usage=usage,
        error=None,
        incomplete_details=IncompleteDetails(reason=why),
    )
    facts = EndFacts(reason=why)
    batch.add(lambda n: ResponseIncomplete(sequence_number=n, response=final, facts=facts))


# --- one builder per kind of delta ------------------------------------------------------------


def _text(batch: Batch, delta: TextDelta) -> None:
    # Empty text with logprobs is still a delta: the scores of the last tokens of an answer
    # cut mid-character, whose text never completed, are the client's too.
    if delta.text or delta.logprobs:
        _ensure_message(batch, delta.phase)
        _add_text(batch, delta.text, OutputText(text=""), delta.logprobs)


def _refusal(batch: Batch, delta: RefusalDelta) -> None:
    if delta.text:
        _ensure_message(batch, _open_message_phase(batch))
        _add_text(batch, delta.text, Refusal(refusal=""))


def _reasoning(batch: Batch, delta: ReasoningDelta) -> None:
    if delta.text:
        _ensure_reasoning(batch)
        _add_text(batch, delta.text, ReasoningText(text=""))


def _summary(batch: Batch, delta: SummaryDelta) -> None:
    if delta.text:
        _ensure_reasoning(batch)
        _add_summary(batch, delta.text)


def _compacted(batch: Batch, delta: Compacted) -> None:
    """A compaction item, added and done at once (it has no deltas)."""
    close_item(batch)
    i, item = len(batch.response.output), delta.item
    batch.add(lambda n: OutputItemAdded(sequence_number=n, output_index=i, item=item))
    batch.add(lambda n: OutputItemDone(sequence_number=n, output_index=i, item=item))


def _function_call(batch: Batch, delta: FunctionCallStart) -> None:
    close_item(batch)
    rid, n = batch.response.id, len(batch.response.output)
    call_id = delta.call_id or item_id(rid, "call", n)
    namespace = msgspec.UNSET if delta.namespace is None else delta.namespace
    call: OutputItem
    if delta.builtin == "python":
        _python_call(batch, item_id(rid, "ci", n))
        return
    if delta.server_label is not None:
        call = McpCall(
            id=item_id(rid, "mcp", n),
            server_label=delta.server_label,
            name=delta.name,
            arguments="",
            status="in_progress",
        )
    elif delta.custom:
        call = CustomToolCall(
            id=item_id(rid, "ctc", n),
            call_id=call_id,
            name=delta.name,
            input="",
            status="in_progress",
            namespace=namespace,
        )
    else:
        call = FunctionCall(
            id=item_id(rid, "fc", n),
            call_id=call_id,
            name=delta.name,
            arguments="",
            status="in_progress",
            namespace=namespace,
        )
    _open_new_item(batch, call)


def _python_call(batch: Batch, iid: str) -> None:
    """gpt-oss's `python` call: a `code_interpreter_call`, its code streamed as it comes."""
    cid = container_id(batch.response.tools)
    call = CodeInterpreterCall(id=iid, code="", container_id=cid, status="in_progress")
    _open_new_item(batch, call)
    n = len(batch.response.output) - 1
    batch.add(
        lambda s: CodeInterpreterCallInProgress(sequence_number=s, item_id=iid, output_index=n)
    )


def _browser(batch: Batch, delta: BrowserCall) -> None:
    """gpt-oss's whole `browser.<name>` call: a `web_search_call` in progress, its action
    shown, the model's arguments kept hidden for the tool server (domain/builtins.py)."""
    close_item(batch)
    n = len(batch.response.output)
    iid = item_id(batch.response.id, "ws", n)
    item = WebSearchCall(id=iid, action=action(delta.name, delta.arguments), status="in_progress")
    facts = ToolFacts(arguments=delta.arguments)
    batch.add(lambda s: OutputItemAdded(sequence_number=s, output_index=n, item=item, facts=facts))
    batch.add(lambda s: WebSearchCallInProgress(sequence_number=s, item_id=iid, output_index=n))


def _input(batch: Batch, delta: InputDelta) -> None:
    i, resp, text = batch.state.open_index, batch.response, delta.text
    item = resp.output[i] if i is not None else None
    if not isinstance(item, CustomToolCall) or i is None:
        raise InvalidTransition(f"response {resp.id}: input with no open custom tool call")
    if text:
        iid = item.id or ""
        batch.add(
            lambda n: CustomToolCallInputDelta(
                sequence_number=n, item_id=iid, output_index=i, delta=text
            )
        )


# A call the server runs streams its arguments (or code) with events of its own kind.
_CALL_DELTAS: dict[type, type[CodeInterpreterCallCodeDelta] | type[McpCallArgumentsDelta]] = {
    CodeInterpreterCall: CodeInterpreterCallCodeDelta,
    McpCall: McpCallArgumentsDelta,
}


def _arguments(batch: Batch, delta: ArgumentsDelta) -> None:
    i, resp, text = batch.state.open_index, batch.response, delta.text
    item = resp.output[i] if i is not None else None
    event = _CALL_DELTAS.get(type(item))
    if event is not None and item is not None and i is not None:
        iid = item.id or ""
        if text:
            batch.add(lambda n: event(sequence_number=n, item_id=iid, output_index=i, delta=text))
        return
    if not isinstance(item, FunctionCall) or i is None:
        raise InvalidTransition(f"response {resp.id}: arguments with no open function call")
    if text:
        iid = item.id or ""
        batch.add(
            lambda n: FunctionCallArgumentsDelta(
                sequence_number=n, item_id=iid, output_index=i, delta=text
            )
        )


def _approval(batch: Batch, delta: ApprovalRequest) -> None:
    """An MCP call waiting for the client: added whole, as OpenAI adds it."""
    close_item(batch)
    n = len(batch.response.output)
    item = McpApprovalRequest(
        id=item_id(batch.response.id, "mcpr", n),
        server_label=delta.server_label,
        name=delta.name,
        arguments=delta.arguments,
    )
    batch.add(lambda s: OutputItemAdded(sequence_number=s, output_index=n, item=item))
    batch.add(lambda s: OutputItemDone(sequence_number=s, output_index=n, item=item))


def _end_item(batch: Batch, delta: EndItem) -> None:
    i = batch.state.open_index
    if i is not None and isinstance(batch.response.output[i], McpCall):
        end_mcp_arguments(batch)  # the runner runs it (service/tools/mcploop.py), then closes it
        return
    if i is not None and isinstance(batch.response.output[i], CodeInterpreterCall):
        end_code(batch)  # likewise
        return
    close_item(batch)


def _sealed(batch: Batch, delta: ReasoningSealed) -> None:
    """Close the open reasoning item with its sealed content in `output_item.done`."""
    i = batch.state.open_index
    item = batch.response.output[i] if i is not None else None
    if not isinstance(item, ReasoningItem) or i is None:
        raise InvalidTransition(f"response {batch.response.id}: sealed reasoning with no item")
    _close_part(batch)
    closed = batch.response.output[i]
    done = replace(closed, status="completed", encrypted_content=delta.encrypted_content)
    batch.add(lambda n: OutputItemDone(sequence_number=n, output_index=i, item=done))


# A table rather than one `match`, so that each builder is typed for its own delta class.
# `Finished` has none: `emit` refuses it, `finish` handles it.
_BUILDERS: dict[type[AnyDelta], Callable[[Batch, Any], None]] = {
    TextDelta: _text,
    RefusalDelta: _refusal,
    ReasoningDelta: _reasoning,
    SummaryDelta: _summary,
    FunctionCallStart: _function_call,
    ArgumentsDelta: _arguments,
    InputDelta: _input,
    EndItem: _end_item,
    ApprovalRequest: _approval,
    BrowserCall: _browser,
    ReasoningSealed: _sealed,
    Compacted: _compacted,
}


# --- opening items and parts ------------------------------------------------------------------


def _open_new_item(batch: Batch, item: OutputItem) -> None:
    close_item(batch)
    i = len(batch.response.output)
    batch.add(lambda n: OutputItemAdded(sequence_number=n, output_index=i, item=item))


def _ensure_message(batch: Batch, phase: Phase) -> None:
    """The open item, if it is a message of this phase; else a new one."""
    i = batch.state.open_index
    if i is not None:
        item = batch.response.output[i]
        if isinstance(item, OutputMessage) and phase_of(item) == phase:
            return
    rid, n = batch.response.id, len(batch.response.output)
    _open_new_item(
        batch,
        OutputMessage(
            id=item_id(rid, "msg", n),
            status="in_progress",
            content=[],
            phase=UNSET if phase is None else phase,
        ),
    )


def _open_message_phase(batch: Batch) -> Phase:
    """A refusal joins the open message whatever its phase."""
    i = batch.state.open_index
    if i is not None:
        item = batch.response.output[i]
        if isinstance(item, OutputMessage):
            return phase_of(item)
    return None


def _ensure_reasoning(batch: Batch) -> None:
    i = batch.state.open_index
    if i is not None and isinstance(batch.response.output[i], ReasoningItem):
        return
    rid, n = batch.response.id, len(batch.response.output)
    _open_new_item(batch, ReasoningItem(id=item_id(rid, "rs", n), status="in_progress"))


def _ensure_part(batch: Batch, fresh: ContentPart) -> int:
    """The open part's index, if it is of `fresh`'s kind; else `fresh` is added and opened."""
    state = batch.state
    assert state.open_index is not None
    item = batch.response.output[state.open_index]
    if state.open_part is not None and type(content_parts(item)[state.open_part]) is type(fresh):
        return state.open_part
    _close_part(batch)
    i, iid, c = state.open_index, item.id or "", len(content_parts(item))
    batch.add(
        lambda n: ContentPartAdded(
            sequence_number=n, item_id=iid, output_index=i, content_index=c, part=fresh
        )
    )
    return c


# --- streaming text ---------------------------------------------------------------------------


def _add_text(
    batch: Batch, text: str, fresh: ContentPart, logprobs: list[dict[str, Any]] | None = None
) -> None:
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


def _add_summary(batch: Batch, text: str) -> None:
    state = batch.state
    i = state.open_index
    assert i is not None
    item = batch.response.output[i]
    assert isinstance(item, ReasoningItem)
    iid = item.id
    if state.open_summary is None:
        _close_part(batch)
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


# --- closing parts ----------------------------------------------------------------------------


def _close_part(batch: Batch) -> None:
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
