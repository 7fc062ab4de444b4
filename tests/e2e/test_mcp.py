"""`mcp` tools end to end: a real MCP server process (tests/fakes/mcp_server.py, the
official `mcp` package), a real resplog server, the official `openai` SDK, and the scripted
engine scripting the model's calls (metadata `scripted_calls`). The MCP server counts every
call in a file, so "run exactly once" is checked across processes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import openai
import pytest

from tests.e2e.cluster import fold_check, start_worker, stop
from tests.e2e.conftest import (
    LOOPBACK_MCP,
    RESPLOG,
    Server,
    free_port,
    start_server,
    stop_server,
)
from tests.fakes.plugin import *  # noqa: F403
from tests.fakes.process import ROOT, FakeProcess

SECRET = "tok-3f1c9a7e-never-in-the-log"


@dataclass
class ToolServer:
    url: str
    calls_path: Path
    gate: Path
    process: subprocess.Popen[bytes]

    def calls(self) -> list[str]:
        if not self.calls_path.exists():
            return []
        return self.calls_path.read_text().split()


def _start_tools(tmp: Path, *extra: str) -> ToolServer:
    port = free_port()
    calls, gate = tmp / "calls.txt", tmp / "gate"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.mcp_server",
            "--port",
            str(port),
            "--calls",
            str(calls),
            "--gate",
            str(gate),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError("the MCP server did not start")
    return ToolServer(f"http://127.0.0.1:{port}/mcp", calls, gate, proc)


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[ToolServer]:
    ts = _start_tools(tmp_path, "--auth", f"Bearer {SECRET}")
    yield ts
    ts.process.kill()
    ts.process.wait()


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("mcp-server")
    srv = start_server(
        f"sqlite+aiosqlite:///{tmp / 'resplog.db'}",
        "sqlite",
        tmp / "server.log",
        "--mcp-call-timeout-s",
        "3",
        "--mcp-max-output-bytes",
        "10000",
        "--mcp-max-list-bytes",
        "50000",
        *LOOPBACK_MCP,
    )
    yield srv
    stop_server(srv)


@pytest.fixture
def sdk(mcp_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{mcp_server.base_url}/v1", api_key="unused", max_retries=0, timeout=60
    ) as c:
        yield c


def _tool(ts: ToolServer, **more: object) -> dict[str, object]:
    return {
        "type": "mcp",
        "server_label": "testtools",
        "server_url": ts.url,
        "require_approval": "never",
        "authorization": SECRET,
        **more,
    }


def test_three_step_loop_streams_openai_events(sdk: openai.OpenAI, tools: ToolServer) -> None:
    events = list(
        sdk.responses.create(
            model="scripted",
            input="loop three times",
            tools=[_tool(tools)],  # type: ignore[list-item]
            metadata={"scripted_calls": "echo,shout,echo"},
            stream=True,
        )
    )
    types = [e.type for e in events]
    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "completed"
    kinds = [item.type for item in final.output]
    assert kinds.count("mcp_list_tools") == 1
    calls = [item for item in final.output if item.type == "mcp_call"]
    assert [c.name for c in calls] == ["echo", "shout", "echo"]
    assert all(c.status == "completed" and c.error is None for c in calls)
    assert calls[0].output.startswith("echo: ")
    assert calls[1].output == calls[1].output.upper()
    assert final.output[-1].type == "message"
    assert tools.calls() == ["echo", "shout", "echo"]
    for t in (
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
    ):
        assert t in types, t
    assert types.count("response.mcp_call.completed") == 3
    # The secret went to the MCP server (it refuses requests without it) but is echoed
    # only redacted.
    echoed = final.tools[0]
    assert echoed.authorization == "<redacted>"  # type: ignore[union-attr]


def _calls(response: object) -> list[object]:
    return [i for i in response.output if i.type == "mcp_call"]  # type: ignore[attr-defined]


def test_allowed_tools_hides_the_others_from_the_model(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    r = sdk.responses.create(
        model="scripted",
        input="only echo",
        tools=[_tool(tools, allowed_tools=["echo"])],  # type: ignore[list-item]
        # The script asks for a tool that is not allowed: the engine is never offered it,
        # so it answers instead (the scripted engine calls only offered tools).
        metadata={"scripted_calls": "secret_tool"},
    )
    assert r.status == "completed"
    listed = next(i for i in r.output if i.type == "mcp_list_tools")
    assert "secret_tool" in [t.name for t in listed.tools]  # listed, as OpenAI lists them
    assert _calls(r) == []
    assert "secret_tool" not in tools.calls()


def test_read_only_filters_take_the_tools_that_say_they_change_nothing(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    # `echo` says it changes nothing (MCP's `readOnlyHint`); `shout` gives no hint, so it
    # may change something.
    reads = sdk.responses.create(
        model="scripted",
        input="reads only",
        tools=[_tool(tools, allowed_tools={"read_only": True})],  # type: ignore[list-item]
        metadata={"scripted_calls": "shout"},  # not offered: the model answers instead
    )
    assert reads.status == "completed" and _calls(reads) == []
    listed = next(i for i in reads.output if i.type == "mcp_list_tools")
    hints = {t.name: t.annotations for t in listed.tools}  # type: ignore[union-attr]
    assert hints["echo"] == {"readOnlyHint": True}  # as the server sent it
    asked = sdk.responses.create(
        model="scripted",
        input="reads unasked",
        tools=[_tool(tools, require_approval={"never": {"read_only": True}})],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo,shout"},
    )
    steps = [i.type for i in asked.output if i.type in ("mcp_call", "mcp_approval_request")]
    assert steps == ["mcp_call", "mcp_approval_request"]
    (echo,) = _calls(asked)
    assert echo.status == "completed" and echo.name == "echo"  # type: ignore[attr-defined]
    request = next(i for i in asked.output if i.type == "mcp_approval_request")
    assert request.name == "shout"  # type: ignore[union-attr]
    assert tools.calls() == ["echo"]


def test_a_failing_tool_is_a_failed_call_and_the_model_goes_on(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    r = sdk.responses.create(
        model="scripted",
        input="fail then echo",
        tools=[_tool(tools)],  # type: ignore[list-item]
        metadata={"scripted_calls": "boom,echo"},
    )
    assert r.status == "completed"
    boom, echo = _calls(r)
    assert boom.status == "failed" and boom.error is not None  # type: ignore[attr-defined]
    assert echo.status == "completed"  # type: ignore[attr-defined]
    assert tools.calls() == ["boom", "echo"]


def test_a_result_that_is_not_text_is_shown_as_text(sdk: openai.OpenAI, tools: ToolServer) -> None:
    r = sdk.responses.create(
        model="scripted",
        input="a note",  # the script passes it as each call's `text`
        tools=[_tool(tools)],  # type: ignore[list-item]
        metadata={"scripted_calls": "blocks,structured"},
    )
    blocks, structured = _calls(r)
    # An embedded text resource is its text; what no model here can read is named.
    assert blocks.output.splitlines() == [  # type: ignore[attr-defined]
        "a note",
        "[resource link report: https://example.com/r.pdf]",
        "[image (image/png), not shown]",
    ]
    assert json.loads(structured.output) == {"echo": "a note", "n": 1}  # type: ignore[attr-defined]


def test_a_hanging_tool_and_a_huge_output_are_failed_calls_never_a_stuck_response(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    r = sdk.responses.create(
        model="scripted",
        input="hang",
        tools=[_tool(tools)],  # type: ignore[list-item]
        metadata={"scripted_calls": "hang,garbage"},
    )
    assert r.status == "completed"
    hang, garbage = _calls(r)
    assert hang.status == "failed" and "did not return" in hang.error.model_dump_json()  # type: ignore[attr-defined]
    assert garbage.status == "failed" and "over the limit" in garbage.error.model_dump_json()  # type: ignore[attr-defined]
    assert garbage.output is None  # type: ignore[attr-defined]


def test_an_unreachable_server_is_a_failed_tool_list(sdk: openai.OpenAI, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nobody listens
    r = sdk.responses.create(
        model="scripted",
        input="x",
        tools=[
            {"type": "mcp", "server_label": "gone", "server_url": url, "require_approval": "never"}
        ],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo"},
    )
    assert r.status == "completed"
    listed = r.output[0]
    assert listed.type == "mcp_list_tools" and listed.error  # type: ignore[union-attr]


def test_a_server_that_lists_its_tools_a_page_at_a_time_is_listed_whole(
    sdk: openai.OpenAI, tmp_path: Path
) -> None:
    for name in ("paged", "endless"):
        (tmp_path / name).mkdir()
    paged = _start_tools(tmp_path / "paged", "--page-size", "2")
    endless = _start_tools(tmp_path / "endless", "--page-size", "4", "--endless")
    paged.gate.touch()  # `slow` returns at once
    try:
        r = sdk.responses.create(
            model="scripted",
            input="many tools",
            tools=[_open_tool("paged", paged), _open_tool("endless", endless)],  # type: ignore[list-item]
            metadata={"scripted_calls": "slow"},  # on the fourth page
        )
    finally:
        for ts in (paged, endless):
            ts.process.kill()
            ts.process.wait()
    whole, cut = [i for i in r.output if i.type == "mcp_list_tools"]
    names = [t.name for t in whole.tools]  # type: ignore[union-attr]
    assert len(names) == 13 and names[:2] == ["echo", "shout"] and names[-1] == "python"
    (call,) = _calls(r)
    assert call.status == "completed" and call.server_label == "paged"  # type: ignore[attr-defined]
    # A server whose pages never end is cut off, a failed listing, and the loop goes on.
    assert "more than 100 pages" in (cut.error or "")  # type: ignore[union-attr]
    assert paged.calls() == ["slow"] and endless.calls() == []


def test_a_tool_list_over_the_limit_is_a_failed_listing(sdk: openai.OpenAI, tmp_path: Path) -> None:
    # The server's tools as JSON are over `--mcp-max-list-bytes` (50,000 here): kept,
    # the list would be in the log several times over and in every prompt of the loop.
    bulky = _start_tools(tmp_path, "--bulky")
    try:
        r = sdk.responses.create(
            model="scripted",
            input="a long list",
            tools=[_open_tool("bulky", bulky)],  # type: ignore[list-item]
            metadata={"scripted_calls": "echo"},
        )
    finally:
        bulky.process.kill()
        bulky.process.wait()
    assert r.status == "completed" and _calls(r) == []
    (listed,) = [i for i in r.output if i.type == "mcp_list_tools"]
    assert listed.tools == [] and "over the limit of 50000 bytes" in (listed.error or "")  # type: ignore[union-attr]
    assert len(r.model_dump_json()) < 50_000


def test_by_default_a_request_cannot_make_the_server_reach_its_own_network(
    tmp_path: Path,
) -> None:
    # `--mcp-hosts public`, the default: a server on the loopback (as a database's admin
    # port or a cloud's metadata address would be) is a failed listing, and no call is
    # made; the words name the host as the request gave it, not what it resolved to.
    (tmp_path / "tools").mkdir()
    ts = _start_tools(tmp_path / "tools", "--lists", str(tmp_path / "lists"))
    srv = start_server(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", "sqlite", tmp_path / "s.log")
    try:
        client = openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused", max_retries=0)
        inside = ts.url.replace("127.0.0.1", "localhost")
        r = client.responses.create(
            model="scripted",
            input="reach inside",
            tools=[{"type": "mcp", "server_label": "inside", "server_url": inside}],  # type: ignore[list-item]
            metadata={"scripted_calls": "echo"},
        )
    finally:
        stop_server(srv)
        ts.process.kill()
        ts.process.wait()
    assert r.status == "completed" and _calls(r) == []
    (listed,) = [i for i in r.output if i.type == "mcp_list_tools"]
    error = listed.error or ""  # type: ignore[union-attr]
    assert "localhost" in error and "--mcp-hosts" in error and "127.0.0.1" not in error
    assert not (tmp_path / "lists").exists()  # the server was never asked
    assert ts.calls() == []


def _open_tool(label: str, ts: ToolServer) -> dict[str, object]:
    """An `mcp` tool of a server that asks for no credentials, its calls run unasked."""
    return {"type": "mcp", "server_label": label, "server_url": ts.url, "require_approval": "never"}


def test_the_servers_of_one_response_are_asked_for_their_tools_at_once(
    sdk: openai.OpenAI, tmp_path: Path
) -> None:
    # The first server answers its listing only once the second has been asked for its:
    # listed one after the other, the first would wait out the call timeout (3 s here)
    # and fail.
    met = tmp_path / "second-asked"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = _start_tools(tmp_path / "a", "--list-gate", str(met))
    second = _start_tools(tmp_path / "b", "--list-mark", str(met))
    try:
        r = sdk.responses.create(
            model="scripted",
            input="two servers",
            tools=[_open_tool("first", first), _open_tool("second", second)],  # type: ignore[list-item]
            metadata={"scripted_calls": "echo"},
        )
    finally:
        for ts in (first, second):
            ts.process.kill()
            ts.process.wait()
    assert r.status == "completed"
    lists = [i for i in r.output if i.type == "mcp_list_tools"]
    # Logged one after the other, in the order of `tools`, each with its server's tools.
    assert [i.server_label for i in lists] == ["first", "second"]  # type: ignore[union-attr]
    for listed in lists:
        assert listed.error is None and "echo" in [t.name for t in listed.tools]  # type: ignore[union-attr]
    assert [i.type for i in r.output[:2]] == ["mcp_list_tools", "mcp_list_tools"]
    (call,) = _calls(r)
    assert call.status == "completed"  # type: ignore[attr-defined]
    assert first.calls() + second.calls() == ["echo"]


@contextlib.contextmanager
def _listed_servers(tmp_path: Path) -> Iterator[tuple[ToolServer, ToolServer]]:
    """Two MCP servers that count the times they are asked for their tools (`_listings`),
    stopped at the end."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    servers = (
        _start_tools(tmp_path / "a", "--lists", str(tmp_path / "a" / "lists")),
        _start_tools(tmp_path / "b", "--lists", str(tmp_path / "b" / "lists")),
    )
    try:
        yield servers
    finally:
        for ts in servers:
            ts.process.kill()
            ts.process.wait()


