"""A whole conversation as the log records it: every turn's instructions, inputs, reasoning,
output and function calls with their outputs, usage per turn and in total; and its
renderings as plain text and Markdown."""

from __future__ import annotations

from typing import Literal

import msgspec

from domain.events import EndFacts, RequestFacts
from domain.objects import (
    CodeInterpreterCall,
    CompactionItem,
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    InputCompaction,
    InputCustomToolCall,
    InputFunctionCall,
    InputItem,
    InputMessage,
    InputReasoning,
    InputTokensDetails,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
    OutputItem,
    OutputMessage,
    OutputTokensDetails,
    ReasoningItem,
    Refusal,
    ResponseObject,
    SetAsideItem,
    Usage,
    WebSearchCall,
)
from service.audit.timeline import builtin_text, iso

EntryKind = Literal[
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "compaction",
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "web_search_call",
    "code_interpreter_call",
    "set_aside",  # an item no engine is shown; `name` is its type (domain.objects.SetAsideItem)
]


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One input or output item, reduced to what a reader needs."""

    kind: EntryKind
    text: str
    role: str | None = None  # messages: user, system, developer, assistant
    name: str | None = None  # function calls
    call_id: str | None = None  # function calls and their outputs


class TurnView(msgspec.Struct, frozen=True, kw_only=True):
    response_id: str
    status: str
    model: str
    owner: str
    created_at: int
    instructions: str | None
    input: list[Entry]
    output: list[Entry]
    usage: Usage | None
    error: str | None = None  # "code: message" of a failed response
    end_reason: str | None = None  # the operator-only reason of a failure or cancellation
    # When the turn was deleted through the API (the row's mark; its log stays for audit).
    deleted_at: float | None = None


class ConversationView(msgspec.Struct, frozen=True, kw_only=True):
    response_id: str  # the response asked about: the last turn
    turns: list[TurnView]  # oldest first
    usage: Usage  # the sum over the turns
    missing: str | None = None  # an earlier turn that is no longer in the log


def _parts_text(parts: list[object]) -> str:
    texts = []
    for p in parts:
        texts.append(f"[refusal] {p.refusal}" if isinstance(p, Refusal) else getattr(p, "text", ""))
    return "".join(texts)


def _input_entry(item: InputItem | SetAsideItem) -> Entry:
    match item:
        case SetAsideItem(item=sent):
            return Entry(
                kind="set_aside", name=str(sent.get("type")), text="(not shown to the model)"
            )
        case InputMessage(role=role, content=content):
            return Entry(kind="message", role=role, text=_parts_text(list(content)))
        case FunctionCallOutput(call_id=cid, output=out):
            return Entry(kind="function_call_output", call_id=cid, text=out)
        case InputFunctionCall(call_id=cid, name=name, arguments=args):
            return Entry(kind="function_call", call_id=cid, name=name, text=args)
        case InputCustomToolCall(call_id=cid, name=name, input=text):
            return Entry(kind="custom_tool_call", call_id=cid, name=name, text=text)
        case CustomToolCallOutput(call_id=cid, output=out):
            return Entry(kind="custom_tool_call_output", call_id=cid, text=out)
        case InputReasoning(summary=summary, content=content):
            return Entry(kind="reasoning", text=_parts_text([*summary, *content]))
        case InputCompaction(id=iid):
            # The summary is sealed; its id names the response that wrote it.
            source = "resp_" + iid.split("_")[1] if iid.startswith("cmp_") else "?"
            return Entry(
                kind="compaction", text=f"earlier turns replaced by the summary {source} wrote"
            )
        case McpApprovalResponse(approval_request_id=rid, approve=ok):
            return Entry(kind="mcp_approval_response", call_id=rid, text=str(ok).lower())
        case McpCall():
            return _mcp_call_entry(item)
        case McpApprovalRequest():
            return _approval_request_entry(item)
    raise AssertionError(item)  # pragma: no cover - the union is closed


def _output_entry(item: OutputItem) -> Entry:
    match item:
        case OutputMessage(content=content):
            return Entry(kind="message", role="assistant", text=_parts_text(list(content)))
        case ReasoningItem(summary=summary, content=content):
            return Entry(kind="reasoning", text=_parts_text([*summary, *content]))
        case FunctionCall(call_id=cid, name=name, arguments=args):
            return Entry(kind="function_call", call_id=cid, name=name, text=args)
        case CustomToolCall(call_id=cid, name=name, input=text):
            return Entry(kind="custom_tool_call", call_id=cid, name=name, text=text)
        case CompactionItem(id=iid):
            source = "resp_" + iid.removeprefix("cmp_")
            return Entry(
                kind="compaction",
                text=f"the conversation before here compacted, summary written by {source}",
            )
        case McpListTools(server_label=label, tools=tools, error=error):
            names = ", ".join(str(t.get("name")) for t in tools)
            return Entry(kind="mcp_list_tools", name=label, text=error or names)
        case McpCall():
            return _mcp_call_entry(item)
        case McpApprovalRequest():
            return _approval_request_entry(item)
        case WebSearchCall(id=iid):
            return Entry(kind="web_search_call", call_id=iid, text=builtin_text(item))
        case CodeInterpreterCall(id=iid):
            return Entry(kind="code_interpreter_call", call_id=iid, text=builtin_text(item))
    raise AssertionError(item)  # pragma: no cover - the union is closed


def _mcp_call_entry(call: McpCall) -> Entry:
    result = call.output if call.error is None else f"error: {call.error}"
    return Entry(
        kind="mcp_call",
        call_id=call.id,
        name=f"{call.server_label}.{call.name}",
        text=f"{call.arguments} -> {result}",
    )


def _approval_request_entry(request: McpApprovalRequest) -> Entry:
    return Entry(
        kind="mcp_approval_request",
        call_id=request.id,
        name=f"{request.server_label}.{request.name}",
        text=request.arguments,
    )


def turn_view(
    request: RequestFacts,
    response: ResponseObject,
    end: EndFacts | None,
    deleted_at: float | None = None,
) -> TurnView:
    """One turn from its request (first event) and its projection (the fold); `deleted_at`
    from its row, if it was deleted through the API."""
    error = f"{response.error.code}: {response.error.message}" if response.error else None
    return TurnView(
        response_id=response.id,
        status=response.status,
        model=response.model,
        owner=request.owner,
        created_at=response.created_at,
        instructions=response.instructions,
        input=[_input_entry(i) for i in request.input],
        output=[_output_entry(i) for i in response.output],
        usage=response.usage,
        error=error,
        end_reason=end.reason if end else None,
        deleted_at=deleted_at,
    )


def total_usage(turns: list[TurnView]) -> Usage:
    used = [t.usage for t in turns if t.usage is not None]
    return Usage(
        input_tokens=sum(u.input_tokens for u in used),
        input_tokens_details=InputTokensDetails(
            cached_tokens=sum(u.input_tokens_details.cached_tokens for u in used)
        ),
        output_tokens=sum(u.output_tokens for u in used),
        output_tokens_details=OutputTokensDetails(
            reasoning_tokens=sum(u.output_tokens_details.reasoning_tokens for u in used)
        ),
        total_tokens=sum(u.total_tokens for u in used),
    )


def added_turn(
    items: list[tuple[InputItem | SetAsideItem, bool]], owner: str, created_at: int
) -> TurnView:
    """Items added to a conversation through the API (not by a response), as a turn of
    their own; a deleted item's text starts with `[deleted]`."""
    entries = []
    for item, deleted in items:
        entry = _input_entry(item)
        if deleted:
            entry = msgspec.structs.replace(entry, text=f"[deleted] {entry.text}")
        entries.append(entry)
    return TurnView(
        response_id="(items added through the API)",
        status="added",
        model="-",
        owner=owner,
        created_at=created_at,
        instructions=None,
        input=entries,
        output=[],
        usage=None,
    )


