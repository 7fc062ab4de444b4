"""The Vercel AI SDK (`ai` + `@ai-sdk/openai`, pinned in package.json): its multi-step tool
loop with default options (`ai_sdk_tool_loop.mjs`), generated and streamed, on its current
major version (7, with `@ai-sdk/openai` 4) and the one before (6, with 3), which is still
released. With its default `store: true`, step 2 sends the reasoning of step 1 back as
`{"type": "item_reference"}`. Version 7 also sends `strict: false` on each function tool."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import ANSWER, HERE, WEATHER_PROMPT, ClientServer


def tool_loop(node_modules: Path, srv: ClientServer, mode: str, major: str) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None and node_modules.is_dir()
    done = subprocess.run(
        [node, "ai_sdk_tool_loop.mjs", srv.base_url, srv.model, WEATHER_PROMPT, mode, major],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    sent = [(r.get("status"), r.get("error")) for r in srv.traffic.responses_requests()]
    assert done.returncode == 0, (sent, done.stderr[-3000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("major", ["7", "6"])
@pytest.mark.parametrize("mode", ["generate", "stream"])
def test_multi_step_tool_loop_with_default_options(
    node_modules: Path, resplog_for_clients: ClientServer, mode: str, major: str
) -> None:
    srv = resplog_for_clients
    result = tool_loop(node_modules, srv, mode, major)
    assert result["calls"] == ["Tokyo"]
    assert result["text"] == ANSWER and result["finishReason"] == "stop"
    assert [s["finishReason"] for s in result["steps"]] == ["tool-calls", "stop"]
    srv.traffic.assert_all_ok()
    first, second = (r["body"] for r in srv.traffic.responses_requests())
    assert "store" not in first  # the default: stored
    strict = [t.get("strict") for t in first["tools"]]
    assert strict == ([False] if major == "7" else [None])  # v7 sends it; accepted either way
    references = [i["id"] for i in second["input"] if i.get("type") == "item_reference"]
    assert [r[:3] for r in references] == ["rs_"]  # what the default sends for step 1's reasoning
    report = srv.verify()
    assert report["ok"] is True, json.dumps(report)[:2000]
