"""gpt-oss's built-in tools end to end (docs/mcp.md, "Built-in tools"): `resplog serve
--tool-server` pointed at the test MCP server (tests/fakes/mcp_server.py: `browser.*` over a
local corpus, `python` in a subprocess), the sglang stand-in playing gpt-oss's harmony
`to=browser.search` / `to=python` messages, and the official SDK reading OpenAI's
`web_search_call` and `code_interpreter_call` items and events."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from adapters.engines.harmony import gpt_oss_encoding
from tests.e2e.cluster import fold_check, start_worker, stop
from tests.e2e.conftest import RESPLOG, Server, start_server, stop_server
from tests.e2e.test_mcp import KEY, ToolServer, _start_tools
from tests.fakes.plugin import *  # noqa: F403
from tests.fakes.process import FakeProcess

BUILTINS = [{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}]


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[ToolServer]:
    ts = _start_tools(tmp_path)
    yield ts
    ts.process.kill()
    ts.process.wait()


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolServer]:
    ts = _start_tools(tmp_path_factory.mktemp("tool-server"))
    yield ts
    ts.process.kill()
    ts.process.wait()


def _engine(fake: FakeProcess) -> tuple[str, ...]:
    return ("--engine", "sglang", "--engine-url", fake.url)


@pytest.fixture(scope="module")
def builtin_server(
    fake_sglang_server: FakeProcess,
    tool_server: ToolServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("builtins")
    srv = start_server(
        f"sqlite+aiosqlite:///{tmp / 'resplog.db'}",
        "sqlite",
        tmp / "server.log",
        "--tool-server",
        tool_server.url,
        # The hosted tools the built-ins stand for are run, so not refused; the others are.
        "--hosted-tools",
        "refuse",
        engine=_engine(fake_sglang_server),
    )
    yield srv
    stop_server(srv)


def _prompts(fake: FakeProcess) -> list[str]:
    enc = gpt_oss_encoding()
    return [enc.decode(r["input_ids"]) for r in fake.log()["requests"]]


def _sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def test_browser_and_python_run_through_the_tool_server_as_openai_items(
    builtin_server: Server, fake_sglang: FakeProcess, tool_server: ToolServer
) -> None:
    before = tool_server.calls()
    with openai.OpenAI(base_url=f"{builtin_server.base_url}/v1", api_key="unused") as client:
        model = client.models.list().data[0].id
        live = list(
            client.responses.create(
                model=model,
                input="Look it up and compute. [fake:builtin_loop]",
                tools=BUILTINS,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_obfuscation": False},  # the log's events as they are
            )
        )
    final = live[-1].response  # type: ignore[union-attr]
    assert final.status == "completed", final.error
    kinds = [i.type for i in final.output if i.type != "reasoning"]
    assert kinds == ["web_search_call", "code_interpreter_call", "web_search_call", "message"]
    search, code, page = (i for i in final.output if i.type.endswith("_call"))
    assert search.action.type == "search" and search.action.query == "resplog durable"  # type: ignore[union-attr]
    assert page.action.type == "open_page"  # type: ignore[union-attr]
    assert page.action.url == "https://example.test/resplog"  # type: ignore[union-attr]
    assert (code.code, code.container_id) == ("print(6 * 7)", "auto")  # type: ignore[union-attr]
    assert code.outputs[0].type == "logs" and code.outputs[0].logs == "42\n"  # type: ignore[union-attr]
    assert all(i.status == "completed" for i in (search, code, page))
    assert final.output_text == "The answer is 42; resplog keeps a log."
    assert tool_server.calls()[len(before) :] == ["browser.search", "python", "browser.open"]

    types = [e.type for e in live]
    ws = [t for t in types if t.startswith("response.web_search_call.")]
    assert (
        ws
        == [f"response.web_search_call.{s}" for s in ("in_progress", "searching", "completed")] * 2
    )
    ci = [t for t in types if t.startswith("response.code_interpreter_call")]
    assert ci[0] == "response.code_interpreter_call.in_progress"
    assert "response.code_interpreter_call_code.delta" in ci
    assert ci[-3:] == [
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
    ]
    # What the model saw: the built-ins announced in harmony's own words in the system
    # message, never as functions, and each answer rendered back as the tool's message.
    prompts = _prompts(fake_sglang)
    assert len(prompts) == 4
    system = prompts[0].split("<|end|>", 1)[0]
    assert "namespace browser {" in system and "## python" in system
    assert "namespace functions" not in prompts[0]
    assert (
        "<|start|>browser.search to=assistant<|channel|>analysis<|message|>【0†resplog"
        in prompts[1]
    )
    assert "<|start|>python to=assistant<|channel|>analysis<|message|>42\n<|end|>" in prompts[2]
    assert "<|start|>browser.open to=assistant" in prompts[3]
    # The replay is the live stream, byte for byte in meaning; the tool's hidden answers
    # (the model's input) are not in it.
    replay = _sse(httpx.get(f"{builtin_server.base_url}/v1/responses/{final.id}/events").text)
    assert replay == [e.to_dict() for e in live]
    assert "【0†" not in json.dumps(replay)
    # The admin views show each step.
    db = ("--database-url", builtin_server.database_url)
    events = _cli("events", final.id, *db)
    assert 'web_search_call search("resplog durable") completed' in events
    assert 'code_interpreter_call python("print(6 * 7)") -> "42\\n" completed' in events
    assert 'python("print(6 * 7)")' in _cli("conversation", final.id, *db)
    _cli("verify", "--all", *db)
    request = json.loads(_cli("events", final.id, "--json", *db).splitlines()[0])
    assert "tools_not_offered" not in request["facts"]["extra"]  # they were offered


def test_with_a_tool_server_refuse_still_refuses_the_hosted_tools_it_does_not_run(
    builtin_server: Server,
) -> None:
    with openai.OpenAI(base_url=f"{builtin_server.base_url}/v1", api_key="unused") as client:
        model = client.models.list().data[0].id
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model=model, input="hi", tools=[{"type": "file_search", "vector_store_ids": []}]
            )
    assert refused.value.body["param"] == "tools[0].type"  # type: ignore[index]


def test_without_a_tool_server_the_hosted_tools_are_echoed_not_offered(
    fake_sglang: FakeProcess, tmp_path: Path
) -> None:
    srv = start_server(
        f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
        "sqlite",
        tmp_path / "s.log",
        engine=_engine(fake_sglang),
    )
    try:
        with openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused") as client:
            model = client.models.list().data[0].id
            r = client.responses.create(
                model=model,
                input="Hello [fake:reasoning_final]",
                tools=BUILTINS,  # type: ignore[arg-type]
            )
    finally:
        stop_server(srv)
    assert r.status == "completed"
    assert [t.type for t in r.tools] == ["web_search", "code_interpreter"]
    assert "browser" not in _prompts(fake_sglang)[0]


def _cli(*args: str) -> str:
    import subprocess

    done = subprocess.run([RESPLOG, *args], capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


TTL = ("--lease-ttl-s", "3", "--reasoning-key", KEY)


def _killed_mid_python(
    url: str, tmp: Path, tools: ToolServer, fake: FakeProcess, *survivor_flags: str
) -> tuple[Any, str]:
    """A loop whose python call is in flight when its worker is killed -9; another worker
    (with `survivor_flags`) takes it over. The final response, and the survivor's log."""
    engine = (*_engine(fake), "--tool-server", tools.url)
    api = start_server(
        url, "postgres", tmp / "api.log", "--workers", "0", *TTL, engine=_engine(fake)
    )
    victim = start_worker(url, tmp / "victim.log", *TTL, *engine)
    survivor = None
    try:
        client = openai.OpenAI(base_url=f"{api.base_url}/v1", api_key="unused", max_retries=0)
        r = client.responses.create(
            model=client.models.list().data[0].id,
            input="Survive this. [fake:builtin_gate]",
            background=True,
            tools=BUILTINS,  # type: ignore[arg-type]
        )
        deadline = time.monotonic() + 60
        while tools.calls() != ["browser.search", "python"]:
            assert time.monotonic() < deadline, tools.calls()
            time.sleep(0.05)
        stop(victim.process, victim.log_file, kill=True)
        tools.gate.touch()  # a retried call may return now
        survivor = start_worker(url, tmp / "survivor.log", *TTL, *engine, *survivor_flags)
        deadline = time.monotonic() + 60
        while (final := client.responses.retrieve(r.id)).status in ("queued", "in_progress"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        live = list(client.responses.retrieve(r.id, stream=True, include_obfuscation=False))
        replay = _sse(httpx.get(f"{api.base_url}/v1/responses/{r.id}/events").text)
        assert replay == [e.to_dict() for e in live]
        assert fold_check(url).status[r.id] == final.status
        _cli("verify", "--all", "--database-url", url)
        return final, survivor.log_text()
    finally:
        tools.gate.touch()
        if survivor is not None:
            stop(survivor.process, survivor.log_file)
        stop_server(api)


def test_a_worker_killed_during_a_python_call_is_taken_over_and_each_tool_runs_once(
    fresh_pg: Any, tmp_path: Path, tools: ToolServer, fake_sglang: FakeProcess
) -> None:
    final, log = _killed_mid_python(fresh_pg(), tmp_path, tools, fake_sglang)
    assert final.status == "completed", final.error
    search, code, page = (i for i in final.output if i.type.endswith("_call"))
    assert search.status == "completed" and page.status == "completed"
    assert code.status == "failed"
    assert "stopped before the call returned" in code.outputs[0].logs
    assert final.output[-1].type == "message"
    assert tools.calls() == ["browser.search", "python", "browser.open"]  # each once
    assert "took over the tool loop" in log


def test_an_idempotent_tool_in_flight_at_the_kill_is_retried_once(
    fresh_pg: Any, tmp_path: Path, tools: ToolServer, fake_sglang: FakeProcess
) -> None:
    flags = ("--mcp-idempotent-tools", "tool_server:python")
    final, _ = _killed_mid_python(fresh_pg(), tmp_path, tools, fake_sglang, *flags)
    assert final.status == "completed", final.error
    code = next(i for i in final.output if i.type == "code_interpreter_call")
    assert code.status == "completed" and code.outputs[0].logs == "42\n"
    assert tools.calls() == ["browser.search", "python", "python", "browser.open"]


def test_a_built_in_loop_in_a_conversation_leaves_its_answer_there(
    builtin_server: Server, fake_sglang: FakeProcess
) -> None:
    """A conversation keeps the question, the answer (and reasoning), and the built-in
    calls set aside: listed as the response made them, shown to no model; their answers
    stay hidden in their response's log."""
    with openai.OpenAI(base_url=f"{builtin_server.base_url}/v1", api_key="unused") as client:
        conv = client.conversations.create()
        r = client.responses.create(
            model=client.models.list().data[0].id,
            input="Look it up. [fake:builtin_loop]",
            conversation=conv.id,
            tools=BUILTINS,  # type: ignore[arg-type]
        )
        assert r.status == "completed", r.error
        items = list(client.conversations.items.list(conv.id, order="asc"))
    kinds = [i.type for i in items if i.type != "reasoning"]
    made = [i for i in r.output if i.type in ("web_search_call", "code_interpreter_call")]
    assert made and kinds == ["message", *(i.type for i in made), "message"]
    listed = [i for i in items if i.type in ("web_search_call", "code_interpreter_call")]
    assert [i.model_dump() for i in listed] == [i.model_dump() for i in made]
    assert items[-1].content[0].text == "The answer is 42; resplog keeps a log."  # type: ignore[union-attr]
