"""Output items opened and closed: their ids, the open item closed as a status (each kind
its own way, a call the server runs failed if it never ran), a compaction item added whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from domain.batch import Batch
from domain.builder.parts import close_part
from domain.events import (
    CodeInterpreterCallCodeDone,
    CustomToolCallInputDone,
    FunctionCallArgumentsDone,
    McpCallArgumentsDone,
    McpCallFailed,
    McpListToolsFailed,
    OutputItemAdded,
    OutputItemDone,
    ToolFacts,
)
from domain.generation import AnyDelta, Compacted
from domain.objects import (
    CodeInterpreterCall,
    CustomToolCall,
    FunctionCall,
    ItemStatus,
    McpCall,
    McpListTools,
    OutputItem,
    WebSearchCall,
)

replace = msgspec.structs.replace


def item_id(response_id: str, prefix: str, output_index: int) -> str:
    """Item ids derive from the response id and position, so the builder stays pure."""
    return f"{prefix}_{response_id.removeprefix('resp_')}_{output_index}"


def close_item(batch: Batch, status: ItemStatus = "completed") -> None:
    """Close the open output item (and its open part), if any, as `status`."""
    i = batch.state.open_index
    if i is None:
        return
    close_part(batch)
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


def open_new_item(batch: Batch, item: OutputItem) -> None:
    """Close what is open, then add `item` at the next index."""
    close_item(batch)
    i = len(batch.response.output)
    batch.add(lambda n: OutputItemAdded(sequence_number=n, output_index=i, item=item))


def _compacted(batch: Batch, delta: Compacted) -> None:
    """A compaction item, added and done at once (it has no deltas)."""
    close_item(batch)
    i, item = len(batch.response.output), delta.item
    batch.add(lambda n: OutputItemAdded(sequence_number=n, output_index=i, item=item))
    batch.add(lambda n: OutputItemDone(sequence_number=n, output_index=i, item=item))


# The deltas this module builds, each by a builder typed for its class (emit.py dispatches).
BUILDERS: dict[type[AnyDelta], Callable[[Batch, Any], None]] = {
    Compacted: _compacted,
}
