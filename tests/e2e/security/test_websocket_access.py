"""WebSocket mode under `--auth keys`: the handshake is admitted like any `/v1` request and
refused with an HTTP answer in OpenAI's shape; responses are their key owner's; the per-key
stream and rate limits hold on a socket (docs/websocket.md)."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from tests.e2e.conftest import Server, stop_server
from tests.e2e.security.conftest import KEYED, http, launch, make_key, query

TERMINAL = ("response.completed", "response.failed", "response.cancelled", "error")


def open_socket(server: Server, key: str | None) -> ClientConnection:
    url = server.base_url.replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return ws_connect(url, additional_headers=headers)


def turn(ws: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    ws.send(json.dumps({"type": "response.create", **body}))
    events = [json.loads(ws.recv())]
    while events[-1]["type"] not in TERMINAL:
        events.append(json.loads(ws.recv()))
    return events


def refused(server: Server, key: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
    with pytest.raises(InvalidStatus) as exc, open_socket(server, key):
        pass
    response = exc.value.response
    return response.status_code, json.loads(response.body)["error"], dict(response.headers)


@pytest.mark.parametrize("key", [None, "sk-not-a-key"])
def test_a_handshake_without_a_valid_key_is_401(keyed: Server, key: str | None) -> None:
    status, error, headers = refused(keyed, key)
    assert status == 401 and error["code"] == "invalid_api_key"
    assert set(error) == {"message", "type", "param", "code"}
    assert headers["www-authenticate"] == "Bearer" and headers["x-request-id"].startswith("req_")


def test_a_socket_sees_only_its_owners_responses(
    keyed: Server, key_of: Callable[[str], str]
) -> None:
    alice, bob = key_of("alice"), key_of("bob")
    with open_socket(keyed, alice) as ws:
        mine = turn(ws, model="scripted", input="alice's")
        rid = mine[0]["response"]["id"]
        again = turn(ws, model="scripted", input="more", previous_response_id=rid)
        assert again[-1]["type"] == "response.completed"
    with open_socket(keyed, bob) as ws:
        events = turn(ws, model="scripted", input="steal", previous_response_id=rid)
        assert events[-1]["error"]["code"] == "previous_response_not_found"
    with http(keyed, bob) as h:
        assert h.get(f"/v1/responses/{rid}").status_code == 404
    with http(keyed, alice) as h:
        assert h.get(f"/v1/responses/{rid}").json()["status"] == "completed"


@pytest.fixture(scope="module")
def limited(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    srv = launch(request, tmp_path_factory, "sqlite", *KEYED, "--max-streams-per-key", "1")
    yield srv
    stop_server(srv)


def test_an_open_socket_holds_a_stream_slot(limited: Server) -> None:
    key = make_key(limited, "carol")
    slow = {"scripted_delay_ms": "20", "scripted_tokens": "200"}
    with open_socket(limited, key) as ws:
        status, error, headers = refused(limited, key)
        assert status == 429 and error["code"] == "rate_limit_exceeded"
        assert int(headers["retry-after"]) >= 1
        # A second response streaming at once on the same socket needs a slot of its own.
        ws.send(
            json.dumps(
                {
                    "type": "response.create",
                    "model": "scripted",
                    "input": "a",
                    "stream_id": "a",
                    "metadata": slow,
                }
            )
        )
        assert json.loads(ws.recv())["type"] == "response.created"
        events = turn(ws, model="scripted", input="b", stream_id="b")
        assert events[-1]["stream_id"] == "b" and events[-1]["status"] == 429
    with open_socket(limited, key) as ws:  # the slot came back when the socket closed
        assert turn(ws, model="scripted", input="again")[-1]["type"] == "response.completed"


@pytest.fixture(scope="module")
def rated(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    flags = ("--rate-limit", "0.01", "--rate-burst", "2")
    srv = launch(request, tmp_path_factory, "sqlite", *KEYED, *flags)
    yield srv
    stop_server(srv)


def test_each_response_create_is_charged_to_the_keys_rate(rated: Server) -> None:
    key = make_key(rated, "dave")
    with open_socket(rated, key) as ws:  # the handshake is one request
        assert turn(ws, model="scripted", input="one")[-1]["type"] == "response.completed"
        events = turn(ws, model="scripted", input="two")
        assert events[-1]["status"] == 429
        assert events[-1]["error"]["code"] == "rate_limit_exceeded"
    status, _, _ = refused(rated, key)
    assert status == 429


@pytest.fixture(scope="module")
def deadline(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    srv = launch(request, tmp_path_factory, "sqlite", *KEYED, "--send-timeout-s", "2")
    yield srv
    stop_server(srv)


def masked_text_frame(payload: bytes) -> bytes:
    """A client's text frame (RFC 6455: a client masks every frame)."""
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        length = bytes([0x80 | n])
    elif n < 1 << 16:
        length = bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        length = bytes([0x80 | 127]) + struct.pack("!Q", n)
    return b"\x81" + length + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_a_socket_that_reads_nothing_is_dropped_after_the_send_deadline(deadline: Server) -> None:
    """A bare TCP client upgrades, sends one create and reads nothing more: the server's
    writes wait on a full socket, and after `--send-timeout-s` it drops the connection;
    the response then ends as a dropped client's does."""
    key = make_key(deadline, "erin")
    url = urlsplit(deadline.base_url)
    # Tokens of some 700 bytes each (the script repeats the input's words): megabytes owed.
    big = {"scripted_delay_ms": "0", "scripted_tokens": "8000"}
    create = {"type": "response.create", "model": "slow-reader", "input": "x" * 2000}
    with socket.create_connection((url.hostname, url.port), timeout=10) as raw:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.sendall(
            (
                f"GET /v1/responses HTTP/1.1\r\nHost: {url.netloc}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
                f"Authorization: Bearer {key}\r\n\r\n"
            ).encode()
        )
        assert raw.recv(12) == b"HTTP/1.1 101"
        raw.sendall(masked_text_frame(json.dumps({**create, "metadata": big}).encode()))
        deadline_at = time.monotonic() + 30
        while "dropping the connection" not in deadline.log_text():
            assert time.monotonic() < deadline_at, deadline.log_text()[-2000:]
            time.sleep(0.2)
    assert " ERROR " not in deadline.log_text()
    ended = "responses WHERE model = 'slow-reader' AND status IN ('cancelled', 'completed')"
    while query(deadline, f"SELECT count(*) FROM {ended}") == 0:
        assert time.monotonic() < deadline_at
        time.sleep(0.1)
