"""openai-node (pinned in package.json) verifies resplog's webhooks: each delivery a
receiver got from a real `resplog serve` goes through the SDK's `client.webhooks.unwrap`
(`webhooks_verify.mjs`), which checks the Standard Webhooks signature and timestamp as
openai-python's does (tests/e2e/test_webhooks.py has those, and the rest of the webhooks)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.clients.conftest import HERE
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.webhooks_kit import FAST, Received, Receiver, add_direct, webhooks


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'resplog.db'}"
    server = start_server(url, "sqlite", tmp_path / "server.log", *FAST)
    yield server
    stop_server(server)


def node_unwrap(secret: str, got: list[Received]) -> list[dict[str, Any]]:
    node = shutil.which("node")
    assert node is not None
    sent = [{"body": g.body.decode(), "headers": g.headers} for g in got]
    done = subprocess.run(
        [node, "webhooks_verify.mjs"],
        cwd=HERE,
        input=json.dumps({"secret": secret, "deliveries": sent}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def test_openai_node_verifies_each_delivery(node_modules: Path, served: Server) -> None:
    receiver = Receiver().start()
    try:
        every = "response.completed,response.cancelled,response.incomplete"
        endpoint_id, secret = add_direct(served.database_url, receiver.url, every)
        client = openai.OpenAI(base_url=served.base_url + "/v1", api_key="x")
        done = client.responses.create(model="scripted", input="hi", background=True)
        slow = client.responses.create(
            model="scripted",
            input="hi",
            background=True,
            metadata={"scripted_delay_ms": "25", "scripted_tokens": "400"},
        )
        client.responses.cancel(slow.id)
        got = receiver.wait(2)
        results = node_unwrap(secret, got)
        events = {r["event"]["data"]["id"]: r["event"]["type"] for r in results}
        assert events == {done.id: "response.completed", slow.id: "response.cancelled"}
        for r in results:
            assert r["event"]["object"] == "event" and r["event"]["id"].startswith("evt_")
        # A tampered body, a wrong secret: refused by the SDK.
        tampered = Received(got[0].headers, got[0].body.replace(b"event", b"EVENT"), got[0].at)
        assert "InvalidWebhookSignatureError" in node_unwrap(secret, [tampered])[0]["error"]
        wrong = "whsec_" + "A" * 43 + "="
        assert "InvalidWebhookSignatureError" in node_unwrap(wrong, got[:1])[0]["error"]
        # During a rotation's grace period both secrets verify.
        rotated = webhooks("rotate-secret", endpoint_id, url=served.database_url)
        new = rotated.stdout.strip().splitlines()[-1]
        client.responses.create(model="scripted", input="hi", background=True)
        last = receiver.wait(3)[2:]
        assert "event" in node_unwrap(new, last)[0]
        assert "event" in node_unwrap(secret, last)[0]
    finally:
        receiver.stop()
