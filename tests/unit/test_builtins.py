"""gpt-oss's built-ins as OpenAI's hosted tools (domain/builtins.py): which request tools
offer them, the items and events they make (read back whole by the SDK), the fold's rules
for their steps, taking a loop over (failed, or retried once for an idempotent tool, MCP
calls too), and harmony's rendering of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from openai_harmony import Author, Message, Role, SystemContent

from adapters.cli import main
from adapters.engines.harmony import HarmonyRenderer
from domain import builtins, mcp
from domain.builder.items import CUT_OFF, NOT_RUN
from domain.errors import InvalidTransition
from domain.events import (
    CodeInterpreterCallInterpreting,
    McpCallInProgress,
    OutputItemAdded,
    encode,
)
from domain.fold.replay import replay
from domain.generation import ArgumentsDelta, BrowserCall, EndItem, FunctionCallStart
from domain.objects import CodeInterpreterCall, McpCall, WebSearchCall
from domain.tools import action, builtin_offered, container_id
from service.prompts.engine import as_input
from tests.fakes.prompts import make_prompt, user
from tests.unit.domain_helpers import SCENARIOS, Stream

PY = frozenset({"tool_server:python"})


@pytest.mark.parametrize(
    ("types", "offered"),
    [
        (["web_search"], ["browser.search", "browser.open", "browser.find"]),
        (["web_search_preview"], ["browser.search", "browser.open", "browser.find"]),
        (["code_interpreter"], ["python"]),
        (["file_search", "function"], []),
    ],
)
def test_request_tools_map_onto_the_built_ins(types: list[str], offered: list[str]) -> None:
    tools = builtin_offered([{"type": t} for t in types])
    assert [t.qualified(".") for t in tools] == offered


def test_a_code_interpreter_names_its_container_or_auto() -> None:
    assert container_id([{"type": "code_interpreter", "container": "cntr_1"}]) == "cntr_1"
    assert container_id([{"type": "code_interpreter", "container": {"type": "auto"}}]) == "auto"


def test_browser_calls_become_openai_web_search_actions() -> None:
    assert action("search", '{"query": "q", "topn": 3}') == {"type": "search", "query": "q"}
    assert action("open", '{"id": "https://x.test"}') == {
        "type": "open_page",
        "url": "https://x.test",
    }
    assert action("open", '{"id": 3}') == {"type": "open_page", "url": ""}
    assert action("find", '{"pattern": "p"}') == {"type": "find_in_page", "pattern": "p", "url": ""}
    assert action("search", "not json") == {"type": "search", "query": ""}


def test_the_tool_answers_stay_in_hidden_facts_and_reach_the_model() -> None:
    s = SCENARIOS["builtin_loop"]()
    wire = b"".join(encode(e).data for e in s.events)
    assert "【0†resplog】".encode() not in wire
    assert b'"query": "resplog"' not in wire  # the raw arguments too
    assert replay(s.events).tool_facts == s.state.tool_facts
    out = s.state.response.output  # type: ignore[union-attr]
    search, code, page, cut = out
    assert isinstance(search, WebSearchCall) and search.status == "completed"
    assert isinstance(code, CodeInterpreterCall) and code.outputs == [
        {"type": "logs", "logs": "1\n"}
    ]
    assert isinstance(page, WebSearchCall) and page.status == "failed"
    assert isinstance(cut, CodeInterpreterCall) and cut.status == "failed"
    shown = as_input(out, s.state)
    assert [(type(i).__name__, getattr(i, "name", None)) for i in shown[:4]] == [
        ("InputFunctionCall", "browser.search"),
        ("FunctionCallOutput", None),
        ("InputFunctionCall", "python"),
        ("FunctionCallOutput", None),
    ]
    assert shown[1].output == "【0†resplog】"  # type: ignore[union-attr]
    assert shown[5].output == "no such page"  # type: ignore[union-attr]
    assert as_input(out) == []  # an earlier turn's built-in calls are left out


def _python_in_flight() -> Stream:
    s = Stream.new()
    s.emit(FunctionCallStart(name="python", builtin="python"), ArgumentsDelta(text="x"), EndItem())
    s._apply(builtins.builtin_started(s.state))
    return s


def test_a_built_in_call_completes_only_after_it_was_handed_to_the_server() -> None:
    s = Stream.new()
    s.emit(BrowserCall(name="search", arguments="{}"))
    assert builtins.pending_server_call(s.state) is not None
    before = s.state
    s._apply(builtins.builtin_ended(s.state, output=None, error="refused"))  # failed: fine
    assert s.state.response.output[-1].status == "failed"  # type: ignore[union-attr]
    s.state = before
    with pytest.raises(InvalidTransition):  # completed, never started
        s._apply(builtins.builtin_ended(s.state, output="x", error=None))


def test_a_built_in_call_in_flight_at_a_takeover_is_failed_unless_idempotent() -> None:
    s = _python_in_flight()
    s._apply(mcp.interrupted(s.state))
    code = s.state.response.output[-1]  # type: ignore[union-attr]
    assert isinstance(code, CodeInterpreterCall) and code.status == "failed"
    assert code.outputs == [{"type": "logs", "logs": mcp.WORKER_LOST}]


def test_an_idempotent_call_is_retried_once_and_never_a_second_time() -> None:
    s = _python_in_flight()
    s._apply(mcp.interrupted(s.state, PY))
    assert isinstance(s.events[-1], CodeInterpreterCallInterpreting)
    assert s.state.mcp_step == "retried"
    with pytest.raises(InvalidTransition):
        s._apply(builtins.builtin_started(s.state))  # a third start
    retried = s.state
    s._apply(mcp.interrupted(s.state, PY))  # died again
    assert s.state.response.output[-1].outputs == [  # type: ignore[union-attr]
        {"type": "logs", "logs": mcp.LOST_TWICE}
    ]
    s.state = retried
    s._apply(builtins.builtin_ended(s.state, output="ok", error=None))  # or it returned
    assert s.state.response.output[-1].status == "completed"  # type: ignore[union-attr]


def test_an_idempotent_mcp_call_is_retried_once_too() -> None:
    s = Stream.new()
    s.emit(FunctionCallStart(name="slow", server_label="t"), ArgumentsDelta(text="{}"), EndItem())
    s._apply(mcp.call_started(s.state))
    s._apply(mcp.interrupted(s.state, frozenset({"t:other"})))  # not this tool: failed
    assert s.state.response.output[-1].status == "failed"  # type: ignore[union-attr]
    s = Stream.new()
    s.emit(FunctionCallStart(name="slow", server_label="t"), ArgumentsDelta(text="{}"), EndItem())
    s._apply(mcp.call_started(s.state))
    s._apply(mcp.interrupted(s.state, frozenset({"t:slow"})))
    assert [type(e) for e in s.events].count(McpCallInProgress) == 2
    s._apply(mcp.call_ended(s.state, output="done"))
    call = s.state.response.output[-1]  # type: ignore[union-attr]
    assert isinstance(call, McpCall) and (call.status, call.output) == ("completed", "done")


def test_a_web_search_call_is_added_whole_with_its_arguments_hidden() -> None:
    s = Stream.new()
    s.emit(BrowserCall(name="find", arguments='{"pattern": "kill"}'))
    added = next(e for e in s.events if isinstance(e, OutputItemAdded))
    assert added.facts is not None and added.facts.arguments == '{"pattern": "kill"}'
    assert "facts" not in encode(added).data.decode()


@pytest.fixture
def renderer() -> HarmonyRenderer:
    from datetime import date

    return HarmonyRenderer(today=lambda: date(2025, 6, 28))


def test_harmony_announces_the_built_ins_in_the_system_message(renderer: HarmonyRenderer) -> None:
    tools = builtin_offered([{"type": "web_search"}, {"type": "code_interpreter"}])
    messages = renderer.conversation(make_prompt(tools=tools)).messages
    content = (
        SystemContent.new()
        .with_reasoning_effort(messages[0].content[0].reasoning_effort)
        .with_conversation_start_date("2025-06-28")
        .with_browser_tool()
        .with_python_tool()
    )
    assert messages[0] == Message.from_role_and_content(Role.SYSTEM, content)
    assert [m.author.role for m in messages] == [Role.SYSTEM, Role.USER]  # no functions


def test_harmony_renders_built_in_calls_and_answers_as_gpt_oss_writes_them(
    renderer: HarmonyRenderer,
) -> None:
    s = SCENARIOS["builtin_loop"]()
    tools = builtin_offered([{"type": "web_search"}, {"type": "code_interpreter"}])
    shown = as_input(s.state.response.output[:2], s.state)  # type: ignore[union-attr]
    messages = renderer.conversation(make_prompt([user("Hi"), *shown], tools=tools)).messages
    search, found, code, ran = messages[2:]
    assert (search.recipient, search.channel, search.content_type) == (
        "browser.search",
        "analysis",
        "code",
    )
    assert found.author == Author.new(Role.TOOL, "browser.search")
    assert (code.recipient, code.content[0].text) == ("python", "print(1)")
    assert ran.author == Author.new(Role.TOOL, "python") and ran.channel == "analysis"


def test_a_tool_server_needs_the_sglang_engine_and_idempotent_tools_a_label(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.db"
    db.touch()  # refused before it is opened
    url = ("--database-url", f"sqlite+aiosqlite:///{db}")
    runner = CliRunner()
    done = runner.invoke(main, ["serve", *url, "--tool-server", "http://127.0.0.1:9/mcp"])
    assert done.exit_code == 2 and "sglang engine" in done.output
    done = runner.invoke(main, ["worker", *url, "--mcp-idempotent-tools", "python"])
    assert done.exit_code == 2 and "server_label:tool" in done.output


def test_a_call_cut_off_by_a_cancel_says_whether_it_had_been_handed_over() -> None:
    s = _python_in_flight()
    s.cancel()
    code = s.state.response.output[-1]  # type: ignore[union-attr]
    assert isinstance(code, CodeInterpreterCall) and code.status == "incomplete"
    assert code.outputs == [{"type": "logs", "logs": CUT_OFF}]
    s = Stream.new()
    s.emit(BrowserCall(name="search", arguments="{}"))
    s.cancel()
    search = s.state.response.output[-1]  # type: ignore[union-attr]
    assert isinstance(search, WebSearchCall) and search.status == "failed"  # OpenAI's statuses
    assert s.state.tool_facts[search.id].output == NOT_RUN


def test_the_test_tool_servers_python_is_bounded_in_time_and_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tests/fakes/mcp_server.py's `python`: a fresh interpreter, cut at its output cap,
    stopped at its timeout."""
    from tests.fakes import mcp_server

    assert mcp_server._run_python("print(6 * 7)") == "42\n"
    big = mcp_server._run_python("print('x' * 100000)")
    assert big.endswith(f"[output cut at {mcp_server.PYTHON_MAX_OUTPUT} characters]")
    assert len(big) < mcp_server.PYTHON_MAX_OUTPUT + 100
    monkeypatch.setattr(mcp_server, "PYTHON_TIMEOUT_S", 0.5)
    assert mcp_server._run_python("import time; time.sleep(30)") == "Timed out after 0.5 s."
    assert "ZeroDivisionError" in mcp_server._run_python("1 / 0")
