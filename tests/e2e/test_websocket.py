"""WebSocket mode end to end, through the official SDK's `client.responses.connect()` against
real `resplog serve` processes on PostgreSQL and SQLite (docs/websocket.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.resources.responses.responses import ResponsesConnection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from tests.e2e.conftest import Server
from tests.e2e.test_agent_wire import facts

TERMINAL = ("response.completed", "response.incomplete", "response.failed", "response.cancelled")
TRANSCRIPT = {"scripted_mode": "transcript"}
SLOW = {"scripted_delay_ms": "20", "scripted_tokens": "400"}  # some 8 s


@pytest.fixture
def conn(client: openai.OpenAI) -> Iterator[ResponsesConnection]:
    with client.responses.connect() as c:
        yield c


def turn(conn: ResponsesConnection, **body: Any) -> list[dict[str, Any]]:
    """Send one `response.create` and read until its terminal (or error) event; each
    event as the JSON the socket carried."""
    conn.response.create(**body)
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] not in (*TERMINAL, "error"):
        events.append(json.loads(conn.recv_bytes()))
    return events


def raw_error(conn: ResponsesConnection, message: str | bytes) -> dict[str, Any]:
    conn.send_raw(message)
    event: dict[str, Any] = json.loads(conn.recv_bytes())
    assert event["type"] == "error", event
    return event


def stored(http: httpx.Client, rid: str) -> list[dict[str, Any]]:
    r = http.get(f"/v1/responses/{rid}/events", params={"format": "jsonl", "follow": "false"})
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines()]


def final_text(events: list[dict[str, Any]]) -> str:
    end = events[-1]["response"]
    return "".join(
        part["text"]
        for item in end["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def test_one_response_streams_the_events_its_log_replays(
    conn: ResponsesConnection, http: httpx.Client
) -> None:
    conn.response.create(model="scripted", input="hello socket")
    frames = [conn.recv_bytes()]
    while json.loads(frames[-1])["type"] not in TERMINAL:
        frames.append(conn.recv_bytes())
    events = [json.loads(f) for f in frames]
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert any(e["type"] == "response.output_text.delta" for e in events)
    rid = events[0]["response"]["id"]
    assert stored(http, rid) == events
    # Byte for byte: the socket carried the stored bytes.
    params = {"format": "jsonl", "follow": "false"}
    assert http.get(f"/v1/responses/{rid}/events", params=params).content.splitlines() == frames


def test_the_sdk_parses_the_events(conn: ResponsesConnection) -> None:
    conn.response.create(model="scripted", input="typed")
    kinds = []
    for event in conn:
        kinds.append(event.type)
        if event.type == "response.completed":
            assert event.response.output_text == "You said: typed"
            break
    assert kinds[0] == "response.created"


def test_several_responses_in_sequence_on_one_connection(conn: ResponsesConnection) -> None:
    ids = []
    for i in range(3):
        events = turn(conn, model="scripted", input=f"turn {i}")
        assert events[-1]["type"] == "response.completed"
        assert final_text(events) == f"You said: turn {i}"
        ids.append(events[0]["response"]["id"])
    assert len(set(ids)) == 3


def test_a_continuation_over_the_socket_sees_the_conversation(
    conn: ResponsesConnection, client: openai.OpenAI
) -> None:
    one = turn(conn, model="scripted", input="first", metadata=TRANSCRIPT)
    one_id, one_text = one[0]["response"]["id"], final_text(one)
    two = turn(
        conn, model="scripted", input="second", metadata=TRANSCRIPT, previous_response_id=one_id
    )
    assert final_text(two) == f"user: first | assistant: {one_text} | user: second"
    # Stored responses continue over HTTP as well: the socket wrote the same log.
    three = client.responses.create(
        model="scripted",
        input="third",
        metadata=TRANSCRIPT,
        previous_response_id=two[0]["response"]["id"],
    )
    assert three.output_text.startswith("user: first | assistant: ")
    tail = f"| user: second | assistant: {final_text(two)} | user: third"
    assert three.output_text.endswith(tail)


def test_generate_false_records_a_turn_with_no_output_that_a_later_one_continues(
    conn: ResponsesConnection, client: openai.OpenAI, http: httpx.Client, server: Server
) -> None:
    """OpenAI's warm-up (`generate: false`, openai-python `ResponsesClientEvent`): the
    response is recorded and completed at once, with no output and no tokens, and no engine
    is asked; the request's facts say so. A later turn continues it, over the socket (from
    the connection's cache) and over HTTP (from the log)."""
    warm = turn(conn, model="scripted", input="the setup", metadata=TRANSCRIPT, generate=False)
    kinds = [e["type"] for e in warm]
    assert kinds == ["response.created", "response.in_progress", "response.completed"]
    end = warm[-1]["response"]
    assert end["output"] == [] and end["usage"]["total_tokens"] == 0
    rid = warm[0]["response"]["id"]
    assert stored(http, rid) == warm
    assert facts(server, rid)["extra"] == {"generate": False}
    on = turn(conn, model="scripted", input="go", metadata=TRANSCRIPT, previous_response_id=rid)
    assert final_text(on) == "user: the setup | user: go"
    over_http = client.responses.create(
        model="scripted", input="again", metadata=TRANSCRIPT, previous_response_id=rid
    )
    assert over_http.output_text == "user: the setup | user: again"


