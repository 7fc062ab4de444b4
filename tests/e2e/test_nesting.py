"""Deeply nested bodies: refused at the door past `--max-json-depth`, and every request the
server accepts can be read back by every endpoint (retrieve while running and after,
`input_items`, the event log, a continuation): nothing accepted is unreadable later."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.e2e.conftest import Server

LIMIT = 128  # the default --max-json-depth


def nested(levels: int) -> Any:
    """A JSON schema-like value `levels` deep (a dict at each level)."""
    value: Any = {"type": "string"}
    for _ in range(levels - 1):
        value = {"items": value}
    return value


def body_at(depth: int, **more: Any) -> dict[str, Any]:
    """A create whose body nests exactly `depth` levels: the body, `tools`, the tool, its
    `parameters` and `text.format.schema` count as levels of their own."""
    return {
        "model": "scripted",
        "input": "deep",
        "tools": [{"type": "function", "name": "f", "parameters": nested(depth - 3)}],
        "text": {"format": {"type": "json_schema", "name": "s", "schema": nested(depth - 3)}},
        **more,
    }


def test_a_body_one_level_past_the_limit_is_400_and_writes_nothing(
    http: httpx.Client, server: Server
) -> None:
    before = server.count_rows()
    answer = http.post("/v1/responses", json=body_at(LIMIT + 1))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_json"
    raw = b'{"model": "scripted", "input": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    past_recursion = http.post(
        "/v1/responses", content=raw, headers={"content-type": "application/json"}
    )
    assert past_recursion.status_code == 400, past_recursion.text
    assert server.count_rows() == before


def test_a_body_at_the_limit_is_readable_through_every_endpoint(http: httpx.Client) -> None:
    slow = {"scripted_delay_ms": "30", "scripted_tokens": "20"}
    created = http.post("/v1/responses", json=body_at(LIMIT, background=True, metadata=slow))
    assert created.status_code == 200, created.text
    rid = created.json()["id"]
    running = http.get(f"/v1/responses/{rid}")
    assert running.status_code == 200 and running.json()["tools"][0]["parameters"] == nested(
        LIMIT - 3
    )
    _wait_terminal(http, rid)
    for path in (f"/v1/responses/{rid}", f"/v1/responses/{rid}/input_items"):
        assert http.get(path).status_code == 200, path
    replay = http.get(f"/v1/responses/{rid}/events", params={"follow": "false"})
    assert replay.status_code == 200 and b"response.completed" in replay.content
    turn = http.post("/v1/responses", json=body_at(LIMIT, previous_response_id=rid))
    assert turn.status_code == 200, turn.text
    again = http.get(f"/v1/responses/{turn.json()['id']}/input_items")
    assert again.status_code == 200


def test_starting_after_takes_integers_only(http: httpx.Client) -> None:
    rid = http.post("/v1/responses", json={"model": "scripted", "input": "x"}).json()["id"]
    for value in ("3.0", "1e1", "0x2", " 3", "three"):
        for path in (f"/v1/responses/{rid}/events", f"/v1/responses/{rid}"):
            answer = http.get(path, params={"starting_after": value, "stream": "true"})
            assert answer.status_code == 400, (path, value, answer.text)
            assert answer.json()["error"]["param"] == "starting_after"
    ok = http.get(f"/v1/responses/{rid}/events", params={"starting_after": "2", "follow": "false"})
    assert ok.status_code == 200


def _wait_terminal(http: httpx.Client, rid: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if http.get(f"/v1/responses/{rid}").json()["status"] not in ("queued", "in_progress"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{rid} did not finish")
