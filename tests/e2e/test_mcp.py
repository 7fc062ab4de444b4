"""`mcp` tools end to end: a real MCP server process (tests/fakes/mcp_server.py, the
official `mcp` package), a real resplog server, the official `openai` SDK, and the scripted
engine scripting the model's calls (metadata `scripted_calls`). The MCP server counts every
call in a file, so "run exactly once" is checked across processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.conftest import Server, free_port, start_server, stop_server
from tests.fakes.process import ROOT

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
