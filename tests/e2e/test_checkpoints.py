"""`serve --checkpoint-every-s`: the server keeps signed checkpoints, serves the latest at
`GET /v1/audit/checkpoints/latest` (behind the audit view's rule), which `resplog verify`
checks the log against; the audit view shows a response's chain, checkpoint and erasure."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import openai
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.e2e.conftest import start_server, stop_server
from tests.integration.chained import pem, resplog


def test_a_server_keeps_checkpoints_that_verify_and_the_view_shows_integrity(
    tmp_path: Path,
) -> None:
    private, public = pem(Ed25519PrivateKey.generate())
    key, pub = tmp_path / "k.pem", tmp_path / "p.pem"
    key.write_bytes(private)
    pub.write_bytes(public)
    url = f"sqlite+aiosqlite:///{tmp_path / 'resplog.db'}"
    flags = ("--checkpoint-every-s", "0.5", "--signing-key", str(key))
    server = start_server(url, "sqlite", tmp_path / "server.log", *flags, "--audit-view", "open")
    try:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x")
        rid = client.responses.create(model="m", input="hello there").id
        latest = f"{server.base_url}/v1/audit/checkpoints/latest"
        deadline = time.monotonic() + 20
        body = b""
        while time.monotonic() < deadline:
            answer = httpx.get(latest, timeout=5)
            if answer.status_code == 200 and rid.encode() in answer.content:
                body = answer.content
                assert int(answer.headers["resplog-checkpoint"]) >= 1
                break
            time.sleep(0.2)
        assert body, server.log_text()
        checkpoint = tmp_path / "cp.json"
        checkpoint.write_bytes(body)
        detail = httpx.get(f"{server.base_url}/audit/api/responses/{rid}", timeout=5).json()
        state = detail["integrity"]
        assert state["chain"] == "intact" and state["in_checkpoint"] is True
        assert state["checkpoint"] >= 1 and state["erased_at"] is None
        proof = httpx.get(f"{server.base_url}/v1/responses/{rid}/proof", timeout=5)
        assert proof.status_code == 200, proof.text
        assert proof.json()["stream_id"] == rid and proof.json()["size"] >= 1
        nobody = httpx.get(f"{server.base_url}/v1/responses/resp_nope/proof", timeout=5)
        assert nobody.status_code == 404
    finally:
        stop_server(server)
    verified = resplog(
        "verify", "--all", "--checkpoint", str(checkpoint), "--public-key", str(pub),
        "--database-url", url,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    erased = resplog("erase", rid, "--reason", "asked to", "--database-url", url)
    assert erased.returncode == 0, erased.stderr


def test_periodic_checkpoints_need_a_key(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'resplog.db'}"
    assert resplog("migrate", "--database-url", url).returncode == 0
    result = resplog("serve", "--checkpoint-every-s", "5", "--database-url", url)
    assert result.returncode == 2 and "--signing-key" in result.stderr
    junk = tmp_path / "junk.pem"
    junk.write_text("nope")
    result = resplog(
        "serve", "--checkpoint-every-s", "5", "--signing-key", str(junk), "--database-url", url
    )
    assert result.returncode == 1 and "signing key" in result.stderr
