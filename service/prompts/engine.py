"""The prompt as every engine can render it: the MCP and built-in tool items of its history
and input shown as the function calls and outputs a model knows, and those the loop acts
on (approval requests, the client's answers to them) left out.
"""

from __future__ import annotations

import json

import msgspec

from domain.builtins import as_model_input
from domain.generation import Prompt, Turn, any_turn
from domain.objects import (
    CodeInterpreterCall,
    FunctionCall,
    FunctionCallOutput,
    InputFunctionCall,
    InputItem,
    InputMessage,
    InputReasoning,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
    OutputItem,
    OutputMessage,
    ReasoningItem,
    WebSearchCall,
)
from domain.state import ResponseState


def as_input(output: list[OutputItem], state: ResponseState | None = None) -> list[InputItem]:
    """What a loop's output so far is to the model of its next step: its messages and
    reasoning, and each finished MCP call as a function call and that call's output; with
    the loop's `state`, each finished built-in call too (what its tool answered is in the
    state's hidden facts; an earlier turn's built-in calls are left out)."""
    out: list[InputItem] = []
    for item in output:
        if isinstance(item, WebSearchCall | CodeInterpreterCall):
            if state is not None and item.status in ("completed", "failed", "incomplete"):
                out += as_model_input(item, state)
            continue
        if isinstance(item, OutputMessage):
            out.append(InputMessage(id=item.id, role="assistant", content=list(item.content)))
        elif isinstance(item, ReasoningItem):
            out.append(InputReasoning(id=item.id, summary=item.summary, content=item.content))
        elif isinstance(item, FunctionCall):
            out.append(
                InputFunctionCall(
                    id=item.id or "", call_id=item.call_id, name=item.name, arguments=item.arguments
                )
            )
        elif isinstance(item, McpCall) and item.status in _ENDED:
            out += as_function_call(item)
    return out


_ENDED = ("completed", "failed", "incomplete")


def as_function_call(call: McpCall) -> list[InputItem]:
    """An MCP call as a model is shown it: a function call of its tool, and that call's
    output (its error, when it failed)."""
    result = call.output if call.error is None else json.dumps({"error": call.error})
    return [
        InputFunctionCall(id=call.id, call_id=call.id, name=call.name, arguments=call.arguments),
        FunctionCallOutput(id=f"out_{call.id}", call_id=call.id, output=result or ""),
    ]


def _shown(items: list[InputItem]) -> list[InputItem]:
    """Input items as a model is shown them: an MCP call passed back is its function call
    and output (one still running, passed back as it was, is left out: it has no result),
    and approval requests passed back and the client's answers to them are left out (the
    loop acts on them)."""
    out: list[InputItem] = []
    for item in items:
        if isinstance(item, McpCall):
            if item.status not in ("in_progress", "calling"):
                out += as_function_call(item)
        elif not isinstance(item, McpApprovalResponse | McpApprovalRequest):
            out.append(item)
    return out


def engine_prompt(prompt: Prompt) -> Prompt:
    """The prompt as every engine can render it: an earlier turn that holds MCP items is
    given as input items in order (each call a function call and its output), MCP calls
    passed back as input likewise, and approval requests passed back and the client's
    answers to them are left out (the loop acts on them, the model need not)."""
    history = prompt.history
    if any_turn(history, "engine.linear", _has_special):
        history = [_linear(t) for t in history]
    items = _shown(prompt.input) if any(map(_special, prompt.input)) else prompt.input
    if history is prompt.history and items is prompt.input:
        return prompt
    return msgspec.structs.replace(prompt, history=history, input=items)


def _special(item: InputItem) -> bool:
    return isinstance(item, McpCall | McpApprovalResponse | McpApprovalRequest)


_MCP = (McpCall, McpListTools, McpApprovalRequest, WebSearchCall, CodeInterpreterCall)


def _has_special(turn: Turn) -> bool:
    """Whether an engine is given `turn` otherwise than as it is (`_linear`)."""
    return any(isinstance(i, _MCP) for i in turn.output) or any(map(_special, turn.input))


def _linear(turn: Turn) -> Turn:
    if not _has_special(turn):
        return turn
    return msgspec.structs.replace(
        turn, input=[*_shown(turn.input), *as_input(turn.output)], output=[]
    )
