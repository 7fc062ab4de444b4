"""The MCP loop's pure parts: its events in OpenAI's shapes, the fold's rules for its steps,
taking over a dead process's loop, the tool filters, and the secrets kept out of the echo."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from domain import mcp
from domain.errors import InvalidTransition
from domain.events import RequestFacts, encode
from domain.fold.replay import replay
from domain.generation import ArgumentsDelta, EndItem, FunctionCallStart, Turn
from domain.mcp import lists_sent
from domain.objects import (
    InputItem,
    InputMessage,
    InputText,
    McpApprovalResponse,
    McpCall,
    McpListTools,
)
from domain.tools import McpServer, mcp_offered, mcp_servers, needs_approval
from service.prompts.engine import as_input, engine_prompt
from service.tools.mcploop import listed_before
from service.wire.decode import parse_create_body
from service.wire.limits import Limits
from service.wire.set_aside import SET_ASIDE
from tests.fakes.prompts import make_prompt
from tests.unit.domain_helpers import SCENARIOS, Stream, sdk_response, sdk_stream_event


@pytest.mark.parametrize(
    "name",
    ["mcp_loop", "mcp_list_failed_then_taken_over", "builtin_loop", "builtin_retried_then_lost"],
)
def test_every_mcp_event_and_item_is_one_the_sdk_reads_back_whole(name: str) -> None:
    """The MCP loop's and the built-ins' (domain/builtins.py) events and items."""
    s = SCENARIOS[name]()
    for event in s.events:
        sdk_stream_event(encode(event).data)
    sdk_response(s.state.response)  # type: ignore[arg-type]
    assert replay(s.events) == s.state


def test_the_loop_scenario_ends_with_each_call_closed_and_its_result() -> None:
    out = SCENARIOS["mcp_loop"]().state.response.output  # type: ignore[union-attr]
    calls = [i for i in out if isinstance(i, McpCall)]
    assert [(c.status, c.output) for c in calls] == [("completed", "echo: hi"), ("failed", None)]
    assert calls[1].error == {
        "type": "mcp_tool_execution_error",
        "content": [{"type": "text", "text": "boom"}],
    }


def _calling() -> Stream:
    s = Stream.new()
    s.emit(FunctionCallStart(name="slow", server_label="t"), ArgumentsDelta(text="{}"), EndItem())
    return s


def test_a_call_completes_only_after_it_was_started() -> None:
    s = _calling()
    with pytest.raises(InvalidTransition):
        s._apply(mcp.call_ended(s.state, output="x"))  # completed, never started
    s._apply(mcp.call_started(s.state))
    with pytest.raises(InvalidTransition):
        s._apply(mcp.call_started(s.state))  # started twice


def test_a_call_in_flight_when_its_process_died_is_failed_never_run_again() -> None:
    s = _calling()
    s._apply(mcp.call_started(s.state))
    s._apply(mcp.interrupted(s.state))
    call = s.state.response.output[-1]  # type: ignore[union-attr]
    assert isinstance(call, McpCall) and call.status == "failed"
    assert mcp.WORKER_LOST in json.dumps(call.error)
    assert mcp.pending_call(s.state) is None


def test_a_call_never_started_is_left_pending_to_run_once() -> None:
    s = _calling()
    assert s._apply(mcp.interrupted(s.state)) == []
    assert mcp.pending_call(s.state) is not None


def test_a_partial_message_is_closed_incomplete_on_takeover() -> None:
    from domain.generation import TextDelta

    s = Stream.new()
    s.emit(TextDelta(text="half"))
    s._apply(mcp.interrupted(s.state))
    assert s.state.open_index is None
    assert s.state.response.output[0].status == "incomplete"  # type: ignore[union-attr]


def test_a_response_ended_mid_call_fails_the_call_it_never_ran() -> None:
    s = _calling()
    s.cancel()
    call = s.state.response.output[-1]  # type: ignore[union-attr]
    assert isinstance(call, McpCall) and call.status == "incomplete" and call.error is not None


SERVER = McpServer(server_label="t", server_url="http://x")
# `a` says it changes nothing (MCP's `readOnlyHint`; `c` as lists logged before
# 2026-12-06 spell it); `b` gives no hint; `d` says it may change something.
LISTED = [
    {"name": "a", "input_schema": {}, "annotations": {"readOnlyHint": True}},
    {"name": "b", "input_schema": {}},
    {"name": "c", "input_schema": {}, "annotations": {"read_only_hint": True}},
    {"name": "d", "input_schema": {}, "annotations": {"readOnlyHint": False}},
]


@pytest.mark.parametrize(
    ("allowed", "offered"),
    [
        (None, "abcd"),
        (["a"], "a"),
        ({"tool_names": ["a", "b"]}, "ab"),
        ({"read_only": True}, "ac"),
        ({"read_only": False}, "bd"),
        ({"read_only": True, "tool_names": ["a", "b"]}, "a"),  # both criteria hold
        ({}, "abcd"),  # a filter of no criterion filters nothing
        ({"tool_names": None, "read_only": None}, "abcd"),
    ],
)
def test_allowed_tools_filters_what_the_model_is_offered(allowed: Any, offered: str) -> None:
    tool = {"type": "mcp", "server_label": "t", "server_url": "http://x", "allowed_tools": allowed}
    (server,) = mcp_servers([tool])
    assert "".join(t.name for t in mcp_offered(server, LISTED)) == offered
    assert all(t.server_label == "t" for t in mcp_offered(server, LISTED))


@pytest.mark.parametrize(
    ("rule", "asked"),
    [
        (None, "abcd"),  # OpenAI's default: always
        ("always", "abcd"),
        ("never", ""),
        ({"never": {"tool_names": ["a"]}}, "bcd"),
        ({"always": {"tool_names": ["b"]}}, "b"),
        ({"never": {"read_only": True}}, "bd"),  # reads run unasked, the rest are asked
        ({"always": {"read_only": False}}, "bd"),
        ({"never": {"read_only": True, "tool_names": ["c", "d"]}}, "abd"),
        ({"never": {"tool_names": ["b"]}, "always": {"tool_names": ["a", "b"]}}, "a"),
        ({"never": {}}, "abcd"),  # a filter of no criterion takes no tool
        ({"always": {}}, "abcd"),
    ],
)
def test_require_approval(rule: Any, asked: str) -> None:
    server = msgspec.structs.replace(SERVER, require_approval=rule)
    assert "".join(t["name"] for t in LISTED if needs_approval(server, t)) == asked
    assert "".join(t.name for t in mcp_offered(server, LISTED) if t.approval) == asked


def _parse(**body: Any) -> Any:
    raw = {"model": "m", "input": "hi", **body}
    return parse_create_body(json.dumps(raw).encode(), Limits())


def test_headers_and_authorization_are_taken_out_and_echoed_redacted() -> None:
    tool = {
        "type": "mcp",
        "server_label": "t",
        "server_url": "http://127.0.0.1:1/mcp",
        "headers": {"X-Key": "s3cret"},
        "authorization": "tok-xyz-9",
        "allowed_tools": {"tool_names": ["a"]},
    }
    req = _parse(tools=[tool])
    assert "s3cret" not in json.dumps(msgspec.to_builtins(req.response))
    assert "tok-xyz-9" not in json.dumps(msgspec.to_builtins(req.response))
    assert "s3cret" not in json.dumps(req.extra)
    assert req.response.tools[0]["headers"] == {"X-Key": "<redacted>"}
    assert req.response.tools[0]["authorization"] == "<redacted>"
    assert req.secrets == {"t": {"X-Key": "s3cret", "Authorization": "Bearer tok-xyz-9"}}
    assert mcp_servers(req.response.tools)[0].allowed_tools == {"tool_names": ["a"]}


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "mcp", "server_label": "t", "connector_id": "connector_gmail"},
        {"type": "mcp", "server_label": "t", "server_url": "file:///etc/passwd"},
        {"type": "mcp", "server_label": "bad label", "server_url": "http://x"},
        {"type": "mcp", "server_url": "http://x"},
    ],
)
def test_mcp_tools_the_server_cannot_run_are_refused(tool: dict[str, Any]) -> None:
    from domain.errors import InvalidRequest

    with pytest.raises(InvalidRequest):
        _parse(tools=[tool])


def test_a_finished_call_is_a_function_call_and_its_output_to_the_next_step() -> None:
    out = SCENARIOS["mcp_loop"]().state.response.output  # type: ignore[union-attr]
    items = as_input(out)
    kinds = [type(i).__name__ for i in items]
    assert kinds.count("InputFunctionCall") == 2 and kinds.count("FunctionCallOutput") == 2
    outputs = [i for i in items if type(i).__name__ == "FunctionCallOutput"]
    assert outputs[0].output == "echo: hi"  # type: ignore[attr-defined]
    assert "boom" in outputs[1].output  # type: ignore[attr-defined]


def test_mcp_calls_passed_back_are_shown_as_calls_in_the_input_and_in_earlier_turns() -> None:
    """An `mcp_call` input item, in this request or in an earlier one of the chain, reaches
    an engine as the function call and output it stands for; one still running, and the
    client's approvals, reach none; a prompt without them is the same object."""
    done = McpCall(id="mcp_1", server_label="d", name="find", arguments="{}", output="hit")
    running = msgspec.structs.replace(done, id="mcp_2", output=None, status="calling")
    failed = msgspec.structs.replace(
        done, id="mcp_3", output=None, error={"type": "http_error", "code": 502, "message": "x"}
    )
    approval = McpApprovalResponse(id="mcpa_1", approval_request_id="mcpr_1", approve=True)
    ask = InputMessage(id="msg_1", role="user", content=[InputText(text="so?")])
    earlier = Turn(response_id="resp_0", instructions=None, input=[done, ask], output=[])
    shown = engine_prompt(make_prompt([approval, done, running, failed, ask], history=[earlier]))

    def seen(items: list[InputItem]) -> list[tuple[str, str]]:
        return [
            (type(i).__name__, getattr(i, "output", getattr(i, "arguments", ""))) for i in items
        ]

    call, result = ("InputFunctionCall", "{}"), ("FunctionCallOutput", "hit")
    error = ("FunctionCallOutput", json.dumps({"error": failed.error}))
    assert seen(shown.input) == [call, result, call, error, ("InputMessage", "")]
    assert seen(shown.history[0].input) == [call, result, ("InputMessage", "")]
    plain = make_prompt([ask])
    assert engine_prompt(plain) is plain


