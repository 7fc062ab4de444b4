"""How long `serve` keeps an idle HTTP connection (`--keep-alive-s`): past the OpenAI SDKs'
own idle limit by default, so that a client reusing a connection idle that long never sends
on one the server is closing (adapters/cli/protocol.py); and no longer than asked."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import openai._constants
import pytest

from tests.e2e.conftest import Server, start_server, stop_server


@pytest.fixture
def serving(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    flags: tuple[str, ...] = getattr(request, "param", ())
    srv = start_server(
        f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", "sqlite", tmp_path / "log", *flags
    )
    yield srv
    stop_server(srv)


def health(sock: socket.socket) -> bytes:
    """Ask `/health` on `sock`; what comes back until the body's end ("" if closed)."""
    sock.sendall(b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got or not got.endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def connected(server: Server) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def test_a_connection_idle_past_the_sdks_limit_is_still_open(serving: Server) -> None:
    sdk_idle = openai._constants.DEFAULT_CONNECTION_LIMITS.keepalive_expiry
    assert sdk_idle is not None
    with connected(serving) as sock:
        assert health(sock).startswith(b"HTTP/1.1 200")
        time.sleep(sdk_idle + 1)  # the SDK itself would have stopped reusing it by now
        assert health(sock).startswith(b"HTTP/1.1 200")  # the same connection, answered


@pytest.mark.parametrize("serving", [("--keep-alive-s", "1")], indirect=True)
def test_an_idle_connection_is_closed_after_keep_alive_s(serving: Server) -> None:
    with connected(serving) as sock:
        assert health(sock).startswith(b"HTTP/1.1 200")
        idle = time.monotonic()
        assert sock.recv(1) == b""  # closed by the server, nothing more sent
        assert 0.9 <= time.monotonic() - idle < 10
