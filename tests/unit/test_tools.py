"""The tool policy: what agent clients send decodes, is echoed as sent, and reaches the
engine as documented (domain/tools.py, service/tools/calls.py, the engines' renderings)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import msgspec
import pytest

from adapters.engines.openai_chat import chat_request
from domain.errors import InvalidRequest
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    EndItem,
    FunctionCallStart,
    InputDelta,
    TextDelta,
)
from domain.objects import (
    AllowedToolsChoice,
    CustomToolCallOutput,
    CustomToolChoice,
    InputCustomToolCall,
    InputFunctionCall,
    InputMessage,
    InputText,
    ItemReference,
)
from domain.tools import (
    BROWSER,
    BROWSER_TYPES,
    PYTHON,
    PYTHON_TYPES,
    OfferedTool,
    custom_input,
    function_view,
    narrowed,
    not_offered,
    offered,
    resolve,
)
from service.tools.calls import tool_calls
from service.wire.decode import parse_create_body
from service.wire.extras import with_client_headers
from service.wire.limits import Limits
from tests.fakes.prompts import make_prompt

NAMESPACE: dict[str, Any] = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [
        {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
        {"type": "custom", "name": "note"},
    ],
}
CUSTOM: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}


def parse(**body: Any) -> Any:
    return parse_create_body(json.dumps({"model": "m", "input": "hi", **body}).encode(), Limits())


# --- the decoder ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "web_search", "external_web_access": False},
        {"type": "web_search_preview"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "image_generation", "quality": "low"},
        {"type": "computer_use_preview", "display_width": 1, "display_height": 1},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "tool_search"},
    ],
)
def test_hosted_tools_are_accepted_echoed_as_sent_and_recorded_as_not_offered(
    tool: dict[str, Any],
) -> None:
    req = parse(tools=[tool])
    assert req.response.tools == [tool]
    assert offered(req.response.tools) == []
    assert req.extra["tools_not_offered"] == [tool["type"]]


def test_namespace_custom_and_client_tool_search_are_offered() -> None:
    search = {"type": "tool_search", "execution": "client", "description": "Find tools."}
    req = parse(tools=[NAMESPACE, CUSTOM, search])
    assert req.response.tools[0] == {
        "type": "namespace",
        "name": "crm",
        "description": "Customer records.",
        "tools": [
            {
                "type": "function",
                "name": "lookup",
                "description": None,
                "parameters": {"type": "object"},
                "strict": None,
            },
            {"type": "custom", "name": "note"},
        ],
    }
    assert req.response.tools[1] == CUSTOM
    assert req.response.tools[2] == search
    tools = offered(req.response.tools)
    assert [(t.namespace, t.name, t.custom) for t in tools] == [
        ("crm", "lookup", False),
        ("crm", "note", True),
        (None, "apply_patch", True),
        (None, "tool_search", False),
    ]
    assert "tools_not_offered" not in req.extra


def test_the_codex_request_extras_are_facts_not_echoes() -> None:
    req = parse(
        client_metadata={"session_id": "s"},
        input=[
            {
                "role": "user",
                "content": "hi",
                "internal_chat_message_metadata_passthrough": {"a": 1},
            }
        ],
    )
    assert req.extra["client_metadata"] == {"session_id": "s"}
    assert req.input == [InputMessage(id="", role="user", content=[InputText(text="hi")])]
    headed = with_client_headers(req, {"session-id": "s" * 300, "thread-id": "t", "x": "y"})
    assert headed.extra["client_headers"] == {"session-id": "s" * 256, "thread-id": "t"}
    assert with_client_headers(req, {"accept": "*/*"}) is req


def test_input_items_agents_pass_back_decode() -> None:
    req = parse(
        input=[
            {"type": "item_reference", "id": "rs_abc_0"},
            {"id": "msg_abc_1"},
            {
                "type": "custom_tool_call",
                "call_id": "c",
                "name": "apply_patch",
                "input": "x",
                "namespace": "edit",
            },
            {"type": "custom_tool_call_output", "call_id": "c", "output": "ok"},
            {"type": "function_call", "call_id": "d", "name": "f", "arguments": "{}", "async": 0},
        ]
    )
    assert req.input[:2] == [ItemReference(id="rs_abc_0"), ItemReference(id="msg_abc_1")]
    assert req.input[2] == InputCustomToolCall(
        id="", call_id="c", name="apply_patch", input="x", namespace="edit"
    )
    assert req.input[3] == CustomToolCallOutput(id="", call_id="c", output="ok")
    assert isinstance(req.input[4], InputFunctionCall)


@pytest.mark.parametrize(
    ("tools", "param", "message"),
    [
        ([{"type": "nope"}], "tools[0].type", "Invalid value for 'tools[0].type'"),
        ([{"type": {}, "tool": {}}], "tools[0].type", "Invalid value for 'tools[0].type'"),
        (
            [{"type": "hosted", "tool": {"type": "function"}}],
            "tools[0].type",
            "Invalid value 'hosted'",
        ),
        ([{"type": "custom"}], "tools[0].name", "Missing required parameter: 'tools[0].name'."),
        (
            [{"type": "namespace", "name": "n", "tools": []}],
            "tools[0].description",
            "Missing required parameter",
        ),
        (
            [{**NAMESPACE, "tools": [{"type": "web_search"}]}],
            "tools[0].tools[0].type",
            "Invalid value",
        ),
        ([CUSTOM, CUSTOM], "tools[1].name", "Duplicate tool name 'apply_patch'"),
        (
            [{"type": "custom", "name": "x", "format": {"type": "grammar", "syntax": "peg"}}],
            "tools[0].format.syntax",
            "Invalid value",
        ),
    ],
)
def test_bad_tools_are_openai_400s(tools: list[Any], param: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(tools=tools)
    assert caught.value.param == param
    assert message in caught.value.message


def test_the_same_name_in_two_namespaces_is_two_tools() -> None:
    other = {**NAMESPACE, "name": "billing"}
    assert len(offered(parse(tools=[NAMESPACE, other]).response.tools)) == 4


def test_tool_choice_names_a_custom_tool_and_allowed_tools_may_name_hosted_kinds() -> None:
    assert parse(
        tools=[CUSTOM], tool_choice={"type": "custom", "name": "apply_patch"}
    ).response.tool_choice == CustomToolChoice(name="apply_patch")
    allowed = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "custom", "name": "apply_patch"}, {"type": "web_search"}],
    }
    assert parse(tools=[CUSTOM, {"type": "web_search"}], tool_choice=allowed).response.tools
    with pytest.raises(InvalidRequest):
        parse(tools=[CUSTOM], tool_choice={"type": "function", "name": "apply_patch"})
    with pytest.raises(InvalidRequest):
        parse(tool_choice="required")
    # OpenAI runs its hosted tools, so "required" over them alone is no error there; here
    # it is echoed and leaves the model nothing to call.
    hosted = parse(tools=[{"type": "web_search"}], tool_choice="required").response
    assert hosted.tool_choice == "required"
    assert narrowed(offered(hosted.tools), hosted.tool_choice) == []


def test_allowed_tools_may_say_none_or_leave_the_mode_out() -> None:
    """The Open Responses `AllowedToolsParam`: `mode` is optional (echoed as `auto`) and may
    be `none` (the model is left no tool)."""
    tools = [{"type": "function", "name": "f"}]
    entry = [{"type": "function", "name": "f"}]
    plain = parse(tools=tools, tool_choice={"type": "allowed_tools", "tools": entry}).response
    assert plain.tool_choice == AllowedToolsChoice(mode="auto", tools=entry)
    none = parse(
        tools=tools, tool_choice={"type": "allowed_tools", "tools": entry, "mode": "none"}
    ).response
    assert narrowed(offered(none.tools), none.tool_choice) == []
    assert "tools" not in chat_request(
        make_prompt(tools=offered(none.tools), tool_choice=none.tool_choice), "m"
    )


MCP_TOOL: dict[str, Any] = {
    "type": "mcp",
    "server_label": "docs",
    "server_url": "http://127.0.0.1:1/mcp",
    "require_approval": "never",
}
DOCS = [
    OfferedTool(name="search", server_label="docs"),
    OfferedTool(name="fetch", server_label="docs"),
]


def test_tool_choice_may_force_an_mcp_server_or_one_of_its_tools() -> None:
    """openai-python `ToolChoiceMcp`: echoed as sent; the model is left that server's
    tools (or the one named), which a chat upstream must call."""
    for choice in (
        {"type": "mcp", "server_label": "docs"},
        {"type": "mcp", "server_label": "docs", "name": "fetch"},
    ):
        resp = parse(tools=[MCP_TOOL], tool_choice=choice).response
        assert msgspec.to_builtins(resp.tool_choice) == choice
        left = narrowed([*DOCS, OfferedTool(name="f")], resp.tool_choice)
        assert [t.name for t in left] == (["fetch"] if "name" in choice else ["search", "fetch"])
        wire = chat_request(
            make_prompt(tools=[*DOCS, OfferedTool(name="f")], tool_choice=resp.tool_choice), "m"
        )
        assert wire["tool_choice"] == "required"
        assert [t["function"]["name"] for t in wire["tools"]] == [t.name for t in left]
    with pytest.raises(InvalidRequest) as other:
        parse(tools=[MCP_TOOL], tool_choice={"type": "mcp", "server_label": "wiki"})
    assert other.value.param == "tool_choice.server_label"


@pytest.mark.parametrize(
    "kind",
    [
        "file_search",
        "web_search_preview",
        "computer_use_preview",
        "code_interpreter",
        "shell",
        "apply_patch",
        "programmatic_tool_calling",
    ],
)
def test_tool_choice_may_force_a_hosted_kind_which_leaves_only_its_built_in(kind: str) -> None:
    """A hosted kind (openai-python `ToolChoiceTypes`, `ToolChoiceShell`, ...) is accepted
    whatever the tools, echoed as sent, and leaves the model what stands for it here: the
    tool server's built-in (`web_search*` the browser, `code_interpreter` python), else no
    tool at all, and then a chat upstream is sent none."""
    resp = parse(tools=[{"type": "function", "name": "f"}], tool_choice={"type": kind}).response
    assert msgspec.to_builtins(resp.tool_choice) == {"type": kind}
    everything = [OfferedTool(name="f"), *BROWSER, PYTHON]
    left = narrowed(everything, resp.tool_choice)
    expected = BROWSER if kind in BROWSER_TYPES else [PYTHON] if kind in PYTHON_TYPES else []
    assert left == expected
    body = chat_request(
        make_prompt(tools=[OfferedTool(name="f")], tool_choice=resp.tool_choice), "m"
    )
    assert "tools" not in body and "tool_choice" not in body


# --- what the engines see ----------------------------------------------------------------------


def test_a_chat_upstream_sees_qualified_function_names_and_custom_tools_as_functions() -> None:
    prompt = make_prompt(tools=offered(parse(tools=[NAMESPACE, CUSTOM]).response.tools))
    body = chat_request(prompt, "m")
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == ["crm__lookup", "crm__note", "apply_patch"]
    assert body["tools"][2]["function"]["parameters"]["required"] == ["input"]


def test_history_calls_are_shown_to_function_only_engines_as_functions() -> None:
    call = InputCustomToolCall(id="i", call_id="c", name="note", input="hi", namespace="crm")
    view = function_view(call, "__")
    assert isinstance(view, InputFunctionCall)
    assert (view.name, json.loads(view.arguments)) == ("crm__note", {"input": "hi"})
    namespaced = InputFunctionCall(id="i", call_id="c", name="f", arguments="{}", namespace="n")
    assert function_view(namespaced, ".") == InputFunctionCall(
        id="i", call_id="c", name="n.f", arguments="{}"
    )


def test_resolve_and_custom_input() -> None:
    tools = offered([NAMESPACE, CUSTOM])
    for called in ("crm.note", "crm__note"):
        found = resolve(tools, called)
        assert found is not None and (found.namespace, found.name) == ("crm", "note")
    assert resolve(tools, "unknown") is None
    assert custom_input('{"input": "a\\nb"}') == "a\nb"
    assert custom_input("not json") == "not json"
    assert custom_input('{"other": 1}') == '{"other": 1}'
    assert not_offered([NAMESPACE, {"type": "web_search"}]) == ["web_search"]


async def test_tool_calls_names_calls_as_declared_and_unwraps_custom_input() -> None:
    closed: list[bool] = []

    async def engine() -> AsyncGenerator[AnyDelta, None]:
        try:
            for d in (
                FunctionCallStart(name="crm__lookup", call_id="a"),
                ArgumentsDelta(text='{"id":1}'),
                EndItem(),
                FunctionCallStart(name="apply_patch", call_id="b"),
                ArgumentsDelta(text='{"input": "*** Begin'),
                ArgumentsDelta(text=' Patch"}'),
                EndItem(),
                TextDelta(text="done"),
            ):
                yield d
        finally:
            closed.append(True)

    got = [d async for d in tool_calls(engine(), offered([NAMESPACE, CUSTOM]))]
    assert got == [
        FunctionCallStart(name="lookup", call_id="a", namespace="crm"),
        ArgumentsDelta(text='{"id":1}'),
        EndItem(),
        FunctionCallStart(name="apply_patch", call_id="b", custom=True),
        InputDelta(text="*** Begin Patch"),
        EndItem(),
        TextDelta(text="done"),
    ]
    assert closed == [True]


@pytest.mark.parametrize("tools", [[], [NAMESPACE]], ids=["no tools", "tools"])
async def test_closing_tool_calls_closes_the_engine_at_once(tools: list[dict[str, Any]]) -> None:
    closed: list[bool] = []

    async def engine() -> AsyncGenerator[AnyDelta, None]:
        try:
            while True:
                yield TextDelta(text="x")
        finally:
            closed.append(True)

    calls = tool_calls(engine(), offered(tools))
    assert await anext(calls) == TextDelta(text="x")
    await calls.aclose()
    assert closed == [True]


def test_an_echoed_function_tool_keeps_the_bytes_stored_logs_have() -> None:
    tool = {"type": "function", "name": "f", "parameters": None}
    echoed = parse(tools=[tool]).response.tools[0]
    assert msgspec.json.encode(echoed) == (
        b'{"type":"function","name":"f","description":null,"parameters":null,"strict":null}'
    )


def test_hosted_tools_can_be_refused_by_the_operator() -> None:
    body = json.dumps({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}).encode()
    with pytest.raises(InvalidRequest) as caught:
        parse_create_body(body, Limits(hosted_tools="refuse"))
    assert (caught.value.param, caught.value.code) == ("tools[0].type", "unsupported_parameter")
    assert "web_search" in caught.value.message


def test_hints_resplog_does_not_act_on_are_accepted_and_kept_in_the_facts() -> None:
    management = [{"type": "compaction", "compact_threshold": 200000}]
    req = parse(context_management=management, prompt_cache_options={"mode": "implicit"})
    assert req.extra["ignored"] == {"prompt_cache_options": {"mode": "implicit"}}
    assert req.extra["context_management"] == management  # acted on: service/prompts/compaction.py
    for bad in ("x", [{"type": "compaction", "compact_threshold": 0}], [{"kind": 1}]):
        with pytest.raises(InvalidRequest) as wrong:
            parse(context_management=bad)
        assert wrong.value.param.startswith("context_management")
    trigger = parse(input=[{"role": "user", "content": "hi"}, {"type": "compaction_trigger"}])
    assert trigger.extra["compaction_trigger"] is True and len(trigger.input) == 1
    with pytest.raises(InvalidRequest) as early:
        parse(input=[{"type": "compaction_trigger"}, {"role": "user", "content": "hi"}])
    assert early.value.param == "input[0]"
    moderation = {"model": "omni-moderation-latest", "policy": {"input": {"mode": "block"}}}
    assert parse(moderation=moderation).extra["ignored"] == {"moderation": moderation}


@pytest.mark.parametrize(
    ("moderation", "param", "code"),
    [
        ("omni", "moderation", "invalid_type"),
        ({}, "moderation.model", "missing_required_parameter"),
        ({"model": "m", "mode": "x"}, "moderation.mode", "unknown_parameter"),
        (
            {"model": "m", "policy": {"input": {"mode": "warn"}}},
            "moderation.policy.input.mode",
            "invalid_value",
        ),
        ({"model": "m", "policy": {"output": "block"}}, "moderation.policy.output", "invalid_type"),
    ],
)
def test_moderation_is_refused_only_in_a_shape_openai_refuses(
    moderation: object, param: str, code: str
) -> None:
    """`moderation` is kept, not run; its shape is openai-python's `Moderation`."""
    with pytest.raises(InvalidRequest) as caught:
        parse(moderation=moderation)
    assert (caught.value.param, caught.value.code) == (param, code)