def test_a_store_false_chain_continues_only_on_its_connection(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    with client.responses.connect() as conn:
        one = turn(conn, model="scripted", input="secret", store=False, metadata=TRANSCRIPT)
        one_id = one[0]["response"]["id"]
        two = turn(
            conn,
            model="scripted",
            input="more",
            store=False,
            metadata=TRANSCRIPT,
            previous_response_id=one_id,
        )
        assert two[-1]["type"] == "response.completed"
        assert final_text(two) == f"user: secret | assistant: {final_text(one)} | user: more"
        two_id = two[0]["response"]["id"]
    # Written and hidden: no read sees it, and HTTP cannot continue it.
    for rid in (one_id, two_id):
        assert http.get(f"/v1/responses/{rid}").status_code == 404
        assert http.get(f"/v1/responses/{rid}/events").status_code == 404
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="scripted", input="x", previous_response_id=two_id)
    # A new connection (a reconnect) does not know it, and says why.
    with client.responses.connect() as again:
        events = turn(again, model="scripted", input="x", previous_response_id=two_id)
        error = events[-1]
        assert error["status"] == 400
        assert error["error"]["code"] == "previous_response_not_found"
        assert error["error"]["param"] == "previous_response_id"
        assert "store=false" in error["error"]["message"]


def test_a_failed_continuation_evicts_the_cache(conn: ResponsesConnection) -> None:
    one = turn(conn, model="scripted", input="keep me", store=False)
    one_id = one[0]["response"]["id"]
    refused = turn(conn, model="x" * 300, input="again", store=False, previous_response_id=one_id)
    assert refused[-1]["type"] == "error" and refused[-1]["error"]["param"] == "model"
    events = turn(conn, model="scripted", input="again", store=False, previous_response_id=one_id)
    assert events[-1]["type"] == "error"
    assert events[-1]["error"]["code"] == "previous_response_not_found"
    # The connection is still usable.
    assert turn(conn, model="scripted", input="fresh")[-1]["type"] == "response.completed"


def test_an_unknown_previous_response_is_an_error_and_the_socket_stays(
    conn: ResponsesConnection, server: Server
) -> None:
    before = server.count_rows("responses")
    events = turn(conn, model="scripted", input="x", previous_response_id="resp_nowhere")
    assert len(events) == 1
    assert events[0]["status"] == 400
    assert events[0]["error"]["code"] == "previous_response_not_found"
    assert server.count_rows("responses") == before
    assert turn(conn, model="scripted", input="still here")[-1]["type"] == "response.completed"


