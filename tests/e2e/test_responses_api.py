"""The Responses API end to end: a real server process driven by the official openai SDK.

Every test runs twice, on a server over PostgreSQL and one over SQLite.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any, get_args

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseIncompleteEvent

from tests.e2e.conftest import Server
from tests.e2e.test_agent_wire import facts
from tests.e2e.test_metrics import scrape, value

SLOW = {"scripted_delay_ms": "20", "scripted_tokens": "400"}


def output_text(response: Response) -> str:
    return response.output_text


def wait_terminal(client: openai.OpenAI, rid: str, timeout: float = 20) -> Response:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.responses.retrieve(rid)
        if r.status not in ("queued", "in_progress"):
            return r
        time.sleep(0.05)
    raise AssertionError(f"{rid} did not finish")


def sse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Parse SSE bytes strictly: every frame is `event: T\\ndata: J` with T == J.type."""
    out = []
    for frame in raw.decode().split("\n\n"):
        if not frame or frame.startswith(":") or frame == "data: [DONE]":
            continue
        head, data = frame.split("\n")
        assert head.startswith("event: ") and data.startswith("data: ")
        payload = json.loads(data.removeprefix("data: "))
        assert payload["type"] == head.removeprefix("event: ")
        out.append((payload["type"], payload))
    return out


def without_keepalives(raw: bytes) -> bytes:
    return b"".join(f + b"\n\n" for f in raw.split(b"\n\n") if f and not f.startswith(b":"))


def test_plain_create_returns_the_completed_response(client: openai.OpenAI) -> None:
    r = client.responses.create(model="scripted", input="hello there")
    assert r.status == "completed"
    assert output_text(r) == "You said: hello there"
    assert r.usage is not None and r.usage.output_tokens > 0
    assert client.responses.retrieve(r.id) == r