def _listings(ts: ToolServer) -> int:
    """How many times a server of `_listed_servers` listed its tools for a turn. The `mcp`
    client asks for the tools before each call too (to check the result against the
    tool's output schema): what is left are the listings."""
    path = ts.calls_path.parent / "lists"
    return (len(path.read_text().split()) if path.exists() else 0) - len(ts.calls())


def _turn(sdk: openai.OpenAI, given: Any, calls: str, *servers: ToolServer, **more: Any) -> Any:
    """A response whose script calls `calls` (comma-separated, one per step) on the servers
    given, labelled `first` and `second` in their order."""
    labels = ("first", "second")[: len(servers)]
    tools = [_open_tool(label, ts) for label, ts in zip(labels, servers, strict=True)]
    return sdk.responses.create(
        model="scripted",
        input=given,
        tools=tools,  # type: ignore[arg-type]
        metadata={"scripted_calls": calls},
        **more,
    )


def _kinds(r: Any) -> list[str]:
    return [i.type for i in r.output]


def _listed(r: Any) -> list[str]:
    """The servers a response listed, in its order."""
    return [i.server_label for i in r.output if i.type == "mcp_list_tools"]


def test_a_turn_that_continues_one_with_its_tool_list_lists_only_new_servers(
    sdk: openai.OpenAI, tmp_path: Path
) -> None:
    # OpenAI lists a server's tools again only when the list is no longer in the context:
    # a `previous_response_id` turn offers them from the list its history holds.
    with _listed_servers(tmp_path) as (first, second):
        one = _turn(sdk, "first turn", "echo", first)
        two = _turn(sdk, "second turn", "shout", first, previous_response_id=one.id)
        three = _turn(sdk, "a server more", "echo", first, second, previous_response_id=two.id)
        assert (_listings(first), _listings(second)) == (1, 1)
        assert sorted(first.calls() + second.calls()) == ["echo", "echo", "shout"]
    assert _listed(one) == ["first"] and one.status == "completed"
    # The second turn's call ran on the tools the first turn listed: no list item, no list.
    assert _listed(two) == [] and two.status == "completed"
    (shouted,) = _calls(two)
    assert shouted.status == "completed" and shouted.server_label == "first"  # type: ignore[attr-defined]
    assert _listed(three) == ["second"]  # only the server new to it


