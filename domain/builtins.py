"""gpt-oss's built-in tools as OpenAI's hosted ones (docs/mcp.md, "Built-in tools").

With a tool server (`--tool-server`), a request's `web_search` / `web_search_preview` tool
offers gpt-oss its `browser` namespace and `code_interpreter` its `python`, as vLLM and
sglang map them. The model's `browser.*` calls become `web_search_call` items and its
`python` calls `code_interpreter_call` items, run by the same durable loop as MCP calls:
handed to the server (`searching` / `interpreting`, appended before it is asked), then
their result (`completed`, and `output_item.done` carrying it). What the model asked and
what the tool answered ride as hidden facts of the item events (`ToolFacts`), so a process
that takes a loop over shows the model the same text and never runs a recorded call again.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from domain.batch import Batch
from domain.errors import InvalidTransition
from domain.events import (
    CodeInterpreterCallCompleted,
    CodeInterpreterCallInterpreting,
    OutputItemDone,
    ToolFacts,
    WebSearchCallCompleted,
    WebSearchCallSearching,
)
from domain.objects import (
    BuiltinCall,
    CodeInterpreterCall,
    FunctionCallOutput,
    InputFunctionCall,
    InputItem,
    McpCall,
    ServerCall,
    WebSearchCall,
)
from domain.state import Decision, ResponseState
from domain.tools import BUILTIN_ACTIONS

replace = msgspec.structs.replace


def pending_server_call(state: ResponseState) -> ServerCall | None:
    """The open call the server runs whose arguments are complete: the loop's next step."""
    if state.open_index is None or state.response is None or not state.closing:
        return None
    item = state.response.output[state.open_index]
    return item if isinstance(item, McpCall | WebSearchCall | CodeInterpreterCall) else None


def recipient(call: BuiltinCall) -> str:
    """The tool server's tool a built-in call runs: `browser.search` … or `python`."""
    if isinstance(call, CodeInterpreterCall):
        return "python"
    name = {v: k for k, v in BUILTIN_ACTIONS.items()}.get(str(call.action.get("type")), "search")
    return f"browser.{name}"


def server_arguments(state: ResponseState, call: BuiltinCall) -> dict[str, Any] | None:
    """What the tool server is called with (None: the model's arguments are no JSON object)."""
    if isinstance(call, CodeInterpreterCall):
        return {"code": call.code or ""}
    raw = state.tool_facts.get(call.id, ToolFacts()).arguments
    try:
        args = json.loads(raw or "{}")
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


def builtin_started(state: ResponseState) -> Decision:
    """The pending built-in call is handed to the tool server (recorded before it is);
    again, once, when a takeover retries it."""
    call = pending_server_call(state)
    if not isinstance(call, WebSearchCall | CodeInterpreterCall):
        raise InvalidTransition("no built-in call is waiting to run")
    i = state.open_index
    assert i is not None
    batch = Batch(state)
    if isinstance(call, WebSearchCall):
        batch.add(
            lambda s: WebSearchCallSearching(sequence_number=s, item_id=call.id, output_index=i)
        )
    else:
        batch.add(
            lambda s: CodeInterpreterCallInterpreting(
                sequence_number=s, item_id=call.id, output_index=i
            )
        )
    return batch.decision()


def builtin_ended(state: ResponseState, *, output: str | None, error: str | None) -> Decision:
    """The pending built-in call's result: `output`, or `error` (what the model is told);
    the item closes `completed` or `failed`, with the text hidden in its facts (a
    `code_interpreter_call` shows it too, as its `logs` output)."""
    call = pending_server_call(state)
    if not isinstance(call, WebSearchCall | CodeInterpreterCall) or state.mcp_step == "ended":
        raise InvalidTransition("no built-in call is waiting for its result")
    i = state.open_index
    assert i is not None
    batch = Batch(state)
    text = output if error is None else error
    if error is None and isinstance(call, WebSearchCall):
        batch.add(
            lambda s: WebSearchCallCompleted(sequence_number=s, item_id=call.id, output_index=i)
        )
    elif error is None:
        batch.add(
            lambda s: CodeInterpreterCallCompleted(
                sequence_number=s, item_id=call.id, output_index=i
            )
        )
    done = closed(call, "completed" if error is None else "failed", text or "")
    facts = ToolFacts(output=text or "")
    batch.add(lambda s: OutputItemDone(sequence_number=s, output_index=i, item=done, facts=facts))
    return batch.decision()


def closed(call: BuiltinCall, status: str, text: str) -> BuiltinCall:
    """The call as its `output_item.done` shows it."""
    if isinstance(call, CodeInterpreterCall):
        return replace(call, status=status, outputs=[{"type": "logs", "logs": text}])
    return replace(call, status=status)


def as_model_input(call: BuiltinCall, state: ResponseState) -> list[InputItem]:
    """A finished built-in call as the model's next generation sees it: its call (to
    `browser.<name>` or `python`) and what the tool answered."""
    facts = state.tool_facts.get(call.id, ToolFacts())
    if isinstance(call, CodeInterpreterCall):
        name, arguments = "python", call.code or ""
    else:
        name, arguments = recipient(call), facts.arguments or "{}"
    out = facts.output
    if out is None and isinstance(call, CodeInterpreterCall) and call.outputs:
        out = "".join(str(o.get("logs", "")) for o in call.outputs)
    return [
        InputFunctionCall(id=call.id, call_id=call.id, name=name, arguments=arguments),
        FunctionCallOutput(id=f"out_{call.id}", call_id=call.id, output=out or ""),
    ]
