"""Tool calls as the engine starts and streams them: function and custom calls, MCP calls
and approval requests, gpt-oss's built-in `python` and `browser` calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from domain.batch import Batch
from domain.builder.items import close_item, end_code, end_mcp_arguments, item_id, open_new_item
from domain.errors import InvalidTransition
from domain.events import (
    CodeInterpreterCallCodeDelta,
    CodeInterpreterCallInProgress,
    CustomToolCallInputDelta,
    FunctionCallArgumentsDelta,
    McpCallArgumentsDelta,
    OutputItemAdded,
    OutputItemDone,
    ToolFacts,
    WebSearchCallInProgress,
)
from domain.generation import (
    AnyDelta,
    ApprovalRequest,
    ArgumentsDelta,
    BrowserCall,
    EndItem,
    FunctionCallStart,
    InputDelta,
)
from domain.objects import (
    CodeInterpreterCall,
    CustomToolCall,
    FunctionCall,
    McpApprovalRequest,
    McpCall,
    OutputItem,
    WebSearchCall,
)
from domain.tools import action, container_id

replace = msgspec.structs.replace


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
    open_new_item(batch, call)


def _python_call(batch: Batch, iid: str) -> None:
    """gpt-oss's `python` call: a `code_interpreter_call`, its code streamed as it comes."""
    cid = container_id(batch.response.tools)
    call = CodeInterpreterCall(id=iid, code="", container_id=cid, status="in_progress")
    open_new_item(batch, call)
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


# The deltas this module builds, each by a builder typed for its class (emit.py dispatches).
BUILDERS: dict[type[AnyDelta], Callable[[Batch, Any], None]] = {
    FunctionCallStart: _function_call,
    ArgumentsDelta: _arguments,
    InputDelta: _input,
    EndItem: _end_item,
    ApprovalRequest: _approval,
    BrowserCall: _browser,
}
