"""Limits set by `serve` flags and `RESPLOG_*` variables: request shapes (400), body size
(413), per-key rate and concurrent streams (429 with Retry-After); none writes anything."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Server, stop_server
from tests.e2e.security.conftest import KEYED, http, launch, log_state, make_key, sdk

FLAGS = (
    *KEYED,
    *("--rate-limit", "0.2", "--rate-burst", "30", "--max-streams-per-key", "2"),
    *("--max-body-bytes", "4000", "--max-input-items", "3", "--max-text-chars", "50"),
    *("--max-tools", "2", "--max-tool-schema-bytes", "200"),
)
ENV = {
    "RESPLOG_MAX_OUTPUT_TOKENS": "64",
    "RESPLOG_MAX_METADATA_PAIRS": "2",
    "RESPLOG_MAX_METADATA_KEY_CHARS": "20",
    "RESPLOG_MAX_METADATA_VALUE_CHARS": "10",
}


@pytest.fixture(scope="module")
def strict(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    srv = launch(request, tmp_path_factory, "sqlite", *FLAGS, env=ENV)
    yield srv
    stop_server(srv)


@pytest.fixture
def key(strict: Server) -> str:
    """A fresh key per test: quotas are per key."""
    return make_key(strict, "tester")


def tool(name: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "function", "name": name, "parameters": params or {"type": "object"}}


AT_LIMITS: dict[str, Any] = {
    "model": "scripted",
    "input": [{"role": "user", "content": "x" * 50}] * 3,
    "tools": [tool("a"), tool("b")],
    "tool_choice": "none",
    "max_output_tokens": 64,
    "metadata": {"k" * 20: "v" * 10, "other": "x"},
}


@pytest.mark.parametrize(
    ("change", "param", "code"),
    [
        ({"input": [{"role": "user", "content": "x"}] * 4}, "input", "array_above_max_length"),
        ({"input": "x" * 51}, "input", "string_above_max_length"),
        ({"instructions": "x" * 51}, "instructions", "string_above_max_length"),
        ({"tools": [tool("a"), tool("b"), tool("c")]}, "tools", "array_above_max_length"),
        (
            {"tools": [tool("a", {"type": "object", "description": "d" * 200})]},
            "tools[0].parameters",
            "invalid_value",
        ),
        ({"max_output_tokens": 65}, "max_output_tokens", "invalid_value"),
        ({"metadata": {"a": "1", "b": "2", "c": "3"}}, "metadata", "object_above_max_properties"),
        ({"metadata": {"k" * 21: "v"}}, "metadata", "string_above_max_length"),
        ({"metadata": {"k": "v" * 11}}, "metadata.k", "string_above_max_length"),
    ],
)
def test_each_request_limit_is_configurable_and_refused_with_400(
    strict: Server, key: str, change: dict[str, Any], param: str, code: str
) -> None:
    before = log_state(strict)
    with http(strict, key) as client:
        answer = client.post("/v1/responses", json={**AT_LIMITS, **change})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    assert answer.json()["error"]["code"] == code
    assert log_state(strict) == before


def test_a_request_at_every_limit_is_accepted(strict: Server, key: str) -> None:
    with http(strict, key) as client:
        answer = client.post("/v1/responses", json=AT_LIMITS)
    assert answer.status_code == 200 and answer.json()["status"] == "completed"


def test_a_body_over_the_size_limit_is_413(strict: Server, key: str) -> None:
    before = log_state(strict)
    with http(strict, key) as client:
        answer = client.post("/v1/responses", json={"model": "scripted", "input": "x" * 5000})
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "request_too_large"
    assert log_state(strict) == before


def test_a_key_over_its_rate_gets_429_with_retry_after_and_others_do_not(
    strict: Server, key: str
) -> None:
    """Burst 30, then one request per 5 s: the 31st quick request is refused."""
    with http(strict, key) as client:
        assert all(client.get("/v1/models").status_code == 200 for _ in range(30))
        before = log_state(strict)
        refused = client.post("/v1/responses", json={"model": "scripted", "input": "x"})
        assert log_state(strict) == before
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    with sdk(strict, key) as client, pytest.raises(openai.RateLimitError):
        client.models.list()
    with http(strict, make_key(strict, "someone-else")) as other:
        assert other.get("/v1/models").status_code == 200


def test_concurrent_streams_per_key_are_limited_and_a_closed_one_frees_its_slot(
    strict: Server, key: str
) -> None:
    slow = {"scripted_delay_ms": "50", "scripted_tokens": "2000"}
    with http(strict, key) as client:
        rid = client.post(
            "/v1/responses",
            json={"model": "scripted", "input": "x", "background": True, "metadata": slow},
        ).json()["id"]
        events = f"/v1/responses/{rid}/events"
        with client.stream("GET", events) as one, client.stream("GET", events) as two:
            assert one.status_code == two.status_code == 200
            before = log_state(strict, running=rid)
            third = client.get(f"/v1/responses/{rid}", params={"stream": "true"})
            created = client.post(
                "/v1/responses", json={"model": "scripted", "input": "x", "stream": True}
            )
            assert log_state(strict, running=rid) == before
        assert third.status_code == created.status_code == 429
        assert created.json()["error"]["code"] == "rate_limit_exceeded"
        assert third.headers["retry-after"] == "1"
        assert _eventually_streams(client, events)
        client.post(f"/v1/responses/{rid}/cancel")


def _eventually_streams(client: httpx.Client, path: str, tries: int = 10) -> bool:
    """The server frees a slot when it notices the client left; ask a few times."""
    for _ in range(tries):
        with client.stream("GET", path, params={"follow": "false"}) as again:
            if again.status_code == 200:
                return True
        time.sleep(0.1)
    return False


def test_other_keys_keep_their_own_stream_slots(strict: Server, key: str) -> None:
    other = make_key(strict, "tester")  # same owner, another key: its own slots
    with http(strict, key) as mine, http(strict, other) as theirs:
        rid = mine.post(
            "/v1/responses",
            json={
                "model": "scripted",
                "input": "x",
                "background": True,
                "metadata": {"scripted_delay_ms": "50", "scripted_tokens": "2000"},
            },
        ).json()["id"]
        path = f"/v1/responses/{rid}/events"
        with mine.stream("GET", path), mine.stream("GET", path), theirs.stream("GET", path) as ok:
            assert ok.status_code == 200
        mine.post(f"/v1/responses/{rid}/cancel")


def test_a_resume_position_beyond_the_log_is_400_not_a_server_error(
    strict: Server, key: str
) -> None:
    with http(strict, key) as client:
        rid = client.post("/v1/responses", json={"model": "scripted", "input": "x"}).json()["id"]
        for path, params in [
            (f"/v1/responses/{rid}", {"stream": "true", "starting_after": 10**12}),
            (f"/v1/responses/{rid}/events", {"starting_after": -2}),
        ]:
            answer = client.get(path, params=params)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["param"] == "starting_after"
