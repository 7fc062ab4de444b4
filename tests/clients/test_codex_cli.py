"""The real Codex CLI (`@openai/codex`, pinned in package.json) run non-interactively,
`codex exec`, with a custom model provider (`wire_api = "responses"`) pointing at resplog:
the model (the fake sglang) calls Codex's shell tool, Codex runs it and sends its output back
(`store: false`: the whole history replayed), the model answers.

Offline: Codex exec makes no outside call for a custom provider except two that this config
turns off: the plugin marketplace sync (`features.plugins`, github.com) and analytics
(`analytics.enabled`, chatgpt.com). No auth is needed (no `env_key`), no model list is
fetched, and it does not try WebSockets with a custom provider.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.clients.conftest import ANSWER, ClientServer
from tests.e2e.conftest import Server, start_server, stop_server

CONFIG = """\
model = "{model}"
model_provider = "resplog"

[model_providers.resplog]
name = "resplog"
base_url = "{base_url}"
wire_api = "responses"

[features]
plugins = false  # offline: no plugin marketplace sync (github.com)

[analytics]
enabled = false  # offline: no analytics (chatgpt.com)
"""
TOOL_MARK = "resplog-tool-ran"  # what the fake's `exec_command` call echoes


def codex_exec(
    node_modules: Path, tmp_path: Path, srv: ClientServer | Server, prompt: str, *options: str
) -> subprocess.CompletedProcess[str]:
    """`codex exec PROMPT` on `srv` (the model: the fake's name, or `scripted` on the
    default engine), in a fresh Codex home and workspace under `tmp_path`."""
    model = srv.model if isinstance(srv, ClientServer) else "scripted"
    base_url = srv.base_url if isinstance(srv, ClientServer) else f"{srv.base_url}/v1"
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(CONFIG.format(model=model, base_url=base_url))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),  # its login shell reads no profile of this machine's user
        "CODEX_HOME": str(home),
        "LANG": "C.UTF-8",
    }
    return subprocess.run(
        [str(node_modules / ".bin" / "codex"), "exec", "--skip-git-repo-check", *options, prompt],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )


# A model Codex does not know gets fallback metadata and tools (a `namespace` of sub-agent
# tools among them); one it knows (in its bundled catalogue) also gets the `custom`
# apply_patch tool with a lark grammar and a client-executed `tool_search`.
MODELS = ["gpt-oss-120b", "gpt-5.5"]


@pytest.mark.parametrize("model", MODELS)
def test_codex_exec_runs_a_tool_and_answers(
    node_modules: Path,
    serve_for_clients: Callable[[str], ClientServer],
    tmp_path: Path,
    model: str,
) -> None:
    srv = serve_for_clients(model)
    done = codex_exec(node_modules, tmp_path, srv, "Run echo, please. [fake:codex_exec]")
    sent = srv.traffic.responses_requests()
    statuses = [(r.get("status"), r.get("error")) for r in sent]
    assert done.returncode == 0, (statuses, done.stderr[-3000:])
    assert done.stdout.strip().splitlines()[-1] == ANSWER
    srv.traffic.assert_all_ok()
    first, second = sent  # the tool call, then the answer
    assert first["body"]["store"] is False and first["body"]["stream"] is True
    replayed = second["body"]["input"]
    call = next(i for i in replayed if i["type"] == "function_call")
    assert call["name"] == "exec_command"
    result = next(i for i in replayed if i["type"] == "function_call_output")
    assert result["call_id"] == call["call_id"] and TOOL_MARK in result["output"]
    for request in sent:  # the audit view of each turn
        extra = srv.facts(request["response_id"])["extra"]
        assert extra["client_metadata"] == request["body"]["client_metadata"]
        headers = extra["client_headers"]
        assert headers["session-id"] == headers["thread-id"] == request["headers"]["session-id"]
        assert extra["tools_not_offered"] == ["web_search"]  # hosted: not offered to the model
    report = srv.verify()
    assert report["ok"] is True and report["streams"] >= len(sent), json.dumps(report)[:2000]


def test_codex_applies_a_patch_through_its_custom_tool(
    node_modules: Path, serve_for_clients: Callable[[str], ClientServer], tmp_path: Path
) -> None:
    """`apply_patch` is a `custom` tool (free-form text, a lark grammar) that Codex offers a
    model it knows: the model's call reaches Codex as a `custom_tool_call`, Codex applies the
    patch in its workspace and answers with a `custom_tool_call_output`."""
    srv = serve_for_clients("gpt-5.5")
    prompt = "Create hello.txt. [fake:codex_apply_patch]"
    done = codex_exec(node_modules, tmp_path, srv, prompt, "--sandbox", "workspace-write")
    sent = srv.traffic.responses_requests()
    assert done.returncode == 0, ([r.get("status") for r in sent], done.stderr[-3000:])
    assert done.stdout.strip().splitlines()[-1] == ANSWER
    assert (tmp_path / "work" / "hello.txt").read_text() == "hello from resplog\n"
    srv.traffic.assert_all_ok()
    replayed = sent[-1]["body"]["input"]
    call = next(i for i in replayed if i["type"] == "custom_tool_call")
    assert call["name"] == "apply_patch" and call["input"].startswith("*** Begin Patch")
    result = next(i for i in replayed if i["type"] == "custom_tool_call_output")
    assert result["call_id"] == call["call_id"]
    assert srv.verify()["ok"] is True


def test_codex_exec_runs_a_tool_on_the_default_engine(node_modules: Path, tmp_path: Path) -> None:
    """`resplog serve` as the README starts it (the scripted engine, SQLite): the engine
    calls Codex's first tool, `exec_command`, with the schema's required `cmd` only (an
    optional `number` written `1.0` is refused by Codex, which reads it as an integer);
    Codex runs it and sends the output back, and the engine answers with it."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'resplog.db'}"
    server = start_server(url, "sqlite", tmp_path / "server.log", engine=())
    try:
        done = codex_exec(node_modules, tmp_path, server, f"echo {TOOL_MARK}")
    finally:
        stop_server(server)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    # Codex prints the final answer alone on stdout: the script's, quoting the tool's output.
    answer = done.stdout.strip()
    assert answer.startswith("The function returned:") and TOOL_MARK in answer, done.stdout
