"""WebSocket keep-alive and idle timeout against a real server (`--ws-ping-interval-s`,
`--ws-ping-timeout-s`, `--ws-idle-timeout-s`; docs/websocket.md)."""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from tests.e2e.conftest import Server, start_server, stop_server

IDLE_S, PING_S, PONG_S = 2.0, 0.2, 0.5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("keepalive")
    flags = ("--ws-idle-timeout-s", str(IDLE_S), "--ws-ping-interval-s", str(PING_S))
    srv = start_server(
        f"sqlite+aiosqlite:///{tmp / 'resplog.db'}",
        "sqlite",
        tmp / "server.log",
        *flags,
        "--ws-ping-timeout-s",
        str(PONG_S),
    )
    yield srv
    stop_server(srv)


def open_socket(server: Server) -> ClientConnection:
    return ws_connect(server.base_url.replace("http://", "ws://") + "/v1/responses")


def turn(ws: ClientConnection, **body: Any) -> dict[str, Any]:
    ws.send(json.dumps({"type": "response.create", "model": "scripted", **body}))
    while (event := json.loads(ws.recv()))["type"] not in ("response.completed", "error"):
        pass
    return event


def test_a_client_that_answers_pings_stays_and_an_idle_one_is_closed(server: Server) -> None:
    with open_socket(server) as ws:
        time.sleep(3 * PONG_S)  # several pings, answered by the client library
        assert turn(ws, input="still here")["type"] == "response.completed"
        started = time.monotonic()
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=IDLE_S + 5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
        assert "idle" in closed.value.rcvd.reason
        assert IDLE_S - 0.5 <= time.monotonic() - started <= IDLE_S + 3


def test_a_response_streaming_longer_than_the_idle_timeout_is_not_cut(server: Server) -> None:
    slow = {"scripted_delay_ms": "20", "scripted_tokens": str(int(IDLE_S * 1.5 / 0.02))}
    with open_socket(server) as ws:
        assert turn(ws, input="long", metadata=slow)["type"] == "response.completed"


def test_a_client_that_never_answers_a_ping_is_dropped(server: Server) -> None:
    """A bare TCP client: the upgrade, then silence (no pong); the server gives up after
    the ping timeout, long before the idle timeout."""
    url = urlsplit(server.base_url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as raw:
        key = base64.b64encode(os.urandom(16)).decode()
        raw.sendall(
            (
                f"GET /v1/responses HTTP/1.1\r\nHost: {url.netloc}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        started = time.monotonic()
        received = b""
        while chunk := raw.recv(4096):
            received += chunk
        assert received.startswith(b"HTTP/1.1 101")
        assert time.monotonic() - started < IDLE_S