BAD: list[tuple[str | bytes, str | None, str | None]] = [
    ("not json", None, "invalid_json"),
    (b"\xff\xfe", None, "invalid_json"),
    ("[1, 2]", None, "invalid_json"),
    ('{"model": "scripted", "input": "x"}', "type", "missing_required_parameter"),
    ('{"type": "response.cancel"}', "type", "invalid_value"),
    ('{"type": "response.create", "model": "scripted", "input": "x", "bogus": 1}', "bogus", None),
    (
        '{"type": "response.create", "model": "scripted", "temperature": "hot", "input": "x"}',
        "temperature",
        None,
    ),
    ('{"type": "response.create", "model": "scripted"}', "input", None),
    (
        '{"type": "response.create", "model": "scripted", "input": "x", "stream": false}',
        "stream",
        "invalid_value",
    ),
    (
        '{"type": "response.create", "model": "scripted", "input": "x", "stream_id": 7}',
        "stream_id",
        "invalid_value",
    ),
    (
        '{"type": "response.create", "model": "scripted", "input": "x", "generate": "no"}',
        "generate",
        "invalid_value",
    ),
    ("[" * 10_000, None, "invalid_json"),
]


def test_malformed_messages_get_error_events_and_write_nothing(
    conn: ResponsesConnection, server: Server
) -> None:
    before = (server.count_rows("responses"), server.count_rows("events"))
    for message, param, code in BAD:
        event = raw_error(conn, message)
        assert event["status"] == 400, (message, event)
        error = event["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
        assert error["type"] == "invalid_request_error"
        assert isinstance(error["code"], str) and error["code"]  # the spec requires one
        assert error["param"] == param, (message, error)
        if code is not None:
            assert error["code"] == code, (message, error)
    assert (server.count_rows("responses"), server.count_rows("events")) == before
    assert turn(conn, model="scripted", input="after all that")[-1]["type"] == (
        "response.completed"
    )


def test_lanes_run_side_by_side_and_echo_their_stream_id(conn: ResponsesConnection) -> None:
    conn.response.create(model="scripted", input="slow", stream_id="a", metadata=SLOW)
    conn.response.create(model="scripted", input="quick", stream_id="b")
    by_lane: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    while not by_lane["b"] or by_lane["b"][-1]["type"] not in TERMINAL:
        event = json.loads(conn.recv_bytes())
        by_lane[event["stream_id"]].append(event)
    # b finished while a was still streaming: the lanes are concurrent.
    assert by_lane["b"][-1]["type"] == "response.completed"
    assert by_lane["a"] and by_lane["a"][-1]["type"] not in TERMINAL
    assert [e["sequence_number"] for e in by_lane["b"]] == list(range(len(by_lane["b"])))


def lane_turn(conn: ResponsesConnection, lane: str, **body: Any) -> list[dict[str, Any]]:
    events = turn(conn, stream_id=lane, **body)
    assert {e.get("stream_id") for e in events} == {lane}, events
    return events


def test_a_new_lane_forks_from_another_lanes_response(conn: ResponsesConnection) -> None:
    """openai-python `ResponsesClientEvent.stream_id`: "`stream_id` controls routing;
    `previous_response_id` controls conversation lineage, so a new lane can fork from a
    response created on another lane." With `store: false` only the connection's memory
    can continue a response, so each branch below is served from it."""
    root = lane_turn(conn, "a", model="scripted", input="root", store=False, metadata=TRANSCRIPT)
    root_id, said = root[0]["response"]["id"], final_text(root)
    common = {"model": "scripted", "store": False, "metadata": TRANSCRIPT}
    left = lane_turn(conn, "b", input="left", previous_response_id=root_id, **common)
    right = lane_turn(conn, "a", input="right", previous_response_id=root_id, **common)
    assert final_text(left) == f"user: root | assistant: {said} | user: left"
    assert final_text(right) == f"user: root | assistant: {said} | user: right"
    # Each branch goes on from its own lane's last response; a third lane forks the fork.
    left_id = left[0]["response"]["id"]
    on = lane_turn(conn, "b", input="on", previous_response_id=left_id, **common)
    assert final_text(on).endswith(f"| user: left | assistant: {final_text(left)} | user: on")
    on_id = on[0]["response"]["id"]
    twig = lane_turn(conn, "c", input="twig", previous_response_id=on_id, **common)
    assert final_text(twig).endswith(f"| user: on | assistant: {final_text(on)} | user: twig")
    assert "right" not in final_text(on) + final_text(twig)
    # The memory holds each lane's last response: `left` is no longer one, and was not stored.
    gone = turn(conn, stream_id="d", input="x", previous_response_id=left_id, **common)
    assert gone[-1]["error"]["code"] == "previous_response_not_found"


def test_an_error_event_names_its_lane_and_the_lane_goes_on(conn: ResponsesConnection) -> None:
    """openai-python `ResponseWsError`: `status`, `error` and the lane's `stream_id`; the
    socket and the lane stay usable, and another lane is not disturbed."""
    refused = turn(conn, model="scripted", input=[{"type": "bogus"}], stream_id="x")
    error = refused[-1]
    assert error["type"] == "error" and error["stream_id"] == "x" and error["status"] == 400
    assert error["error"]["type"] == "invalid_request_error" and error["error"]["param"]
    assert "headers" not in error["error"]  # nothing an HTTP answer would add
    assert lane_turn(conn, "x", model="scripted", input="fine")[-1]["type"] == "response.completed"
    assert lane_turn(conn, "y", model="scripted", input="fine")[-1]["type"] == "response.completed"


def test_a_dropped_connection_cancels_its_response(client: openai.OpenAI, server: Server) -> None:
    with client.responses.connect() as conn:
        conn.response.create(model="scripted", input="bye", metadata=SLOW)
        created = json.loads(conn.recv_bytes())
        while json.loads(conn.recv_bytes())["type"] != "response.output_text.delta":
            pass
    rid = created["response"]["id"]
    row = f"responses WHERE id = '{rid}' AND status = 'cancelled'"
    reason = (
        f"events WHERE stream_id = '{rid}' AND type = 'response.incomplete' "
        "AND facts LIKE '%client_disconnected%'"
    )
    deadline = time.monotonic() + 15
    while server.count_rows(row) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.count_rows(row) == 1 and server.count_rows(reason) == 1


def test_a_dropped_background_response_runs_on_and_resumes_over_http(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    quick = {"scripted_delay_ms": "5", "scripted_tokens": "200"}
    with client.responses.connect() as conn:
        conn.response.create(model="scripted", input="bg", background=True, metadata=quick)
        seen = [json.loads(conn.recv_bytes())]
        while seen[-1]["type"] != "response.output_text.delta":
            seen.append(json.loads(conn.recv_bytes()))
    rid = seen[0]["response"]["id"]
    last = seen[-1]["sequence_number"]
    with http.stream(
        "GET", f"/v1/responses/{rid}", params={"stream": "true", "starting_after": last}
    ) as r:
        frames = [line[6:] for line in r.iter_lines() if line.startswith("data: {")]
    rest = [json.loads(f) for f in frames]
    assert rest[0]["sequence_number"] == last + 1
    assert rest[-1]["type"] == "response.completed"


def test_the_handshake_carries_a_request_id(server: Server) -> None:
    url = server.base_url.replace("http://", "ws://") + "/v1/responses"
    with ws_connect(url) as ws:
        assert ws.response is not None
        assert ws.response.headers["x-request-id"].startswith("req_")


def test_an_oversized_message_is_refused_and_a_huge_one_closes(server: Server) -> None:
    """`--max-body-bytes` (8 MiB by default) bounds a message like a POST body; a frame
    over twice that is the WebSocket layer's to refuse (close 1009)."""
    url = server.base_url.replace("http://", "ws://") + "/v1/responses"
    big = json.dumps({"type": "response.create", "model": "scripted", "input": "x" * (9 << 20)})
    with ws_connect(url, max_size=None) as ws:
        ws.send(big)
        event = json.loads(ws.recv())
        assert event["type"] == "error" and event["status"] == 413
        assert event["error"]["code"] == "request_too_large"
        ws.send(json.dumps({"type": "response.create", "model": "scripted", "input": "ok"}))
        while json.loads(ws.recv())["type"] != "response.completed":
            pass
        ws.send("x" * (17 << 20))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
