"""What a WebSocket costs the server's memory: what a connection was sent is let go when it
closes (the process's RSS comes back within seconds, with no full collection), the bytes of
messages it holds are bounded per connection and per key, and each `response.create` is
charged to the key's rate as it arrives (docs/websocket.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from tests.e2e.conftest import Server, stop_server
from tests.e2e.security.conftest import KEYED, launch, make_key

MiB = 1024 * 1024
ENDS = ("response.completed", "response.failed", "response.incomplete", "error")
SLOW = {"scripted_delay_ms": "100", "scripted_tokens": "200"}  # some 20 s a response


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_socket(server: Server, key: str) -> ClientConnection:
    url = server.base_url.replace("http://", "ws://") + "/v1/responses"
    return ws_connect(url, additional_headers={"Authorization": f"Bearer {key}"}, max_size=None)


def create(chars: int, **fields: Any) -> str:
    """A `response.create` of some `chars` characters of input (in parts of at most
    512 KiB, under `--max-text-chars`)."""
    part = 512 * 1024
    parts = [{"role": "user", "content": "x" * min(part, chars - i)} for i in range(0, chars, part)]
    return json.dumps({"type": "response.create", "model": "scripted", "input": parts, **fields})


def read_until(
    ws: ClientConnection, done: Callable[[dict[str, Any]], bool], within: float = 30
) -> list[dict[str, Any]]:
    """Events up to and including the first one `done` accepts."""
    deadline = time.monotonic() + within
    events: list[dict[str, Any]] = []
    while not events or not done(events[-1]):
        events.append(json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic()))))
    return events


def settled(pid: int, ceiling: float, within: float = 8.0) -> float:
    """The server's RSS once it is at most `ceiling` MiB, or the last seen after `within` s."""
    deadline = time.monotonic() + within
    while (now := rss_mib(pid)) > ceiling and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


@pytest.fixture(scope="module")
def unbounded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    flags = ("--ws-max-queued-bytes", "0", "--ws-max-queued-bytes-per-key", "0")
    srv = launch(request, tmp_path_factory, "sqlite", *KEYED, *flags)
    yield srv
    stop_server(srv)


def test_a_closed_socket_gives_back_what_it_was_sent(unbounded: Server) -> None:
    """20 sockets each send one 2 MiB create that completes and close, then one socket
    queues 30 creates of 2 MiB behind slow generations and closes: the server's RSS is
    back within a few seconds (these messages in reference cycles kept some 120 MiB)."""
    key = make_key(unbounded, "mallory")
    pid = unbounded.process.pid

    def one_turn() -> None:
        with open_socket(unbounded, key) as ws:
            ws.send(create(2 * MiB))
            assert read_until(ws, lambda e: e["type"] in ENDS)[-1]["type"] == "response.completed"

    for _ in range(4):  # the code paths, caches and allocator pools, warm
        one_turn()
    baseline = rss_mib(pid)
    for _ in range(20):
        one_turn()
    with open_socket(unbounded, key) as ws:
        for i in range(30):
            ws.send(create(2 * MiB, stream_id=f"lane{i % 3}", metadata=SLOW))
        read_until(ws, lambda e: e["type"] == "response.in_progress")
        queued = rss_mib(pid)
    after = settled(pid, baseline + 24)
    print(f"\nRSS {baseline:.0f} MiB, {queued:.0f} MiB queued, {after:.0f} MiB after the close")
    assert queued > baseline + 40  # the queued messages were held while the socket was open
    assert after <= baseline + 24, (baseline, queued, after)


@pytest.fixture(scope="module")
def bounded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    flags = ("--ws-max-queued-bytes", "2500000", "--ws-max-queued-bytes-per-key", "3500000")
    srv = launch(request, tmp_path_factory, "sqlite", *KEYED, *flags)
    yield srv
    stop_server(srv)


def test_the_bytes_a_socket_and_a_key_hold_are_bounded(bounded: Server) -> None:
    """Messages of 1 MB behind slow generations: a socket holds two (the third is over
    2.5 MB), a second socket of the key one more (the key's is 3.5 MB); each refusal is an
    error event on its lane, the socket stays usable, and a close gives the bytes back."""
    key = make_key(bounded, "oscar")
    mb = 1_000_000
    with open_socket(bounded, key) as first, open_socket(bounded, key) as second:
        first.send(create(mb, stream_id="a", metadata=SLOW))
        first.send(create(mb, stream_id="a", metadata=SLOW))
        first.send(create(mb, stream_id="a", metadata=SLOW))
        events = read_until(first, lambda e: e["type"] == "error")
        refused = events[-1]
        assert refused["status"] == 429 and refused["stream_id"] == "a"
        assert refused["error"]["code"] == "rate_limit_exceeded"
        assert "on this connection" in refused["error"]["message"]
        first.send(create(100, stream_id="b"))  # still usable, and small enough
        done = read_until(first, lambda e: e["type"] in ENDS and e.get("stream_id") == "b")
        assert done[-1]["type"] == "response.completed"

        second.send(create(mb, metadata=SLOW))
        read_until(second, lambda e: e["type"] == "response.created")
        second.send(create(mb, metadata=SLOW))
        refused = read_until(second, lambda e: e["type"] == "error")[-1]
        assert refused["status"] == 429 and "for this API key" in refused["error"]["message"]
    with open_socket(bounded, key) as again:  # the closes gave the key's bytes back
        again.send(create(mb))
        again.send(create(mb))
        for _ in range(2):
            assert (
                read_until(again, lambda e: e["type"] in ENDS)[-1]["type"] == "response.completed"
            )


@pytest.fixture(scope="module")
def rated(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    flags = ("--rate-limit", "0.01", "--rate-burst", "3")
    srv = launch(request, tmp_path_factory, "sqlite", *KEYED, *flags)
    yield srv
    stop_server(srv)


def test_a_queued_create_is_charged_to_the_rate_when_it_arrives(rated: Server) -> None:
    """The handshake and two creates take the burst of 3: a third create queued behind a
    slow generation is refused at once, while the first response is still streaming."""
    key = make_key(rated, "peggy")
    with open_socket(rated, key) as ws:
        for _ in range(3):
            ws.send(create(10, metadata=SLOW))
        events = read_until(ws, lambda e: e["type"] in ENDS)
        assert events[-1]["type"] == "error" and events[-1]["status"] == 429
        assert events[-1]["error"]["code"] == "rate_limit_exceeded"
        # The refusal is the first end on the socket: the first response is still running
        # (charged when it starts, the third create would wait some 40 s to be refused).
