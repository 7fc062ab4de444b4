"""The edge (adapters/http/edge.py): every HTTP request gets one id, in its scope's state
and once in the `x-request-id` header; a watcher sees the response's messages until it has
seen enough; and only an app inside the edge can be watched."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.http.edge import edge
from adapters.http.watch import CLIENT_CLOSED, ON_GONE, answered, unanswered, watch

Message = dict[str, Any]


class Recorder:
    """A watcher that wants `wanted` messages."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.seen: list[Message] = []

    def sent(self, message: Any) -> bool:
        self.seen.append(dict(message))
        return len(self.seen) < self.wanted


def app_watched_by(*watchers: Recorder) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        for watcher in watchers:
            watch(scope, watcher)
        await send({"type": "http.response.start", "status": 201, "headers": [(b"a", b"1")]})
        for body in (b"one", b"two", b"three"):
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


async def nothing() -> Message:
    return {"type": "http.disconnect"}


async def test_a_request_gets_one_id_in_its_state_and_its_header() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {"type": "http"}
    await edge(app_watched_by(), 30)(scope, nothing, send)
    rid = scope["state"]["request_id"]
    assert rid.startswith("req_")
    headers = sent[0]["headers"]
    assert headers == [(b"a", b"1"), (b"x-request-id", rid.encode())]
    assert [m.get("body") for m in sent[1:]] == [b"one", b"two", b"three", b""]


async def test_watchers_see_the_response_until_they_have_seen_enough() -> None:
    start_only, first_body, all_of_it = Recorder(1), Recorder(2), Recorder(99)

    async def send(message: Message) -> None:
        pass

    app = app_watched_by(start_only, first_body, all_of_it)
    await edge(app, 30)({"type": "http"}, nothing, send)
    assert [m["type"] for m in start_only.seen] == ["http.response.start"]
    assert start_only.seen[0]["status"] == 201
    assert [m.get("body") for m in first_body.seen] == [None, b"one"]
    assert [m.get("body") for m in all_of_it.seen] == [None, b"one", b"two", b"three", b""]


async def test_a_websocket_gets_no_id_from_the_edge() -> None:
    scope: dict[str, Any] = {"type": "websocket"}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    await edge(app, 30)(scope, nothing, nothing)
    assert "state" not in scope


async def test_an_app_outside_the_edge_cannot_be_watched() -> None:
    async def send(message: Message) -> None:
        pass

    with pytest.raises(RuntimeError, match=r"inside adapters\.http\.edge"):
        await app_watched_by(Recorder(1))({"type": "http"}, nothing, send)


def test_a_request_with_no_response_is_499_when_its_client_left_first_else_500() -> None:
    """What the request log, the metrics and the traces record for a request whose app ended
    without beginning a response (adapters/http/watch.py `unanswered`)."""
    assert unanswered({"type": "http", ON_GONE: None}) == CLIENT_CLOSED == 499  # it left
    assert unanswered({"type": "http", ON_GONE: []}) == 500  # still there: the app failed
    assert unanswered({"type": "http"}) == 500  # a server that does not say


def test_a_response_begun_after_its_client_left_is_499_else_its_own_status() -> None:
    """A plain create answers when its generation ends; a client that gave up before then
    got nothing (adapters/http/watch.py `answered`)."""
    assert answered({"type": "http", ON_GONE: None}, 200) == CLIENT_CLOSED
    assert answered({"type": "http", ON_GONE: []}, 200) == 200
    assert answered({"type": "http"}, 503) == 503