def conversation(response_id: str, turns: list[TurnView], missing: str | None) -> ConversationView:
    return ConversationView(
        response_id=response_id, turns=turns, usage=total_usage(turns), missing=missing
    )


def usage_line(usage: Usage | None) -> str:
    if usage is None:
        return "no usage recorded"
    return (
        f"{usage.input_tokens} in ({usage.input_tokens_details.cached_tokens} cached) / "
        f"{usage.output_tokens} out ({usage.output_tokens_details.reasoning_tokens} reasoning) / "
        f"{usage.total_tokens} total"
    )


# --- renderings -------------------------------------------------------------------------------


def _heading(turn: TurnView) -> str:
    deleted = f" · deleted {iso(turn.deleted_at)}" if turn.deleted_at is not None else ""
    return f"{turn.response_id} · {turn.status} · {turn.model} · {iso(turn.created_at)}{deleted}"


def _turns(n: int) -> str:
    return f"{n} turn" if n == 1 else f"{n} turns"


def _ending(turn: TurnView) -> list[str]:
    lines = []
    if turn.error:
        lines.append(f"error: {turn.error}")
    if turn.end_reason:
        lines.append(f"ended: {turn.end_reason}")
    return lines


def _label(entry: Entry, kind: str | None = None) -> str:
    """An entry's kind (or `kind`), with its name and call id where it has them: `mcp_call
    docs.search (mcp_1)`, `set_aside web_search_call`."""
    label = kind or entry.kind
    if entry.name:
        label += f" {entry.name}"
    if entry.call_id:
        label += f" ({entry.call_id})"
    return label