def test_the_tool_lists_of_earlier_turns_are_the_newest_of_each_server_that_did_not_fail() -> None:
    def listing(label: str, n: int, error: str | None = None) -> McpListTools:
        tools = [{"name": f"t{n}", "input_schema": {"type": "object"}}]
        return McpListTools(id=f"mcpl_{n}", server_label=label, tools=tools, error=error)

    def turn(*items: McpListTools) -> Turn:
        return Turn(response_id="resp_x", instructions=None, input=[], output=list(items))

    history = [
        turn(listing("a", 1), listing("b", 2), listing("c", 3)),
        turn(listing("a", 4), listing("b", 5, error="unreachable")),
    ]
    found = listed_before(make_prompt(history=history))
    # a: its newer list; b: its newest failed, so it is listed again; c: the only one.
    assert {label: item.id for label, item in found.items()} == {"a": "mcpl_4", "c": "mcpl_3"}
    assert listed_before(make_prompt()) == {}


def test_lists_passed_back_are_newer_than_the_history_and_a_malformed_one_stands_for_none() -> None:
    def sent(label: str, n: int, **more: object) -> dict[str, object]:
        tools = [{"name": f"t{n}", "input_schema": {"type": "object"}, "annotations": None}]
        return {
            "type": "mcp_list_tools",
            "id": f"mcpl_{n}",
            "server_label": label,
            "tools": tools,
            **more,
        }

    earlier = lists_sent([sent("a", 1), sent("b", 2)])
    history = [Turn(response_id="resp_x", instructions=None, input=[], output=[*earlier])]
    aside = [  # as the request's facts keep them: by their place in the input, any order
        {"at": 3, "item": sent("a", 4)},
        {"at": 1, "item": sent("a", 3)},
        {"at": 2, "item": sent("b", 5, tools=[{"name": 7}])},  # not a list's shape
        {"at": 4, "item": sent("c", 6, error="unreachable")},
        {"at": 5, "item": {"type": "web_search_call", "id": "ws_1"}},
    ]
    facts = RequestFacts(owner="o", input=[], extra={SET_ASIDE: aside})
    found = listed_before(make_prompt(history=history), facts)
    # a: the last one passed back; b: its malformed list stands for nothing, so the
    # history's holds; c: failed, listed again.
    assert {label: item.id for label, item in found.items()} == {"a": "mcpl_4", "b": "mcpl_2"}
    # Kept as sent, the fields no offer reads included.
    assert found["a"].tools == sent("a", 4)["tools"]
    bare = {"type": "mcp_list_tools", "server_label": "x"}
    assert lists_sent([{**bare, "tools": [{"name": "n", "input_schema": None}]}]) == []
    assert lists_sent([bare])[0].tools == []  # a server of no tools