def test_streaming_create_yields_dense_sequence_numbers_ending_completed(
    client: openai.OpenAI,
) -> None:
    events = list(client.responses.create(model="scripted", input="stream me", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "You said: stream me"


def test_live_stream_bytes_equal_the_replay_bytes(http: httpx.Client) -> None:
    """With obfuscation off (`stream_options.include_obfuscation: false`, and the
    resume's `include_obfuscation=false`), every route gives the log's bytes as they are."""
    body = {
        "model": "scripted",
        "input": "same bytes",
        "stream": True,
        "stream_options": {"include_obfuscation": False},
    }
    with http.stream("POST", "/v1/responses", json=body) as live:
        assert live.headers["content-type"].startswith("text/event-stream")
        raw = live.read()
    assert raw.endswith(b"data: [DONE]\n\n")
    events = sse_events(raw)
    rid = events[0][1]["response"]["id"]
    assert [p["sequence_number"] for _, p in events] == list(range(len(events)))
    replay = http.get(f"/v1/responses/{rid}/events").content
    resumed = http.get(
        f"/v1/responses/{rid}", params={"stream": "true", "include_obfuscation": "false"}
    ).content
    assert without_keepalives(raw) == without_keepalives(replay) == without_keepalives(resumed)
    jsonl = http.get(f"/v1/responses/{rid}/events", params={"format": "jsonl"}).content
    assert [json.loads(line) for line in jsonl.splitlines()] == [p for _, p in events]
    by_accept = http.get(
        f"/v1/responses/{rid}/events", headers={"Accept": "application/x-ndjson"}
    ).content
    assert by_accept == jsonl


def test_delta_events_carry_obfuscation_unless_turned_off(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """As OpenAI's: every delta event of a stream (create or resume) has a random
    `obfuscation` pad by default; none with `include_obfuscation` false; the log and
    `/events` never hold one."""
    events = list(client.responses.create(model="scripted", input="pad me", stream=True))
    deltas = [e for e in events if e.type.endswith(".delta")]
    assert deltas and all(isinstance(getattr(e, "obfuscation", None), str) for e in deltas)
    assert not any("obfuscation" in e.model_dump() for e in events if e not in deltas)
    rid = events[0].response.id  # type: ignore[union-attr]
    resumed = sse_events(http.get(f"/v1/responses/{rid}", params={"stream": "true"}).content)
    pads = [p["obfuscation"] for t, p in resumed if t.endswith(".delta")]
    assert len(pads) == len(deltas) and pads != [e.obfuscation for e in deltas]  # type: ignore[attr-defined]
    assert b"obfuscation" not in http.get(f"/v1/responses/{rid}/events").content
    off = client.responses.create(
        model="scripted",
        input="no pad",
        stream=True,
        stream_options={"include_obfuscation": False},
    )
    assert not any("obfuscation" in e.model_dump() for e in off)
    plain = http.get(
        f"/v1/responses/{rid}", params={"stream": "true", "include_obfuscation": "false"}
    )
    assert b"obfuscation" not in plain.content
    bad = http.post(
        "/v1/responses",
        json={
            "model": "scripted",
            "input": "x",
            "stream": True,
            "stream_options": {"include_obfuscation": "no"},
        },
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "stream_options.include_obfuscation"


def test_background_responses_carry_a_poll_hint_until_they_end(client: openai.OpenAI) -> None:
    """OpenAI's `openai-poll-after-ms` on a background create and on a retrieve of a
    response that has not ended; none once it has."""
    raw = client.responses.with_raw_response.create(
        model="scripted", input="poll me", background=True, metadata=SLOW
    )
    assert int(raw.headers["openai-poll-after-ms"]) > 0
    rid = raw.parse().id
    running = client.responses.with_raw_response.retrieve(rid)
    assert running.parse().status in ("queued", "in_progress")
    assert int(running.headers["openai-poll-after-ms"]) > 0
    client.responses.cancel(rid)
    wait_terminal(client, rid)
    assert "openai-poll-after-ms" not in client.responses.with_raw_response.retrieve(rid).headers
    plain = client.responses.with_raw_response.create(model="scripted", input="now")
    assert "openai-poll-after-ms" not in plain.headers


def test_moderation_is_accepted_and_recorded_as_not_applied(
    client: openai.OpenAI, server: Server
) -> None:
    """`moderation` is taken (no moderation model here): the response has no results, and
    the request's facts keep the setting under `ignored`."""
    r = client.responses.create(
        model="scripted",
        input="moderate me",
        moderation={"model": "omni-moderation-latest", "policy": {"input": {"mode": "block"}}},
        safety_identifier="user-7",
    )
    assert r.status == "completed" and r.moderation is None
    assert r.safety_identifier == "user-7"
    assert facts(server, r.id)["extra"]["ignored"] == {
        "moderation": {"model": "omni-moderation-latest", "policy": {"input": {"mode": "block"}}}
    }


def test_sdk_stream_helper_and_resume_by_response_id(client: openai.OpenAI) -> None:
    with client.responses.stream(model="scripted", input="helper") as stream:
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == "You said: helper"
    with client.responses.stream(response_id=final.id, starting_after=3) as again:
        seqs = [e.sequence_number for e in again]
        resumed = again.get_final_response()
    assert seqs[0] == 4 and resumed.output_text == final.output_text


def test_background_returns_queued_then_completes(client: openai.OpenAI) -> None:
    r = client.responses.create(model="scripted", input="later", background=True)
    assert r.status == "queued" and r.background
    done = wait_terminal(client, r.id)
    assert done.status == "completed" and done.output_text == "You said: later"


def test_background_stream_dropped_and_resumed_loses_and_duplicates_nothing(
    client: openai.OpenAI,
) -> None:
    stream = client.responses.create(
        model="scripted",
        input="resume",
        background=True,
        stream=True,
        metadata={"scripted_delay_ms": "5", "scripted_tokens": "60"},
    )
    first = []
    for event in stream:
        first.append(event)
        if len(first) == 8:
            break
    stream.close()
    rid = first[0].response.id  # type: ignore[union-attr]
    rest = list(
        client.responses.retrieve(rid, stream=True, starting_after=first[-1].sequence_number)
    )
    seqs = [e.sequence_number for e in first + rest]
    assert seqs == list(range(len(seqs)))
    assert rest[-1].type == "response.completed"
    assert wait_terminal(client, rid).status == "completed"


def test_cancel_mid_generation_stops_the_engine_and_closes_readers(
    client: openai.OpenAI, server: Server
) -> None:
    r = client.responses.create(model="scripted", input="cancel me", background=True, metadata=SLOW)
    reader = client.responses.retrieve(r.id, stream=True)
    seen = []
    for event in reader:
        seen.append(event.type)
        if event.type == "response.output_text.delta":
            break
    cancelled = client.responses.cancel(r.id)
    assert cancelled.status == "cancelled"
    rest = list(reader)  # the live reader closes instead of hanging
    # OpenAI has no cancelled stream event: the SDK reads OpenAI's `response.incomplete`.
    assert isinstance(rest[-1], ResponseIncompleteEvent)
    assert rest[-1].response.status == "cancelled"
    assert client.responses.cancel(r.id) == cancelled  # idempotent
    assert client.responses.retrieve(r.id) == cancelled
    deadline = time.monotonic() + 5
    while f"aborted {r.id}" not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"aborted {r.id}" in server.log_text()
    text = cancelled.output_text
    assert 0 < len(text.split()) < 400


def test_a_cancelled_background_stream_ends_in_events_the_sdk_knows_live_and_resumed(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """The SDK's stream helper reads every event of a stream that is cancelled while it
    reads (none is an unknown type it would guess at), the last is `response.incomplete`
    with status `cancelled`, and a resume from any position ends the same way."""
    seen: list[Any] = []
    cancelled = False
    with client.responses.stream(
        model="scripted", input="cancel me", background=True, metadata=SLOW
    ) as stream:
        for event in stream:
            seen.append(event)
            if event.type == "response.output_text.delta" and not cancelled:
                client.responses.cancel(seen[0].response.id)
                cancelled = True
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            stream.get_final_response()  # as for any ending but `completed`, OpenAI's too
    # Each event is the SDK model of its own type (an unknown type is forced into another).
    assert all(e.type in get_args(type(e).model_fields["type"].annotation) for e in seen)
    last = seen[-1]
    assert isinstance(last, ResponseIncompleteEvent) and last.response.status == "cancelled"
    rid = last.response.id
    assert client.responses.retrieve(rid).status == "cancelled"
    with client.responses.stream(response_id=rid, starting_after=3) as again:
        resumed = list(again)
    assert [e.sequence_number for e in resumed] == list(range(4, len(seen)))
    assert resumed[-1].type == "response.incomplete"
    live = http.get(f"/v1/responses/{rid}/events").text
    assert live.rstrip().endswith("data: [DONE]")
    assert "event: response.cancelled" not in live


def test_cancelling_a_non_background_response_is_a_400(client: openai.OpenAI) -> None:
    r = client.responses.create(model="scripted", input="x")
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.cancel(r.id)
    assert "background" in str(info.value)


def test_delete_makes_the_response_gone(client: openai.OpenAI, http: httpx.Client) -> None:
    r = client.responses.create(model="scripted", input="x")
    deleted = http.delete(f"/v1/responses/{r.id}")
    assert deleted.json() == {"id": r.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    assert http.get(f"/v1/responses/{r.id}/events").status_code == 404
    assert http.delete(f"/v1/responses/{r.id}").status_code == 404


def test_input_items_are_cursor_paginated(client: openai.OpenAI) -> None:
    items: Any = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    r = client.responses.create(model="scripted", input=items)
    page = client.responses.input_items.list(r.id, limit=2, order="asc")
    assert [i.content[0].text for i in page.data] == ["m0", "m1"]  # type: ignore[union-attr]
    assert page.has_more
    everything = [
        i.content[0].text
        for i in client.responses.input_items.list(  # type: ignore[union-attr]
            r.id, limit=2, order="asc"
        )
    ]
    assert everything == ["m0", "m1", "m2", "m3", "m4"]
    desc = client.responses.input_items.list(r.id)
    assert [i.content[0].text for i in desc.data] == ["m4", "m3", "m2", "m1", "m0"]  # type: ignore[union-attr]


def test_a_passed_back_message_phase_round_trips_through_input_items(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """A client passes assistant messages back with their `phase`; it is kept and listed,
    and a message without one lists none (absent, not null)."""
    items: Any = [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "Let me check.", "phase": "commentary"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
            "phase": "final_answer",
        },
        {"role": "user", "content": "Thanks"},
    ]
    r = client.responses.create(model="scripted", input=items)
    listed = client.responses.input_items.list(r.id, order="asc").data
    assert [getattr(i, "phase", None) for i in listed] == [None, "commentary", "final_answer", None]
    raw = http.get(f"/v1/responses/{r.id}/input_items", params={"order": "asc"}).json()["data"]
    assert ["phase" in i for i in raw] == [False, True, True, False]


def test_input_items_with_one_id_twice_are_refused_and_sdk_paging_ends(
    client: openai.OpenAI, server: Server
) -> None:
    """Such a list paged with `after=<that id>` forever: refused at create, as OpenAI does."""
    ids = ["msg_a", "msg_b", "msg_a"]
    items: Any = [{"role": "user", "content": f"m{i}", "id": d} for i, d in enumerate(ids)]
    before = server.count_rows()
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="scripted", input=items)
    assert "Duplicate item found with id msg_a" in info.value.message
    assert server.count_rows() == before
    items[2]["id"] = "msg_c"
    r = client.responses.create(model="scripted", input=items)
    listed = client.responses.input_items.list(r.id, limit=1, order="desc")
    assert [i.id for i in listed] == ["msg_c", "msg_b", "msg_a"]  # auto-pagination ends


def test_previous_response_id_chains_three_turns(client: openai.OpenAI) -> None:
    meta = {"scripted_mode": "transcript"}
    one = client.responses.create(model="scripted", input="first", metadata=meta)
    two = client.responses.create(
        model="scripted", input="second", metadata=meta, previous_response_id=one.id
    )
    three = client.responses.create(
        model="scripted", input="third", metadata=meta, previous_response_id=two.id
    )
    assert three.output_text == (
        f"user: first | assistant: {one.output_text} | user: second | "
        f"assistant: {two.output_text} | user: third"
    )


def test_function_tool_round_trip(client: openai.OpenAI) -> None:
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    first = client.responses.create(model="scripted", input="Paris", tools=tools)
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    second = client.responses.create(
        model="scripted",
        previous_response_id=first.id,
        tools=tools,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert second.output_text == "The function returned: sunny"


def test_a_disconnected_non_background_stream_stops_and_is_recorded(
    client: openai.OpenAI, server: Server
) -> None:
    stream = client.responses.create(model="scripted", input="bye", stream=True, metadata=SLOW)
    rid = None
    for event in stream:
        if event.type == "response.created":
            rid = event.response.id
        if event.type == "response.output_text.delta":
            break
    stream.close()
    assert rid is not None
    final = wait_terminal(client, rid)
    assert final.status == "cancelled"


def test_a_plain_create_whose_client_went_away_is_cancelled(server: Server) -> None:
    """Its id would reach the client only at the end: nobody else could stop it. Its answer
    then goes to nobody: the request log says 499, not the 200 it would have carried."""
    logged = len(server.log_text())
    slow = {"scripted_delay_ms": "50", "scripted_tokens": "100000"}  # about 80 minutes
    body = {"model": "went-away", "input": "bye", "metadata": slow}  # any name is served
    with httpx.Client(base_url=server.base_url) as http, pytest.raises(httpx.ReadTimeout):
        http.post("/v1/responses", json=body, timeout=1.0)
    cancelled = "responses WHERE model = 'went-away' AND status = 'cancelled'"
    deadline = time.monotonic() + 10
    while server.count_rows(cancelled) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.count_rows(cancelled) == 1
    while " POST /v1/responses 499 " not in server.log_text()[logged:]:
        assert time.monotonic() < deadline, server.log_text()[logged:]
        time.sleep(0.05)
    assert " POST /v1/responses 200 " not in server.log_text()[logged:]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "scripted", "input": "x", "bogus": True}, 400, "bogus"),
        ({"model": "scripted", "input": "x", "id": "resp_chosen_by_client"}, 400, "id"),
        ({"model": "scripted", "input": "x", "temperature": "hot"}, 400, "temperature"),
        ({"model": "scripted", "input": "x", "max_output_tokens": 10**9}, 400, "max_output_tokens"),
        ({"model": "scripted"}, 400, "input"),
        (
            {"model": "scripted", "input": "x", "previous_response_id": "resp_missing"},
            404,
            "previous_response_id",
        ),
    ],
)
def test_bad_requests_get_openai_errors_and_write_nothing(
    http: httpx.Client, server: Server, body: dict[str, Any], status: int, param: str | None
) -> None:
    before = server.count_rows()
    r = http.post("/v1/responses", json=body)
    assert r.status_code == status
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param
    assert server.count_rows() == before


def test_a_chain_whose_earlier_turn_was_deleted_names_the_id_the_client_sent(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """OpenAI's 404 for a previous response that cannot be read names the id in the
    request, with its param and code, also when what is gone is an earlier turn."""
    a = client.responses.create(model="scripted", input="one")
    b = client.responses.create(model="scripted", input="two", previous_response_id=a.id)
    c = client.responses.create(model="scripted", input="three", previous_response_id=b.id)
    client.responses.delete(a.id)
    r = http.post(
        "/v1/responses", json={"model": "scripted", "input": "four", "previous_response_id": c.id}
    )
    assert r.status_code == 404
    assert r.json()["error"] == {
        "message": f"Previous response with id '{c.id}' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="scripted", input="x", previous_response_id="resp_gone")
    assert info.value.code == "previous_response_not_found"


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("PUT", "/v1/responses/compact", 405, "method_not_allowed"),
        ("PUT", "/v1/responses", 405, "method_not_allowed"),
        ("GET", "/v1/nothing/here", 404, "unknown_url"),
    ],
)
def test_unknown_routes_and_wrong_methods_are_openai_errors_with_a_request_id(
    http: httpx.Client, method: str, path: str, status: int, code: str
) -> None:
    r = http.request(method, path, json={})
    assert r.status_code == status
    assert r.headers["x-request-id"].startswith("req_")
    assert len(r.headers.get_list("x-request-id")) == 1
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("invalid_request_error", code)


def test_malformed_and_oversized_bodies_are_4xx(http: httpx.Client, server: Server) -> None:
    before = server.count_rows()
    bad = http.post(
        "/v1/responses", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    huge = http.post(
        "/v1/responses",
        content=b'{"model":"scripted","input":"' + b"x" * (9 << 20) + b'"}',
        headers={"content-type": "application/json"},
    )
    assert huge.status_code == 413 and "error" in huge.json()
    assert server.count_rows() == before


def test_the_creates_own_endpoint_answers_as_the_routes_do(
    http: httpx.Client, server: Server
) -> None:
    """The create's route (adapters/http/routes.py): its other methods, a path with a slash,
    a chunked body over the limit and a client that leaves mid-body are answered as the
    other routes are, and write nothing; the client that left is logged and counted as 499,
    not as the server's 500."""
    before, logged = server.count_rows(), len(server.log_text())
    options = http.options("/v1/responses")
    assert options.status_code == 204 and options.headers["allow"] == "POST, OPTIONS"
    wrong = http.get("/v1/responses")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST, OPTIONS"
    assert wrong.json()["error"]["message"] == (
        "Method GET is not allowed on /v1/responses; allowed: POST, OPTIONS."
    )

    def chunks() -> Any:  # no Content-Length: the limit is met while the body is read
        yield b'{"model":"scripted","input":"'
        for _ in range(10):
            yield b"x" * (1 << 20)
        yield b'"}'

    huge = http.post(
        "/v1/responses", content=chunks(), headers={"content-type": "application/json"}
    )
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    assert server.count_rows() == before

    def left() -> float:  # creates whose client left before any answer (status 499)
        labels = {"method": "POST", "route": "/v1/responses", "status": "499"}
        return value(scrape(http), "resplog_http_requests_total", **labels)

    left_before = left()
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as conn:
        conn.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n" + b'{"model":"scripted","input":"'
        )
        time.sleep(0.2)
    # Nobody was answered, and it was not the server's fault: the request log and the
    # metrics say 499 (the client closed the request), not 500.
    deadline = time.monotonic() + 5
    while " POST /v1/responses 499 " not in server.log_text()[logged:]:
        assert time.monotonic() < deadline, server.log_text()[logged:]
        time.sleep(0.05)
    assert " 500 " not in server.log_text()[logged:]
    assert left() == left_before + 1
    slash = http.post("/v1/responses/", json={"model": "scripted", "input": "hi"})
    assert slash.status_code == 200 and slash.json()["status"] == "completed"
    assert server.count_rows() > before  # the one create, after the refusals wrote nothing
    assert "Traceback" not in server.log_text()[logged:]


def test_ids_are_checked_and_unknown_ids_are_404(client: openai.OpenAI, http: httpx.Client) -> None:
    assert http.get("/v1/responses/not-an-id").status_code == 400
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_doesnotexist")
    assert http.post("/v1/responses/resp_doesnotexist/cancel").status_code == 404
    assert http.get("/v1/responses/resp_doesnotexist/input_items").status_code == 404


def test_models_health_ready_and_openapi(client: openai.OpenAI, http: httpx.Client) -> None:
    assert [m.id for m in client.models.list()] == ["scripted"]
    # `models.retrieve`: any name a create may use (the scripted engine takes any), slashes
    # and all, as vLLM's served names have them.
    for name in ("scripted", "openai/gpt-oss-120b"):
        got = client.models.retrieve(name)
        assert (got.id, got.owned_by, got.object) == (name, "resplog-scripted", "model")
    assert http.get("/health").status_code == 200
    assert http.get("/ready").json()["status"] == "ready"
    doc = http.get("/openapi.json").json()
    for path in (
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/cancel",
        "/v1/responses/{response_id}/events",
        "/v1/responses/{response_id}/input_items",
        "/v1/models",
        "/v1/models/{model}",
    ):
        assert path in doc["paths"], path
    body = doc["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"].endswith("CreateResponseBody")
    assert "ResponseObject" in json.dumps(doc["components"]["schemas"])
    # Litestar's own pages serve the same document, the create's operation (written in
    # app.py: its body is decoded by hand) in it.
    assert http.get("/schema/openapi.json").json() == doc
    assert http.get("/schema").status_code == 200


async def test_many_concurrent_streams_all_complete(aclient: openai.AsyncOpenAI) -> None:
    async def one(i: int) -> list[int]:
        stream = await aclient.responses.create(
            model="scripted", input=f"n{i}", stream=True, metadata={"scripted_delay_ms": "2"}
        )
        return [e.sequence_number async for e in stream]

    results = await asyncio.gather(*(one(i) for i in range(24)))
    assert all(seqs == list(range(len(seqs))) for seqs in results)


async def test_async_client_background_and_retrieve(aclient: openai.AsyncOpenAI) -> None:
    r = await aclient.responses.create(model="scripted", input="async", background=True)
    for _ in range(200):
        r = await aclient.responses.retrieve(r.id)
        if r.status == "completed":
            break
        await asyncio.sleep(0.05)
    assert r.status == "completed" and r.output_text == "You said: async"
