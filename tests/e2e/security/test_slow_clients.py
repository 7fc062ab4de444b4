"""Malformed SSE clients: raw sockets that send a request and never read (what a half-open
connection also looks like once its buffers are full) neither grow the server's memory with
what they are owed nor stall other streams, and are let go after the send deadline; a slow
but steady reader is served to the end."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from adapters.store.factory import open_store
from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import create, start
from domain.events import AnyEvent, RequestFacts
from domain.generation import EndItem, Finished, TextDelta, TokenUsage
from domain.objects import ResponseObject
from service.responses.create import new_response_id
from tests.e2e.conftest import Server, stop_server
from tests.e2e.security.conftest import http, launch, make_key

STALLED = 12
BIG_TOKENS = 40_000  # about 10 MB of SSE per replay
SEND_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def guarded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    flags = ("--auth", "keys", "--key-cache-s", "0", "--max-streams-per-key", str(STALLED))
    srv = launch(request, tmp_path_factory, "sqlite", *flags, "--send-timeout-s", "3")
    yield srv
    stop_server(srv)


def stored_response(server: Server, owner: str, tokens: int) -> str:
    """A finished response of `owner` with `tokens` delta events, written straight to the
    log as the runner would have logged a generation that arrived a token at a time (an
    engine as fast as the scripted one arrives merged into a few large events instead)."""

    async def write() -> str:
        rid = new_response_id(time.time())
        fresh = ResponseObject(id=rid, created_at=int(time.time()), status="queued", model="m")
        d = create(fresh, RequestFacts(owner=owner, input=[]))
        events: list[AnyEvent] = list(d.events)
        if d.state.status == "queued":
            d = start(d.state)
            events += d.events
        for i in range(tokens):
            d = emit(d.state, TextDelta(text=f" w{i}"))
            events += d.events
        d = emit(d.state, EndItem())
        events += d.events
        usage = TokenUsage(input_tokens=1, output_tokens=tokens)
        events += finish(d.state, Finished(reason="stop", usage=usage), now=int(time.time())).events
        store = await open_store(server.database_url, listen=False)
        try:
            await store.append(rid, -1, events)
        finally:
            await store.close()
        return rid

    return asyncio.run(write())


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def never_reading(server: Server, path: str, key: str) -> socket.socket:
    """A client that sends its request and then reads nothing (a tiny receive window)."""
    url = urlparse(server.base_url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((url.hostname, url.port))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
    )
    head = sock.recv(16)  # the status line shows the stream was admitted; then: nothing
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


def until(check: Callable[[], bool], within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def stream_count(client: httpx.Client, method: str, path: str, **kw: object) -> int:
    """Read a whole stream; the number of SSE events in it."""
    with client.stream(method, path, **kw) as answer:  # type: ignore[arg-type]
        assert answer.status_code == 200
        return b"".join(answer.iter_bytes()).count(b"\n\nevent: ") + 1


def test_never_reading_clients_cost_bounded_memory_stall_nobody_and_are_dropped(
    guarded: Server,
) -> None:
    # Two keys of one owner: both may read the response, each has its own stream slots.
    stalled_key, normal_key = make_key(guarded, "tester"), make_key(guarded, "tester")
    pid = guarded.process.pid
    with http(guarded, normal_key) as normal, http(guarded, stalled_key) as probe_client:
        big = {"id": stored_response(guarded, "tester", BIG_TOKENS)}
        small = normal.post("/v1/responses", json={"model": "scripted", "input": "s"}).json()
        big_events = stream_count(normal, "GET", f"/v1/responses/{big['id']}/events")
        assert big_events > BIG_TOKENS
        baseline = rss_kib(pid)

        def probe() -> int:
            path = f"/v1/responses/{small['id']}/events"
            return probe_client.get(path, params={"follow": "false"}).status_code

        sockets = [
            never_reading(guarded, f"/v1/responses/{big['id']}/events", stalled_key)
            for _ in range(STALLED)
        ]
        try:
            # All of its stream slots are held by the stalled clients.
            assert until(lambda: probe() == 429)
            peak = [rss_kib(pid)]
            results: list[int] = []

            def fresh_stream(i: int) -> None:
                body = {"model": "scripted", "input": f"n{i}", "stream": True}
                results.append(stream_count(normal, "POST", "/v1/responses", json=body))

            def full_replay() -> None:
                results.append(stream_count(normal, "GET", f"/v1/responses/{big['id']}/events"))

            def slow_replay() -> None:
                """Reads all the time, but slowly: longer than the deadline, never dropped."""
                path = f"/v1/responses/{big['id']}/events"
                with normal.stream("GET", path) as answer:
                    chunks = []
                    for chunk in answer.iter_bytes(16384):
                        chunks.append(chunk)
                        time.sleep(0.005)
                results.append(b"".join(chunks).count(b"\n\nevent: ") + 1)

            workers = [threading.Thread(target=fresh_stream, args=(i,)) for i in range(6)]
            workers += [threading.Thread(target=full_replay) for _ in range(2)]
            workers.append(threading.Thread(target=slow_replay))
            for w in workers:
                w.start()
            while any(w.is_alive() for w in workers):
                peak.append(rss_kib(pid))
                time.sleep(0.05)
            assert len(results) == len(workers)  # every other stream finished
            assert sorted(results)[-3:] == [big_events] * 3
            owed_mib = STALLED * big_events * 240 // 2**20
            grown_mib = (max(peak) - baseline) // 1024
            print(f"\nRSS {baseline // 1024} MiB, grew {grown_mib} MiB; owed {owed_mib} MiB")
            assert grown_mib < 50, (
                f"RSS grew {grown_mib} MiB; the stalled clients are owed ~{owed_mib}"
            )
            # After the send deadline the server lets them go and their slots are free again.
            assert until(lambda: probe() == 200, within=SEND_TIMEOUT_S + 30)
            dropped = lambda: guarded.log_text().count("dropping the connection")  # noqa: E731
            assert until(lambda: dropped() == STALLED)
        finally:
            for sock in sockets:
                sock.close()
