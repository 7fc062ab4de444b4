"""A create's `input` (a string, messages, typed items) as domain input items, with the
size limits msgspec cannot know."""

from __future__ import annotations

from typing import get_args

import msgspec
from msgspec import UNSET

from domain.errors import InvalidRequest
from domain.objects import (
    CustomToolCallOutput,
    FunctionCallOutput,
    InputCompaction,
    InputCustomToolCall,
    InputFunctionCall,
    InputItem,
    InputMessage,
    InputReasoning,
    InputText,
    ItemReference,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpCallStatus,
    OutputText,
)
from service.wire.limits import Limits, check_text
from service.wire.parts import read_part
from service.wire.request import (
    CompactionItemParam,
    ContentPartParam,
    CustomToolCallOutputParam,
    CustomToolCallParam,
    FunctionCallOutputParam,
    FunctionCallParam,
    InputItemParam,
    ItemReferenceParam,
    McpApprovalRequestParam,
    McpApprovalResponseParam,
    McpCallParam,
    MessageParam,
    ReasoningItemParam,
    SetAsideItemParam,
    TypedItemParam,
)


def read_input(
    value: str | list[InputItemParam] | None, limits: Limits
) -> list[InputItem | ItemReference]:
    """OpenAI's input forms (a string, messages, typed items) as domain items, with the
    size limits msgspec cannot know (they are configurable)."""
    if value is None:
        return []
    if isinstance(value, str):
        check_text("input", value, limits)
        return [InputMessage(id="", role="user", content=[InputText(text=value)])]
    if len(value) > limits.max_input_items:
        raise InvalidRequest(
            f"Invalid 'input': too many items ({len(value)}; the limit is "
            f"{limits.max_input_items}).",
            param="input",
            code="array_above_max_length",
        )
    items = [
        read_item(item, f"input[{i}]", limits)
        for i, item in enumerate(value)
        if not isinstance(item, SetAsideItemParam)
    ]
    _refuse_duplicate_ids(items)
    return items


_MCP_STATUSES = frozenset(get_args(McpCallStatus))


def _mcp_status(status: object) -> McpCallStatus | None:
    """A passed-back MCP call's status, kept when it is one of OpenAI's (the next prompt
    leaves out a call still running); a stored input item's status is otherwise dropped."""
    # Any JSON may stand here (the field is kept loosely typed), a list or an object too,
    # which a set cannot be asked about.
    known = isinstance(status, str) and status in _MCP_STATUSES
    return status if known else None  # type: ignore[return-value]


def _refuse_duplicate_ids(items: list[InputItem | ItemReference]) -> None:
    """OpenAI's 400 for two items with one id: the input items list pages by id, so an id
    must name one item (else `after=<that id>` never advances)."""
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item.id and item.id in seen:
            raise InvalidRequest(
                f"Duplicate item found with id {item.id}. Remove duplicate items from your "
                "input and try again.",
                param=f"input[{i}].id",
                code="invalid_value",
            )
        seen.add(item.id)


def read_item(item: TypedItemParam, param: str, limits: Limits) -> InputItem | ItemReference:
    """One typed input item as its domain item; `param` names it in a rejection."""
    iid = item.id or ""
    match item:
        case ItemReferenceParam():
            if not iid:
                raise InvalidRequest(
                    f"Missing required parameter: '{param}.id'.",
                    param=f"{param}.id",
                    code="missing_required_parameter",
                )
            return ItemReference(id=iid)
        case MessageParam(role=role, content=str() as text, phase=phase):
            check_text(f"{param}.content", text, limits)
            part = OutputText(text=text) if role == "assistant" else InputText(text=text)
            return InputMessage(id=iid, role=role, content=[part], phase=phase)
        case MessageParam(role=role, content=list() as parts, phase=phase):
            content = [read_part(c, f"{param}.content[{j}]", limits) for j, c in enumerate(parts)]
            return InputMessage(id=iid, role=role, content=content, phase=phase)
        case FunctionCallParam(call_id=call_id, name=name, arguments=arguments):
            return InputFunctionCall(
                id=iid, call_id=call_id, name=name, arguments=arguments, namespace=_ns(item)
            )
        case FunctionCallOutputParam(call_id=call_id, output=output):
            text = _tool_output(output, f"{param}.output", limits)
            return FunctionCallOutput(id=iid, call_id=call_id, output=text)
        case CustomToolCallParam(call_id=call_id, name=name, input=text):
            check_text(f"{param}.input", text, limits)
            return InputCustomToolCall(
                id=iid, call_id=call_id, name=name, input=text, namespace=_ns(item)
            )
        case CompactionItemParam(encrypted_content=blob):
            return InputCompaction(id=iid, encrypted_content=blob)
        case CustomToolCallOutputParam(call_id=call_id, output=output):
            text = _tool_output(output, f"{param}.output", limits)
            return CustomToolCallOutput(id=iid, call_id=call_id, output=text)
        case McpApprovalResponseParam(approval_request_id=req, approve=ok, reason=why):
            check_text(f"{param}.reason", why, limits)
            return McpApprovalResponse(id=iid, approval_request_id=req, approve=ok, reason=why)
        case McpApprovalRequestParam(server_label=label, name=name, arguments=args):
            check_text(f"{param}.arguments", args, limits)
            return McpApprovalRequest(id=iid, server_label=label, name=name, arguments=args)
        case McpCallParam(server_label=label, name=name, arguments=args, output=output):
            check_text(f"{param}.arguments", args, limits)
            check_text(f"{param}.output", output, limits)
            return McpCall(
                id=iid,
                server_label=label,
                name=name,
                arguments=args,
                output=output,
                error=item.error,
                approval_request_id=item.approval_request_id,
                status=_mcp_status(item.status),
            )
        case ReasoningItemParam(summary=summary, content=content, encrypted_content=enc):
            return InputReasoning(
                id=iid,
                summary=summary or [],
                content=content or [],
                encrypted_content=enc if isinstance(enc, str) else UNSET,
            )
    raise AssertionError(f"unhandled input item {type(item).__name__}")


def _ns(item: FunctionCallParam | CustomToolCallParam) -> str | msgspec.UnsetType:
    return msgspec.UNSET if item.namespace is None else item.namespace


def _tool_output(value: str | list[ContentPartParam], param: str, limits: Limits) -> str:
    if isinstance(value, str):
        check_text(param, value, limits)
        return value
    parts = [read_part(v, f"{param}[{j}]", limits) for j, v in enumerate(value)]
    return "".join(p.text for p in parts if isinstance(p, InputText | OutputText))
