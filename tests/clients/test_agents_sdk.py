"""The OpenAI Agents SDK (`openai-agents`): `Runner.run` and `Runner.run_streamed` of an agent
with a function tool, on `OpenAIResponsesModel` with a client whose base URL is resplog, as
its docs show for another provider; tracing is off (it would export to OpenAI)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool

from adapters.engines.harmony.encoding import gpt_oss_encoding
from tests.clients.conftest import ANSWER, WEATHER_PROMPT, ClientServer
from tests.e2e.test_mcp import ToolServer, _start_tools
from tests.fakes.process import FakeProcess

located: list[str] = []


@function_tool
def get_weather(location: str) -> str:
    """Current weather.

    Args:
        location: The city.
    """
    located.append(location)
    return f"20C and sunny in {location}"


def weather_agent(srv: ClientServer, client: openai.AsyncOpenAI) -> Agent:
    model = OpenAIResponsesModel(model=srv.model, openai_client=client)
    return Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])


def assert_tool_loop(srv: ClientServer, final_output: object) -> None:
    assert located == ["Tokyo"]
    assert final_output == ANSWER
    srv.traffic.assert_all_ok()
    _, second = (r["body"] for r in srv.traffic.responses_requests())
    kinds = [i.get("type", "message") for i in second["input"]]
    assert "function_call_output" in kinds, kinds  # the whole history, sent back
    assert srv.verify()["ok"] is True


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_run_with_a_function_tool(resplog_for_clients: ClientServer, streamed: bool) -> None:
    srv = resplog_for_clients
    located.clear()
    config = RunConfig(tracing_disabled=True)
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0) as c:
        agent = weather_agent(srv, c)
        if streamed:
            result = Runner.run_streamed(agent, WEATHER_PROMPT, run_config=config)
            kinds = {event.type async for event in result.stream_events()}
            assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
        else:
            result = await Runner.run(agent, WEATHER_PROMPT, run_config=config)  # type: ignore[assignment]
    assert_tool_loop(srv, result.final_output)
    assert json.dumps(result.to_input_list())


async def test_run_chained_by_previous_response_id(resplog_for_clients: ClientServer) -> None:
    """`auto_previous_response_id`: the second model call sends only the tool's output and
    `previous_response_id`; resplog continues the stored response from its log."""
    srv = resplog_for_clients
    located.clear()
    config = RunConfig(tracing_disabled=True)
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0) as c:
        result = await Runner.run(
            weather_agent(srv, c), WEATHER_PROMPT, run_config=config, auto_previous_response_id=True
        )
    assert located == ["Tokyo"] and result.final_output == ANSWER
    srv.traffic.assert_all_ok()
    first, second = srv.traffic.responses_requests()
    assert second["body"]["previous_response_id"] == first["response_id"]
    assert [i["type"] for i in second["body"]["input"]] == ["function_call_output"]
    assert srv.verify()["ok"] is True


async def test_run_on_a_server_conversation(resplog_for_clients: ClientServer) -> None:
    """`conversation_id=`: the SDK sends each model call with `conversation` and only the new
    items; resplog gives the model the conversation and adds each call's items to it."""
    srv = resplog_for_clients
    located.clear()
    config = RunConfig(tracing_disabled=True)
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0) as c:
        conv = await c.conversations.create()
        result = await Runner.run(
            weather_agent(srv, c), WEATHER_PROMPT, run_config=config, conversation_id=conv.id
        )
        items = [i async for i in c.conversations.items.list(conv.id, order="asc")]
    assert located == ["Tokyo"] and result.final_output == ANSWER
    srv.traffic.assert_all_ok()
    assert all(r["body"]["conversation"] == conv.id for r in srv.traffic.responses_requests())
    kinds = [i.type for i in items]
    assert "function_call" in kinds and "function_call_output" in kinds
    assert kinds[0] == "message" and kinds[-1] == "message"  # the question ... the answer
    assert srv.verify()["ok"] is True


