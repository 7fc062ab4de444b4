"""The steps of the MCP tool loop as commands on the aggregate (docs/mcp.md).

Each step the server takes on the model's behalf is events in the log, so the loop is the
log: listing a server's tools (`mcp_list_tools`: added, in progress, then completed or
failed with the tools or the error in `output_item.done`), starting a call the model made
(`response.mcp_call.in_progress`, appended before the MCP server is asked), and its result
(`response.mcp_call.completed` or `.failed`, then `output_item.done` with the output or
the error). `pending_call` and `next_step` read where a loop stands from the state alone,
so any process can continue it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from domain.batch import Batch, require
from domain.builder.items import close_item, item_id
from domain.builtins import builtin_ended, builtin_started, pending_server_call, recipient
from domain.errors import InvalidTransition
from domain.events import (
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
)
from domain.objects import (
    CodeInterpreterCall,
    McpApprovalRequest,
    McpCall,
    McpListTools,
    ServerCall,
    WebSearchCall,
)
from domain.state import Decision, ResponseState

replace = msgspec.structs.replace

WORKER_LOST = "The process running this call stopped before the call returned; it was not retried."
LOST_TWICE = (
    "The process running this call stopped before the call returned, and so did the one "
    "that retried it; it was not retried again."
)
# The label the built-in tools go by in `--mcp-idempotent-tools` (`tool_server:python`).
TOOL_SERVER_LABEL = "tool_server"


def execution_error(text: str) -> dict[str, Any]:
    """A failed call's `error` (openai-python `McpToolCallError.McpToolExecutionError`)."""
    return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": text}]}


def protocol_error(message: str, code: int = -32603) -> dict[str, Any]:
    """A failed call's `error` when the server broke the protocol (`McpProtocolError`)."""
    return {"type": "mcp_protocol_error", "code": code, "message": message}


class _SentTool(msgspec.Struct, frozen=True):
    """What a tool of a list kept as sent must hold for its tool to be offered."""

    name: str
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    description: str | None = None


class _SentList(msgspec.Struct, frozen=True):
    """What an `mcp_list_tools` item kept as sent must hold to stand for its server's list."""

    server_label: str
    tools: list[_SentTool] = msgspec.field(default_factory=list)
    error: str | None = None


def lists_sent(items: Iterable[dict[str, Any]]) -> list[McpListTools]:
    """The MCP tool lists among items kept as sent, in their order: a conversation's items
    set aside (a response's own lists are kept there as it made them), or a request's
    input set aside (a client that keeps its own history passes an earlier answer's lists
    back). An item that is no list, or whose shape is not a list's (each tool a `name`,
    its `input_schema` an object), stands for nothing: its server is listed again."""
    out: list[McpListTools] = []
    for sent in items:
        if sent.get("type") != "mcp_list_tools":
            continue
        try:
            shape = msgspec.convert(sent, _SentList)
        except msgspec.ValidationError:
            continue
        tools = [dict(t) for t in sent.get("tools") or ()]
        iid = str(sent.get("id") or "")
        out.append(
            McpListTools(id=iid, server_label=shape.server_label, tools=tools, error=shape.error)
        )
    return out


def listed(state: ResponseState) -> dict[str, McpListTools]:
    """The servers whose tools the log lists already (closed list items), by label."""
    assert state.response is not None
    out = {}
    for i, item in enumerate(state.response.output):
        if isinstance(item, McpListTools) and i != state.open_index:
            out[item.server_label] = item
    return out


def pending_call(state: ResponseState) -> McpCall | None:
    """The open MCP call whose arguments are complete: the loop's next step is about it."""
    if state.open_index is None or state.response is None or not state.closing:
        return None
    item = state.response.output[state.open_index]
    return item if isinstance(item, McpCall) else None


def calls_made(state: ResponseState) -> int:
    """How many calls the server ran for this response, MCP and built-in (for
    `max_tool_calls`)."""
    assert state.response is not None
    kinds = McpCall | WebSearchCall | CodeInterpreterCall
    return sum(1 for item in state.response.output if isinstance(item, kinds))


def tool_key(call: ServerCall) -> str:
    """How `--mcp-idempotent-tools` names the call's tool: `server_label:name`."""
    if isinstance(call, McpCall):
        return f"{call.server_label}:{call.name}"
    return f"{TOOL_SERVER_LABEL}:{recipient(call)}"


def list_started(state: ResponseState, server_label: str) -> Decision:
    require(state, "in_progress")
    batch = Batch(state)
    close_item(batch)
    n = len(batch.response.output)
    iid = item_id(batch.response.id, "mcpl", n)
    item = McpListTools(id=iid, server_label=server_label)
    batch.add(lambda s: OutputItemAdded(sequence_number=s, output_index=n, item=item))
    batch.add(lambda s: McpListToolsInProgress(sequence_number=s, item_id=iid, output_index=n))
    return batch.decision()


