"""`serve --auth keys`: every /v1 request needs a live key; health, readiness and the schema
stay open; `--auth none` only on loopback, and announced."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec
import openai
import pytest

from adapters.cli.access_flags import access_settings, is_loopback
from domain.errors import ResplogError
from service.wire.limits import Limits
from tests.e2e.conftest import RESPLOG, Server
from tests.e2e.security.conftest import http, log_state, sdk


def assert_invalid_key(response: httpx.Response) -> None:
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer rsk-not-a-key"},
        {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
        {"Authorization": "rsk-no-scheme"},
    ],
)
def test_v1_without_a_live_key_is_401_and_writes_nothing(
    keyed: Server, headers: dict[str, str]
) -> None:
    before = log_state(keyed)
    with httpx.Client(base_url=keyed.base_url, headers=headers, timeout=30) as client:
        for method, path in [
            ("GET", "/v1/models"),
            ("POST", "/v1/responses"),
            ("OPTIONS", "/v1/responses"),
            ("OPTIONS", "/v1/models"),
            ("GET", "/v1/responses/resp_x"),
            ("GET", "/v1/responses/resp_x/events"),
            ("POST", "/v1/responses/resp_x/cancel"),
            ("DELETE", "/v1/responses/resp_x"),
        ]:
            body = {"model": "scripted", "input": "x"} if method == "POST" else None
            assert_invalid_key(client.request(method, path, json=body))
    assert log_state(keyed) == before


def test_health_ready_and_the_schema_stay_open(keyed: Server) -> None:
    with http(keyed, None) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/ready").json()["status"] == "ready"
        doc = client.get("/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert doc["paths"]["/v1/responses"]["post"]["security"] == [{"bearer": []}]
    assert "security" not in doc["paths"]["/health"]["get"]


def test_a_key_works_with_the_sdk_and_the_scheme_is_case_insensitive(
    keyed: Server, key_of: Callable[[str], str]
) -> None:
    key = key_of("alice")
    with sdk(keyed, key) as client:
        r = client.responses.create(model="scripted", input="hello")
        assert r.output_text == "You said: hello"
    with httpx.Client(base_url=keyed.base_url, timeout=30) as raw:
        ok = raw.get(f"/v1/responses/{r.id}", headers={"Authorization": f"bearer  {key}"})
    assert ok.status_code == 200 and ok.json()["id"] == r.id


def test_a_revoked_key_stops_working(keyed: Server, key_of: Callable[[str], str]) -> None:
    """The server caches no lookup here (`--key-cache-s 0`), so the next request fails."""
    key = key_of("carol")
    with sdk(keyed, key) as client:
        assert [m.id for m in client.models.list()] == ["scripted"]
        listed = subprocess.run(
            [RESPLOG, "keys", "list", "--json", "--owner", "carol"],
            env={"RESPLOG_DATABASE_URL": keyed.database_url},
            capture_output=True,
            text=True,
            check=True,
        )
        key_id = next(k["id"] for k in json.loads(listed.stdout))
        subprocess.run(
            [RESPLOG, "keys", "revoke", key_id, "--database-url", keyed.database_url],
            capture_output=True,
            check=True,
        )
        with pytest.raises(openai.AuthenticationError) as info:
            client.models.list()
    assert info.value.code == "invalid_api_key"


def run_serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RESPLOG, "serve", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_auth_none_is_refused_on_a_public_bind_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    subprocess.run([RESPLOG, "migrate", "--database-url", url], capture_output=True, check=True)
    result = run_serve("--database-url", url, "--host", "0.0.0.0", "--auth", "none")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--auth none" in lines[0] and "loopback" in lines[0]


@pytest.mark.parametrize(
    ("host", "auth", "expected"),
    [
        ("127.0.0.1", None, "none"),
        ("localhost", None, "none"),
        ("::1", None, "none"),
        ("127.0.0.2", "none", "none"),
        ("0.0.0.0", None, "keys"),
        ("10.1.2.3", None, "keys"),
        ("example.com", None, "keys"),
        ("127.0.0.1", "keys", "keys"),
    ],
)
def test_auth_defaults_to_none_on_loopback_only(host: str, auth: str | None, expected: str) -> None:
    # Every limit at its default, so a new limit does not break this test of the auth rule.
    limits = {f.name: f.default for f in msgspec.structs.fields(Limits)}
    options = {
        "auth": auth,
        "rate_limit": 0.0,
        "rate_burst": 0,
        "max_streams_per_key": 1,
        "key_cache_s": 1.0,
        "send_timeout_s": 1.0,
        "metrics": "auto",
        "metrics_key": None,
        "audit_view": "auto",
        "audit_key": None,
        **limits,
    }
    assert access_settings(host, dict(options))["access"].auth == expected
    if not is_loopback(host):
        with pytest.raises(ResplogError):
            access_settings(host, {**options, "auth": "none"})


def test_auth_none_is_announced_at_start_up(server: Server) -> None:
    assert "auth: none" in server.log_text()
