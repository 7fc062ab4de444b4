"""LangChain (`langchain-openai`): `ChatOpenAI(use_responses_api=True)` with a base URL of
resplog, a bound function tool answered with a `ToolMessage`, and a hosted tool bound as a
dict (`web_search_preview`), which resplog accepts and does not offer to the model."""

from __future__ import annotations

import operator
from functools import reduce
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.clients.conftest import ANSWER, WEATHER_PROMPT, ClientServer


@tool
def get_weather(location: str) -> str:
    """Current weather."""
    return f"20C and sunny in {location}"


def chat(srv: ClientServer) -> ChatOpenAI:
    return ChatOpenAI(
        model=srv.model, base_url=srv.base_url, api_key="unused", use_responses_api=True
    )


def ask(llm: Runnable[Any, Any], history: list[Any], streamed: bool) -> Any:
    """The model's message, from `invoke` or from `stream`'s chunks added up."""
    if not streamed:
        return llm.invoke(history)
    return reduce(operator.add, llm.stream(history))


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
def test_a_bound_function_tool_round_trip(
    resplog_for_clients: ClientServer, streamed: bool
) -> None:
    srv = resplog_for_clients
    llm = chat(srv).bind_tools([get_weather])
    history: list[Any] = [HumanMessage(WEATHER_PROMPT)]
    asked = ask(llm, history, streamed)
    (call,) = asked.tool_calls
    assert call["name"] == "get_weather" and call["args"] == {"location": "Tokyo"}
    history += [asked, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
    answered = ask(llm, history, streamed)
    assert answered.text == ANSWER
    srv.traffic.assert_all_ok()
    assert srv.verify()["ok"] is True


def test_a_hosted_web_search_tool_is_accepted(resplog_for_clients: ClientServer) -> None:
    srv = resplog_for_clients
    llm = chat(srv).bind_tools([{"type": "web_search_preview"}])
    answered = llm.invoke("Hello!")
    assert answered.text == "Hello! How can I help you today?"  # the fake's plain answer
    (sent,) = srv.traffic.responses_requests()
    assert sent["body"]["tools"] == [{"type": "web_search_preview"}]
    srv.traffic.assert_all_ok()