async def test_an_openai_conversations_session(resplog_for_clients: ClientServer) -> None:
    """`OpenAIConversationsSession`: the session's memory is a resplog conversation (created,
    read and appended through `client.conversations`); a second run remembers the first."""
    from agents import OpenAIConversationsSession

    srv = resplog_for_clients
    located.clear()
    config = RunConfig(tracing_disabled=True)
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0) as c:
        session = OpenAIConversationsSession(openai_client=c)
        first = await Runner.run(
            weather_agent(srv, c), WEATHER_PROMPT, run_config=config, session=session
        )
        remembered = await session.get_items()
        await Runner.run(weather_agent(srv, c), "Thanks!", run_config=config, session=session)
        after = await session.get_items()
    assert first.final_output == ANSWER
    assert len(after) > len(remembered) > 0
    srv.traffic.assert_all_ok()
    assert srv.verify()["ok"] is True


async def test_a_session_keeps_the_items_a_run_with_hosted_tools_adds(
    resplog_for_clients: ClientServer,
) -> None:
    """A run whose model used hosted tools (here, as OpenAI would answer: a web search, an
    MCP listing and call) hands the session every item, and `OpenAIConversationsSession`
    adds them all through `conversations.items.create`: taken, and read back as added."""
    from agents import OpenAIConversationsSession

    srv = resplog_for_clients
    items: list[Any] = [
        {"role": "user", "content": "What's new in tea?"},
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "tea news"},
        },
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs", "tools": []},
        {
            "type": "mcp_call",
            "id": "mcp_1",
            "server_label": "docs",
            "name": "search",
            "arguments": "{}",
            "output": "nothing new",
        },
        {"type": "message", "role": "assistant", "content": "Nothing new."},
    ]
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0) as c:
        session = OpenAIConversationsSession(openai_client=c)
        await session.add_items(items)
        kept = await session.get_items()
    srv.traffic.assert_all_ok()
    assert [i.get("type", "message") for i in kept] == [
        "message",
        "web_search_call",
        "mcp_list_tools",
        "mcp_call",
        "message",
    ]
    assert kept[1] == items[1]  # set aside: kept as sent
    # An MCP call is an input item of its own, listed as OpenAI lists one: what was sent,
    # and its other fields null.
    assert {k: v for k, v in kept[3].items() if v is not None} == items[3]


async def test_a_compaction_session_compacts_through_the_server(
    resplog_for_clients: ClientServer,
) -> None:
    """`OpenAIResponsesCompactionSession` over a local session: after each run it calls
    `responses.compact` (here on every run), keeps the sealed `compaction` item it gets back
    instead of the history, and passes it as input on the next run, which the server opens
    and gives the model in the history's place."""
    from agents import SQLiteSession
    from agents.memory.openai_responses_compaction_session import (
        OpenAIResponsesCompactionSession,
    )

    srv = resplog_for_clients
    config = RunConfig(tracing_disabled=True)
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0) as c:
        session = OpenAIResponsesCompactionSession(
            "compacted",
            SQLiteSession("compacted"),
            client=c,
            model=srv.model,
            should_trigger_compaction=lambda _: True,
        )
        agent = Agent(
            name="plain",
            instructions="Answer briefly.",
            model=OpenAIResponsesModel(model=srv.model, openai_client=c),
        )
        await Runner.run(agent, "Remember the word teapot.", run_config=config, session=session)
        kept = await session.get_items()
        second = await Runner.run(agent, "Which word?", run_config=config, session=session)
    srv.traffic.assert_all_ok()
    assert [i.get("type", "message") for i in kept][-1] == "compaction"
    paths = [r["path"] for r in srv.traffic.requests()]
    assert paths.count("/v1/responses/compact") == 2
    creates = [r for r in srv.traffic.requests() if r["path"] == "/v1/responses"]
    assert "compaction" in [i.get("type") for i in creates[-1]["body"]["input"]]
    assert second.final_output
    assert srv.verify()["ok"] is True