def test_a_conversation_turn_lists_only_servers_its_conversation_holds_no_list_of(
    sdk: openai.OpenAI, tmp_path: Path
) -> None:
    # A conversation keeps each response's lists (set aside, shown to no model): they
    # are in the next turn's context as a `previous_response_id` chain's are.
    conversation = sdk.conversations.create()
    with _listed_servers(tmp_path) as (first, second):
        one = _turn(sdk, "first turn", "echo", first, conversation=conversation.id)
        two = _turn(sdk, "a server more", "shout", first, second, conversation=conversation.id)
        assert (_listings(first), _listings(second)) == (1, 1)
    assert _listed(one) == ["first"] and one.status == "completed"
    assert _listed(two) == ["second"]
    (shouted,) = _calls(two)  # a tool of the first server, from the conversation's list
    assert shouted.status == "completed" and shouted.server_label == "first"  # type: ignore[attr-defined]
    # The conversation holds each list once, as its response made it.
    items = sdk.conversations.items.list(conversation.id, order="asc").data
    held = [i for i in items if i.type == "mcp_list_tools"]
    assert [i.server_label for i in held] == ["first", "second"]  # type: ignore[union-attr]


def test_a_list_passed_back_as_input_is_not_listed_again(
    sdk: openai.OpenAI, tmp_path: Path
) -> None:
    # A client that keeps its own history (no `previous_response_id`, `store: false`)
    # sends an earlier answer's output back, its `mcp_list_tools` items with it.
    with _listed_servers(tmp_path) as (first, _):
        one = _turn(sdk, "first turn", "echo", first, store=False)
        # The passed-back call is the input's first tool output: the script's second
        # tool (`echo,shout`) is the next call.
        passed = [i.model_dump(exclude_none=True) for i in one.output]
        asked = [{"role": "user", "content": "first turn"}, *passed]
        second_turn = [*asked, {"role": "user", "content": "second turn"}]
        two = _turn(sdk, second_turn, "echo,shout", first, store=False)
        # The same, its list's shape broken: it stands for nothing, so the server is
        # listed again.
        broken = [
            {**i, "tools": [{"name": 7}]} if i.get("type") == "mcp_list_tools" else i for i in asked
        ]
        third_turn = [*broken, {"role": "user", "content": "third turn"}]
        three = _turn(sdk, third_turn, "echo,shout", first, store=False)
        # A stored turn that passed the list back, and one that continues it: the list
        # is in the second's context too, as its chain's input.
        four = _turn(sdk, second_turn, "echo,shout", first)
        five = _turn(sdk, "fifth turn", "shout", first, previous_response_id=four.id)
        assert _listings(first) == 2
        assert first.calls() == ["echo", "shout", "shout", "shout", "shout"]
    assert _listed(one) == ["first"] and one.status == "completed"
    assert _listed(two) == [] and two.status == "completed"
    (shouted,) = _calls(two)
    assert shouted.status == "completed" and shouted.server_label == "first"  # type: ignore[attr-defined]
    assert _listed(three) == ["first"] and _calls(three)[0].status == "completed"  # type: ignore[attr-defined]
    for turn in (four, five):
        assert _listed(turn) == [] and _calls(turn)[0].status == "completed"  # type: ignore[attr-defined]