def list_ended(
    state: ResponseState, tools: list[dict[str, Any]] | None, error: str | None
) -> Decision:
    """The open tool list's result: `tools`, or `error` when listing failed."""
    require(state, "in_progress")
    i = state.open_index
    item = state.response.output[i] if state.response and i is not None else None
    if not isinstance(item, McpListTools) or i is None:
        raise InvalidTransition("no MCP tool list is open")
    batch = Batch(state)
    iid = item.id
    if error is None:
        batch.add(lambda s: McpListToolsCompleted(sequence_number=s, item_id=iid, output_index=i))
        done = replace(item, tools=tools or [])
    else:
        batch.add(lambda s: McpListToolsFailed(sequence_number=s, item_id=iid, output_index=i))
        done = replace(item, error=error)
    batch.add(lambda s: OutputItemDone(sequence_number=s, output_index=i, item=done))
    return batch.decision()


def call_started(state: ResponseState) -> Decision:
    """The pending call is handed to its server (recorded before it is)."""
    call = pending_call(state)
    if call is None or state.mcp_step is not None:
        raise InvalidTransition("no MCP call is waiting to run")
    i = state.open_index
    assert i is not None
    batch = Batch(state)
    batch.add(lambda s: McpCallInProgress(sequence_number=s, item_id=call.id, output_index=i))
    return batch.decision()


def call_ended(
    state: ResponseState, *, output: str | None = None, error: dict[str, Any] | None = None
) -> Decision:
    """The open call's result: its `output`, or its `error` (a call that failed, or one
    that was never run). Then the item closes, carrying it."""
    call = pending_call(state)
    if call is None or state.mcp_step == "ended":
        raise InvalidTransition("no MCP call is waiting for its result")
    i = state.open_index
    assert i is not None
    batch = Batch(state)
    if error is None:
        batch.add(lambda s: McpCallCompleted(sequence_number=s, item_id=call.id, output_index=i))
        done = replace(call, status="completed", output=output or "")
    else:
        batch.add(lambda s: McpCallFailed(sequence_number=s, item_id=call.id, output_index=i))
        done = replace(call, status="failed", error=error)
    batch.add(lambda s: OutputItemDone(sequence_number=s, output_index=i, item=done))
    return batch.decision()


def interrupted(state: ResponseState, idempotent: frozenset[str] = frozenset()) -> Decision:
    """Take over a loop whose process died: a call it had started is recorded failed (its
    effect is unknown, so it is never run twice), unless its tool is declared idempotent
    (`tool_key` in `idempotent`): then it is started again, once. Any other open item is
    closed as incomplete. What is left is a state from which the loop can go on."""
    require(state, "in_progress")
    call = pending_server_call(state)
    if call is not None and state.mcp_step == "calling" and tool_key(call) in idempotent:
        return _restarted(state, call)
    if call is not None and state.mcp_step in ("calling", "retried"):
        why = WORKER_LOST if state.mcp_step == "calling" else LOST_TWICE
        if isinstance(call, McpCall):
            return call_ended(state, error=execution_error(why))
        return builtin_ended(state, output=None, error=why)
    if call is not None:
        return Decision([], state)  # never started: it is run now, once
    batch = Batch(state)
    close_item(batch, "incomplete")
    return batch.decision()


def _restarted(state: ResponseState, call: ServerCall) -> Decision:
    """The in-flight call of an idempotent tool, handed to its server a second time."""
    if not isinstance(call, McpCall):
        return builtin_started(state)
    i = state.open_index
    assert i is not None
    batch = Batch(state)
    batch.add(lambda s: McpCallInProgress(sequence_number=s, item_id=call.id, output_index=i))
    return batch.decision()


def approved_call(state: ResponseState, request: McpApprovalRequest) -> Decision:
    """The call the client approved (an `mcp_approval_response` for `request` of the turn
    this one continues), opened with its arguments as the model wrote them, to be run."""
    require(state, "in_progress")
    batch = Batch(state)
    close_item(batch)
    n = len(batch.response.output)
    iid = item_id(batch.response.id, "mcp", n)
    call = McpCall(
        id=iid,
        server_label=request.server_label,
        name=request.name,
        arguments="",
        status="in_progress",
        approval_request_id=request.id,
    )
    args = request.arguments
    batch.add(lambda s: OutputItemAdded(sequence_number=s, output_index=n, item=call))
    if args:
        batch.add(
            lambda s: McpCallArgumentsDelta(
                sequence_number=s, item_id=iid, output_index=n, delta=args
            )
        )
    batch.add(
        lambda s: McpCallArgumentsDone(
            sequence_number=s, item_id=iid, output_index=n, arguments=args
        )
    )
    return batch.decision()