async def test_the_websocket_model_runs_the_tool_loop_over_one_socket(
    resplog_for_clients: ClientServer,
) -> None:
    """`OpenAIResponsesWSModel`: the SDK's WebSocket transport (`responses.connect()`), a
    run, a streamed run and a chained run of the tool loop. Each model call is a
    `response.create` message, not a POST (the server counts none), and every response is
    in the log. It talks to the server itself: the logging proxy carries no WebSocket."""
    from agents.models.openai_responses import OpenAIResponsesWSModel

    srv = resplog_for_clients
    located.clear()
    config = RunConfig(tracing_disabled=True)
    url = f"{srv.server.base_url}/v1"
    before = await posts(srv)
    async with openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0) as c:
        model = OpenAIResponsesWSModel(model=srv.model, openai_client=c)
        agent = Agent(
            name="weather", instructions="Answer briefly.", model=model, tools=[get_weather]
        )
        ran = await Runner.run(agent, WEATHER_PROMPT, run_config=config)
        streamed = Runner.run_streamed(agent, WEATHER_PROMPT, run_config=config)
        assert "raw_response_event" in {e.type async for e in streamed.stream_events()}
        chained = await Runner.run(
            agent, WEATHER_PROMPT, run_config=config, auto_previous_response_id=True
        )
        await model.close()
    assert ran.final_output == streamed.final_output == chained.final_output == ANSWER
    assert located == ["Tokyo"] * 3
    assert await posts(srv) == before
    assert srv.verify()["ok"] is True


async def posts(srv: ClientServer) -> float:
    """How many `POST /v1/responses` the server has answered (its own metrics)."""
    async with httpx.AsyncClient(base_url=srv.server.base_url) as http:
        text = (await http.get("/metrics")).text
    found = re.search(
        r'resplog_http_requests_total\{method="POST",route="/v1/responses",status="200"\} (\S+)',
        text,
    )
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def mcp_tools(tmp_path: Path) -> Iterator[ToolServer]:
    """A real MCP server (the `mcp` package) of `echo` and `shout`, for `HostedMCPTool`."""
    tools = _start_tools(tmp_path)
    yield tools
    tools.process.kill()
    tools.process.wait()


def hosted_mcp(tools: ToolServer, approval: str, on_request: Any = None) -> Any:
    from agents import HostedMCPTool

    config: Any = {
        "type": "mcp",
        "server_label": "testtools",
        "server_url": tools.url,
        "require_approval": approval,
    }
    return HostedMCPTool(tool_config=config, on_approval_request=on_request)


async def test_a_hosted_mcp_run_passed_back_shows_the_next_turn_its_calls(
    resplog_for_clients: ClientServer, fake_sglang: FakeProcess, mcp_tools: ToolServer
) -> None:
    """An agent with a `HostedMCPTool` (the server runs the loop), its history kept by the
    SDK (the default: `to_input_list()` passed back): the next turn sends the first turn's
    `mcp_call` items back, and its model is shown each call and its result, as OpenAI's
    is. (They were set aside, so the next turn never saw what the tools said.)"""
    srv, tools = resplog_for_clients, mcp_tools
    config = RunConfig(tracing_disabled=True)
    mcp = hosted_mcp(tools, "never")
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0) as c:
        model = OpenAIResponsesModel(model=srv.model, openai_client=c)
        agent = Agent(name="tools", instructions="Use the tools.", model=model, tools=[mcp])
        first = await Runner.run(agent, "Echo, then shout. [fake:mcp_loop]", run_config=config)
        assert first.final_output == "Done after two tools."
        history = first.to_input_list()
        second = await Runner.run(
            agent, [*history, {"role": "user", "content": "What did they say?"}], run_config=config
        )
    assert second.final_output
    srv.traffic.assert_all_ok()
    sent = srv.traffic.responses_requests()[-1]["body"]["input"]
    assert [i["type"] for i in sent if i.get("type") == "mcp_call"] == ["mcp_call"] * 2
    # The server's list came back too: the second turn offers its tools from it and
    # lists the server no more.
    assert [i.get("type") for i in sent].count("mcp_list_tools") == 1

    def listed(run: Any) -> list[str]:
        return [i.type for r in run.raw_responses for i in r.output if i.type == "mcp_list_tools"]

    assert (listed(first), listed(second)) == (["mcp_list_tools"], [])
    assert tools.calls() == ["echo", "shout"]  # shown to the next turn, never run again
    enc = gpt_oss_encoding()
    prompt = enc.decode(fake_sglang.log()["requests"][-1]["input_ids"])
    told = "<|start|>functions.{} to=assistant<|channel|>commentary<|message|>{}<|end|>"
    assert told.format("echo", "echo: one") in prompt
    assert told.format("shout", "TWO") in prompt
    assert srv.verify()["ok"] is True