def _text_entry(entry: Entry) -> str:
    if entry.kind == "message":
        return f"{entry.role}: {entry.text}"
    return f"{_label(entry)}: {entry.text}"


def to_text(view: ConversationView) -> str:
    lines = [f"Conversation of {view.response_id}: {_turns(len(view.turns))}"]
    if view.missing:
        lines.append(f"(earlier turns are gone: {view.missing} is not in the log)")
    for n, turn in enumerate(view.turns, 1):
        lines += ["", f"── Turn {n}: {_heading(turn)} (owner {turn.owner})"]
        if turn.instructions:
            lines.append(f"instructions: {turn.instructions}")
        lines += [_text_entry(e) for e in turn.input + turn.output]
        lines += _ending(turn)
        lines.append(f"usage: {usage_line(turn.usage)}")
    lines += ["", f"Total usage: {usage_line(view.usage)}"]
    return "\n".join(lines) + "\n"


def _fence(text: str, lang: str = "") -> list[str]:
    fence = "```"
    while fence in text:
        fence += "`"
    return [f"{fence}{lang}", text, fence]


def _md_entry(entry: Entry) -> list[str]:
    if entry.kind == "message":
        return [f"**{entry.role}:**", "", entry.text]
    if entry.kind == "reasoning":
        return ["*reasoning:*", "", *(f"> {line}" for line in entry.text.splitlines() or [""])]
    if entry.kind == "compaction":
        return [f"*compaction:* {entry.text}"]
    if entry.kind == "function_call":
        return [
            f"**function call** `{entry.name}` (`{entry.call_id}`):",
            "",
            *_fence(entry.text, "json"),
        ]
    if entry.kind == "custom_tool_call":
        return [
            f"**custom tool call** `{entry.name}` (`{entry.call_id}`):",
            "",
            *_fence(entry.text),
        ]
    if entry.kind in ("function_call_output", "custom_tool_call_output"):
        what = "function output" if entry.kind == "function_call_output" else "custom tool output"
        return [f"**{what}** (`{entry.call_id}`):", "", *_fence(entry.text)]
    # MCP listings, calls and approvals, built-in calls, items set aside: by their own name.
    return [f"**{_label(entry, entry.kind.replace('_', ' '))}:**", "", *_fence(entry.text)]


def to_markdown(view: ConversationView) -> str:
    lines = [f"# Conversation `{view.response_id}`", ""]
    lines.append(f"{_turns(len(view.turns))}. Total usage: {usage_line(view.usage)}.")
    if view.missing:
        lines += ["", f"*Earlier turns are gone: `{view.missing}` is not in the log.*"]
    for n, turn in enumerate(view.turns, 1):
        lines += ["", f"## Turn {n}: {_heading(turn)}", "", f"Owner: `{turn.owner}`"]
        if turn.instructions:
            lines += ["", f"**Instructions:** {turn.instructions}"]
        for entry in turn.input + turn.output:
            lines += ["", *_md_entry(entry)]
        lines += ["", *(f"*{line}*" for line in _ending(turn))] if _ending(turn) else []
        lines += ["", f"*Usage: {usage_line(turn.usage)}*"]
    return "\n".join(lines) + "\n"