def test_wrong_credentials_fail_the_listing(sdk: openai.OpenAI, tools: ToolServer) -> None:
    r = sdk.responses.create(
        model="scripted",
        input="x",
        tools=[_tool(tools, authorization="wrong")],  # type: ignore[list-item]
    )
    listed = r.output[0]
    assert listed.type == "mcp_list_tools" and listed.error  # type: ignore[union-attr]
    assert "wrong" not in listed.error  # type: ignore[union-attr]


def _cli(*args: str) -> str:
    done = subprocess.run([RESPLOG, *args], capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


def test_secrets_reach_the_server_but_never_the_log_or_any_output(
    sdk: openai.OpenAI, tools: ToolServer, mcp_server: Server
) -> None:
    r = sdk.responses.create(
        model="scripted",
        input="echo",
        tools=[_tool(tools, headers={"X-Api-Key": SECRET})],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo"},
    )
    assert r.status == "completed" and tools.calls() == ["echo"]  # the server got the token
    outputs = [
        r.model_dump_json(),
        sdk.responses.retrieve(r.id).model_dump_json(),
        json.dumps([i.model_dump() for i in sdk.responses.input_items.list(r.id)]),
        httpx_get(f"{mcp_server.base_url}/v1/responses/{r.id}/events"),
    ]
    db = mcp_server.database_url
    for args in (["events", r.id], ["events", "--raw", r.id], ["conversation", r.id]):
        outputs.append(_cli(*args, "--database-url", db))
    outputs.append(_cli("verify", "--all", "--database-url", db))
    outputs.append(mcp_server.log_text())
    path = Path(db.split("///", 1)[1])
    for f in path.parent.glob(path.name + "*"):
        outputs.append(f.read_bytes().decode("latin-1"))
    for text in outputs:
        assert SECRET not in text
        assert base64.b64encode(SECRET.encode()).decode() not in text
    assert '"authorization":"<redacted>"' in outputs[0].replace(" ", "")
    # The steps show in the admin views.
    assert "mcp_call testtools.echo" in outputs[4]


def httpx_get(url: str) -> str:
    import httpx

    return httpx.get(url, timeout=30).text


def test_a_request_refused_by_the_server_runs_nothing(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        sdk.responses.create(
            model="scripted",
            input="x",
            tools=[{"type": "mcp", "server_label": "c", "connector_id": "connector_gmail"}],  # type: ignore[list-item]
        )
    assert err.value.status_code == 400
    assert tools.calls() == []


KEY = base64.b64encode(b"k" * 32).decode()
TTL = ("--lease-ttl-s", "3", "--reasoning-key", KEY, *LOOPBACK_MCP)


@pytest.mark.parametrize("idempotent", [False, True], ids=["failed", "idempotent"])
def test_a_worker_killed_mid_loop_is_taken_over_and_each_tool_runs_once(
    fresh_pg: object, tmp_path: Path, tools: ToolServer, idempotent: bool
) -> None:
    """kill -9 of the worker while the loop's second call is in flight: another worker takes
    the lease, records that call failed (its effect is unknown), keeps the first call's
    recorded result, and runs the rest; the MCP server saw each call exactly once. Unless
    the tool is declared idempotent (`--mcp-idempotent-tools`): then it is run once more."""
    url = fresh_pg()  # type: ignore[operator]
    api = start_server(url, "postgres", tmp_path / "api.log", "--workers", "0", *TTL)
    victim = start_worker(url, tmp_path / "victim.log", *TTL)
    survivor = None
    try:
        client = openai.OpenAI(base_url=f"{api.base_url}/v1", api_key="unused", max_retries=0)
        r = client.responses.create(
            model="scripted",
            input="a loop to survive",
            background=True,
            tools=[_tool(tools)],  # type: ignore[list-item]
            metadata={"scripted_calls": "echo,slow,shout"},
        )
        deadline = time.monotonic() + 60
        while tools.calls() != ["echo", "slow"]:
            assert time.monotonic() < deadline, tools.calls()
            time.sleep(0.05)
        stop(victim.process, victim.log_file, kill=True)
        tools.gate.touch()  # a retried call returns
        flags = ("--mcp-idempotent-tools", "testtools:slow") if idempotent else ()
        survivor = start_worker(url, tmp_path / "survivor.log", *TTL, *flags)
        deadline = time.monotonic() + 60
        while (final := client.responses.retrieve(r.id)).status in ("queued", "in_progress"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert final.status == "completed", final.error
        echo, slow, shout = _calls(final)
        assert echo.status == "completed"  # type: ignore[attr-defined]
        assert shout.status == "completed"  # type: ignore[attr-defined]
        assert final.output[-1].type == "message"
        if idempotent:
            assert slow.status == "completed" and slow.output.startswith("slow: ")  # type: ignore[attr-defined]
            assert tools.calls() == ["echo", "slow", "slow", "shout"]
        else:
            assert slow.status == "failed"  # type: ignore[attr-defined]
            assert "stopped before the call returned" in slow.error.model_dump_json()  # type: ignore[attr-defined]
            assert tools.calls() == ["echo", "slow", "shout"]  # each exactly once
        assert "took over the tool loop" in survivor.log_text()
        assert fold_check(url).status[r.id] == "completed"
        _cli("verify", "--all", "--database-url", url)
        assert SECRET not in asyncio.run(_dump(url))
    finally:
        tools.gate.touch()
        if survivor is not None:
            stop(survivor.process, survivor.log_file)
        stop_server(api)


async def _dump(url: str) -> str:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        rows = await conn.fetch("SELECT * FROM events")
        return "\n".join(str(dict(r)) for r in rows)
    finally:
        await conn.close()


def test_an_approval_request_ends_the_response_and_the_approval_continues_the_loop(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    first = sdk.responses.create(
        model="scripted",
        input="ask first",
        tools=[_tool(tools, require_approval={"never": {"tool_names": ["shout"]}})],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo"},
    )
    assert first.status == "completed"
    request = first.output[-1]
    assert request.type == "mcp_approval_request" and request.name == "echo"  # type: ignore[union-attr]
    assert tools.calls() == []  # nothing ran before the client said so
    second = sdk.responses.create(
        model="scripted",
        previous_response_id=first.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],  # type: ignore[list-item]
        tools=[_tool(tools, require_approval={"never": {"tool_names": ["shout"]}})],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo"},
    )
    assert second.status == "completed", second.error
    call = next(i for i in second.output if i.type == "mcp_call")
    assert call.approval_request_id == request.id and call.status == "completed"  # type: ignore[union-attr]
    assert second.output[-1].type == "message"
    assert tools.calls() == ["echo"]
    items = list(sdk.responses.input_items.list(second.id))
    assert items[0].type == "mcp_approval_response"
    # A refusal runs nothing.
    third = sdk.responses.create(
        model="scripted",
        previous_response_id=first.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": False}
        ],  # type: ignore[list-item]
        tools=[_tool(tools)],  # type: ignore[list-item]
        metadata={"scripted_calls": ""},  # the model answers
    )
    assert third.status == "completed"
    assert tools.calls() == ["echo"]


def test_an_approval_request_passed_back_with_its_answer_runs_once(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    """A client that keeps its own history (the Agents SDK's default) sends the approval
    request back beside its answer, with no `previous_response_id`: the loop finds it there
    and runs the call. Passed back again with the call it made, it is not run again."""
    asked = [_tool(tools, require_approval={"never": {"tool_names": ["shout"]}})]
    first = sdk.responses.create(
        model="scripted",
        input="ask first",
        tools=asked,  # type: ignore[arg-type]
        metadata={"scripted_calls": "echo"},
    )
    request = first.output[-1]
    assert request.type == "mcp_approval_request"
    history: list[Any] = [
        {"role": "user", "content": "ask first"},
        *(i.model_dump(exclude_none=True) for i in first.output),
        {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True},
    ]
    second = sdk.responses.create(
        model="scripted",
        input=history,
        tools=asked,
        metadata={"scripted_calls": "echo"},  # type: ignore[arg-type]
    )
    assert second.status == "completed", second.error
    call = next(i for i in second.output if i.type == "mcp_call")
    assert call.approval_request_id == request.id and call.status == "completed"  # type: ignore[union-attr]
    assert tools.calls() == ["echo"]
    listed = list(sdk.responses.input_items.list(second.id, order="asc"))
    assert listed[-2].model_dump() == request.model_dump()  # an input item of its own
    again = sdk.responses.create(
        model="scripted",
        input=[*history, *(i.model_dump(exclude_none=True) for i in second.output)],
        tools=asked,  # type: ignore[arg-type]
        metadata={"scripted_calls": ""},
    )
    assert again.status == "completed", again.error
    assert not [i for i in again.output if i.type == "mcp_call"]
    assert tools.calls() == ["echo"]


@pytest.fixture(scope="module")
def sglang_mcp(
    fake_sglang_server: FakeProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("mcp-sglang")
    engine = ("--engine", "sglang", "--engine-url", fake_sglang_server.url)
    srv = start_server(
        f"sqlite+aiosqlite:///{tmp / 'resplog.db'}",
        "sqlite",
        tmp / "server.log",
        *LOOPBACK_MCP,
        engine=engine,
    )
    yield srv
    stop_server(srv)


def test_gpt_oss_calls_mcp_tools_through_harmony_on_the_sglang_stand_in(
    sglang_mcp: Server, fake_sglang: FakeProcess, tools: ToolServer
) -> None:
    """The fake sglang plays gpt-oss: `to=functions.echo`, then (seeing the tool's answer
    rendered back as a harmony tool message) `to=functions.shout`, then its answer."""
    with openai.OpenAI(base_url=f"{sglang_mcp.base_url}/v1", api_key="unused") as client:
        model = client.models.list().data[0].id
        r = client.responses.create(
            model=model,
            input="Use the tools. [fake:mcp_loop]",
            tools=[_tool(tools)],  # type: ignore[list-item]
        )
    assert r.status == "completed", r.error
    echo, shout = _calls(r)
    assert (echo.name, echo.output) == ("echo", "echo: one")  # type: ignore[attr-defined]
    assert (shout.name, shout.output) == ("shout", "TWO")  # type: ignore[attr-defined]
    assert r.output_text == "Done after two tools."
    assert tools.calls() == ["echo", "shout"]
    # Three generations; the stand-in picks each step by the tool messages it was shown
    # (tests/fakes/transcripts.py), so the answers were rendered back as harmony tool turns.
    assert len(fake_sglang.log()["requests"]) == 3


def test_a_cancel_stops_the_loop_during_a_call(sdk: openai.OpenAI, tools: ToolServer) -> None:
    r = sdk.responses.create(
        model="scripted",
        input="cancel me",
        background=True,
        tools=[_tool(tools)],  # type: ignore[list-item]
        metadata={"scripted_calls": "slow,echo"},
    )
    deadline = time.monotonic() + 30
    while tools.calls() != ["slow"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    final = sdk.responses.cancel(r.id)
    assert final.status == "cancelled"
    (slow,) = _calls(final)
    assert slow.status == "incomplete" and slow.error is not None  # type: ignore[attr-defined]
    tools.gate.touch()
    # The log ends with the cancellation, so nothing can follow it: the loop is over.
    assert sdk.responses.retrieve(r.id).status == "cancelled"
    assert tools.calls() == ["slow"]


@pytest.fixture(scope="module")
def chat_mcp(
    fake_chat_server: FakeProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("mcp-chat")
    engine = ("--engine", "openai-chat", "--engine-url", f"{fake_chat_server.url}/v1")
    srv = start_server(
        f"sqlite+aiosqlite:///{tmp / 'resplog.db'}",
        "sqlite",
        tmp / "server.log",
        *LOOPBACK_MCP,
        engine=engine,
    )
    yield srv
    stop_server(srv)


def test_the_loop_runs_the_tool_calls_of_a_chat_completions_upstream(
    chat_mcp: Server, fake_chat: FakeProcess, tools: ToolServer
) -> None:
    """The upstream's `tool_calls` name MCP tools: each is run by the same loop, its answer
    sent back as a `tool` message, and the upstream asked again."""
    with openai.OpenAI(base_url=f"{chat_mcp.base_url}/v1", api_key="unused") as client:
        events = list(
            client.responses.create(
                model="tiny-chat",
                input="Use the tools. [fake:mcp_loop]",
                tools=[_tool(tools)],  # type: ignore[list-item]
                stream=True,
            )
        )
    r = events[-1].response  # type: ignore[union-attr]
    assert r.status == "completed", r.error
    echo, shout = _calls(r)
    assert (echo.name, echo.output, echo.status) == ("echo", "echo: one", "completed")  # type: ignore[attr-defined]
    assert (shout.name, shout.output, shout.status) == ("shout", "TWO", "completed")  # type: ignore[attr-defined]
    assert r.output_text == "Done after two tools."
    assert tools.calls() == ["echo", "shout"]
    assert [e.type for e in events].count("response.mcp_call.completed") == 2
    requests = fake_chat.log()["requests"]
    assert len(requests) == 3
    offered = {t["function"]["name"] for t in requests[0]["tools"]}
    assert {"echo", "shout"} <= offered
    # Each answer went back to the upstream as the tool message of its call.
    last = requests[-1]["messages"]
    answers = [(m["tool_call_id"], m["content"]) for m in last if m["role"] == "tool"]
    calls = [c for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert [a for _, a in answers] == ["echo: one", "TWO"]
    assert [c["function"]["name"] for c in calls] == ["echo", "shout"]
    assert [c["id"] for c in calls] == [cid for cid, _ in answers]


def test_a_loop_in_a_conversation_leaves_its_calls_there_as_mcp_calls(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    """The items a response adds to its conversation are its output as OpenAI lists it:
    each MCP call an `mcp_call` as the response made it, which the next turn's model is
    shown as a function call and its output; the listing is set aside, listed as the
    response made it and shown to no model."""
    conv = sdk.conversations.create()
    r = sdk.responses.create(
        model="scripted",
        input="in a conversation",
        conversation=conv.id,
        tools=[_tool(tools)],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo"},
    )
    assert r.status == "completed", r.error
    items = list(sdk.conversations.items.list(conv.id, order="asc"))
    kinds = [i.type for i in items]
    assert kinds == ["message", *(i.type for i in r.output)]
    assert "mcp_call" in kinds and "function_call" not in kinds
    for made, listed in zip(r.output, items[1:], strict=True):
        if made.type in ("mcp_list_tools", "mcp_call"):
            assert listed.model_dump() == made.model_dump()
    call = next(i for i in items if i.type == "mcp_call")
    assert call.output.startswith("echo: ")  # type: ignore[union-attr]
    assert tools.calls() == ["echo"]
    after = sdk.responses.create(
        model="scripted",
        input="what did the tool say?",
        conversation=conv.id,
        metadata={"scripted_mode": "transcript"},
    )
    assert "function_call_output: echo: in a conversation" in after.output_text
    assert after.output_text.endswith("user: what did the tool say?")
    assert tools.calls() == ["echo"]  # shown, not run again


def test_an_approval_in_a_conversation_continues_the_loop(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    """OpenAI's approval round trip with `conversation` in the place of
    `previous_response_id`: the request the approval answers is found in the conversation."""
    conv = sdk.conversations.create()
    asked = [_tool(tools, require_approval={"never": {"tool_names": ["shout"]}})]
    first = sdk.responses.create(
        model="scripted",
        input="ask first",
        conversation=conv.id,
        tools=asked,  # type: ignore[arg-type]
        metadata={"scripted_calls": "echo"},
    )
    request = first.output[-1]
    assert request.type == "mcp_approval_request"
    second = sdk.responses.create(
        model="scripted",
        conversation=conv.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],  # type: ignore[list-item]
        tools=asked,  # type: ignore[arg-type]
        metadata={"scripted_calls": "echo"},
    )
    assert second.status == "completed", second.error
    call = next(i for i in second.output if i.type == "mcp_call")
    assert call.approval_request_id == request.id and call.status == "completed"  # type: ignore[union-attr]
    assert tools.calls() == ["echo"]


def test_mcp_items_passed_back_by_reference_are_kept_in_place(
    sdk: openai.OpenAI, tools: ToolServer
) -> None:
    """The Vercel AI SDK sends an earlier step's output by `item_reference`: an MCP listing
    and call are taken (they were a 400) and kept in place as the earlier response holds
    them. The listing is shown to no engine; the call is shown as its function call and
    output, as a passed-back call is, and the message after them."""
    first = sdk.responses.create(
        model="scripted",
        input="call once",
        tools=[_tool(tools)],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo"},
    )
    listing = next(i for i in first.output if i.type == "mcp_list_tools")
    call = next(i for i in first.output if i.type == "mcp_call")
    second = sdk.responses.create(
        model="scripted",
        input=[
            {"type": "item_reference", "id": listing.id},
            {"type": "item_reference", "id": call.id},
            {"role": "user", "content": "and now?"},
        ],
        metadata={"scripted_mode": "transcript"},
    )
    assert second.status == "completed"
    assert second.output_text == (
        "function_call:  | function_call_output: echo: call once | user: and now?"
    )
    items = sdk.responses.input_items.list(second.id, order="asc").data
    assert [i.type for i in items] == ["mcp_list_tools", "mcp_call", "message"]
    assert items[1].model_dump(exclude_none=True) == call.model_dump(exclude_none=True)