async def test_a_hosted_mcp_approval_runs_the_call_in_the_sdks_own_history(
    resplog_for_clients: ClientServer, mcp_tools: ToolServer
) -> None:
    """A `HostedMCPTool` whose calls need approval, answered by `on_approval_request`, its
    history kept by the SDK (the default): the SDK's next request sends the approval
    request back with its `mcp_approval_response`, and the approved call runs there, once
    each, until the model answers."""
    srv, tools = resplog_for_clients, mcp_tools
    config = RunConfig(tracing_disabled=True)
    asked: list[str] = []

    def approve(request: Any) -> Any:
        asked.append(request.data.name)
        return {"approve": True}

    mcp = hosted_mcp(tools, "always", approve)
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0) as c:
        model = OpenAIResponsesModel(model=srv.model, openai_client=c)
        agent = Agent(name="tools", instructions="Use the tools.", model=model, tools=[mcp])
        result = await Runner.run(
            agent, "Echo, then shout. [fake:mcp_loop]", run_config=config, max_turns=6
        )
    assert result.final_output == "Done after two tools."
    assert asked == ["echo", "shout"]
    assert tools.calls() == ["echo", "shout"]
    srv.traffic.assert_all_ok()
    assert srv.verify()["ok"] is True


async def test_hosted_mcp_approvals_in_an_openai_conversations_session(
    resplog_for_clients: ClientServer, mcp_tools: ToolServer
) -> None:
    """The same approvals with an `OpenAIConversationsSession`: the session adds each step's
    items (the approval requests and answers among them) to a server conversation and sends
    them all back as input. The calls run once, the conversation lists each request, answer
    and call as itself, and the next run, sent the whole history again, runs nothing."""
    from agents import OpenAIConversationsSession

    srv, tools = resplog_for_clients, mcp_tools
    config = RunConfig(tracing_disabled=True)
    mcp = hosted_mcp(tools, "always", lambda _: {"approve": True})
    async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="unused", max_retries=0) as c:
        session = OpenAIConversationsSession(openai_client=c)
        model = OpenAIResponsesModel(model=srv.model, openai_client=c)
        agent = Agent(name="tools", instructions="Use the tools.", model=model, tools=[mcp])
        first = await Runner.run(
            agent,
            "Echo, then shout. [fake:mcp_loop]",
            run_config=config,
            max_turns=6,
            session=session,
        )
        kept = [i.get("type", "message") for i in await session.get_items()]
        second = await Runner.run(agent, "And now?", run_config=config, session=session)
    assert first.final_output == "Done after two tools." and second.final_output
    assert kept.count("mcp_approval_request") == kept.count("mcp_approval_response") == 2
    assert kept.count("mcp_call") == 2
    assert tools.calls() == ["echo", "shout"]
    srv.traffic.assert_all_ok()
    assert srv.verify()["ok"] is True
