"""Whatever resplog emits is accepted back: every output item kind a response (or a
compaction) can hold, sent back as the next request's input, decodes."""

from __future__ import annotations

from typing import Any, get_args

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.objects import (
    CodeInterpreterCall,
    CompactionItem,
    CustomToolCall,
    FunctionCall,
    InputMessage,
    InputText,
    McpApprovalRequest,
    McpCall,
    McpCallStatus,
    McpListTools,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Refusal,
    SummaryText,
    WebSearchCall,
)
from service.wire.decode import parse_create_body
from service.wire.limits import Limits

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
KEY = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
SMALL_DICT = st.dictionaries(KEY, TEXT | st.integers() | st.booleans(), max_size=3)
ITEM_STATUS = st.sampled_from(["in_progress", "completed", "incomplete"])
PHASE = st.sampled_from([msgspec.UNSET, "commentary", "final_answer"])
# A placeholder for an id: given one of its own by position (the server never emits two
# items with one id), or kept as it is emitted without one.
ID = "<id>"

_text = st.builds(OutputText, text=TEXT)
_message = st.builds(
    OutputMessage,
    id=st.just(ID),
    status=ITEM_STATUS,
    content=st.lists(_text | st.builds(Refusal, refusal=TEXT), max_size=2),
    phase=PHASE,
)
_reasoning = st.builds(
    ReasoningItem,
    id=st.just(ID),
    summary=st.lists(st.builds(SummaryText, text=TEXT), max_size=2),
    content=st.lists(st.builds(ReasoningText, text=TEXT), max_size=2),
    encrypted_content=st.sampled_from([msgspec.UNSET, "gAAAA-sealed"]),
    status=st.none() | ITEM_STATUS,
)
_namespace = st.sampled_from([msgspec.UNSET, "ns"])
_function_call = st.builds(
    FunctionCall,
    id=st.sampled_from([ID, None]),
    call_id=KEY,
    name=KEY,
    arguments=st.just('{"a": 1}'),
    status=st.none() | ITEM_STATUS,
    namespace=_namespace,
)
_custom_call = st.builds(
    CustomToolCall,
    id=st.sampled_from([ID, None]),
    call_id=KEY,
    name=KEY,
    input=TEXT,
    status=st.none() | ITEM_STATUS,
    namespace=_namespace,
)
_list_tools = st.builds(
    McpListTools,
    id=st.just(ID),
    server_label=KEY,
    tools=st.lists(st.fixed_dictionaries({"name": KEY, "input_schema": SMALL_DICT}), max_size=2),
    error=st.none() | TEXT,
)
_mcp_call = st.builds(
    McpCall,
    id=st.just(ID),
    server_label=KEY,
    name=KEY,
    arguments=st.just("{}"),
    output=st.none() | TEXT,
    error=st.none() | st.fixed_dictionaries({"type": st.just("http_error"), "message": TEXT}),
    approval_request_id=st.none() | KEY,
    status=st.none() | st.sampled_from(get_args(McpCallStatus)),
)
_approval = st.builds(
    McpApprovalRequest, id=st.just(ID), server_label=KEY, name=KEY, arguments=st.just("{}")
)
_compaction = st.builds(CompactionItem, id=st.just(ID), encrypted_content=st.just("gAAAA-sealed"))
_web_search = st.builds(
    WebSearchCall,
    id=st.just(ID),
    action=st.fixed_dictionaries({"type": st.just("search"), "query": TEXT}),
    status=st.sampled_from(["in_progress", "searching", "completed", "failed"]),
)
_code = st.builds(
    CodeInterpreterCall,
    id=st.just(ID),
    code=st.none() | TEXT,
    container_id=KEY,
    outputs=st.none() | st.lists(st.fixed_dictionaries({"type": st.just("logs"), "logs": TEXT})),
    status=st.sampled_from(["in_progress", "completed", "incomplete", "interpreting", "failed"]),
)
KINDS = {
    OutputMessage: _message,
    ReasoningItem: _reasoning,
    FunctionCall: _function_call,
    CustomToolCall: _custom_call,
    McpListTools: _list_tools,
    McpCall: _mcp_call,
    McpApprovalRequest: _approval,
    CompactionItem: _compaction,
    WebSearchCall: _web_search,
    CodeInterpreterCall: _code,
}
# `POST /v1/responses/compact` repeats the conversation's user messages before its
# compaction item, with the id each was recorded under (or none, from an older server).
_user = st.builds(
    InputMessage,
    id=st.sampled_from([ID, ""]),
    role=st.just("user"),
    content=st.lists(st.builds(InputText, text=TEXT), min_size=1, max_size=2),
)


def _emitted(items: list[Any]) -> list[dict[str, Any]]:
    """The items as the server writes them, each placeholder id made unique."""
    return [
        msgspec.to_builtins(
            msgspec.structs.replace(item, id=f"item_{i}") if item.id == ID else item
        )
        for i, item in enumerate(items)
    ]


def test_the_strategies_cover_every_output_item_kind() -> None:
    assert set(KINDS) == set(get_args(OutputItem))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(*KINDS.values(), _user), min_size=1, max_size=8))
def test_every_item_the_server_emits_is_accepted_back_as_input(items: list[Any]) -> None:
    body = {
        "model": "m",
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "input": _emitted(items),
    }
    parse_create_body(msgspec.json.encode(body), Limits())
