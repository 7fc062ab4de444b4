"""What `serve`'s connection protocol writes to the socket (adapters/cli/protocol.py): a
response's writes made in one turn of the loop leave in one write, in order. A real
uvicorn server on a real socket; the server's writes are read off its transports'
`write`."""

from __future__ import annotations

import asyncio
import socket
from asyncio import selector_events
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from adapters.cli.protocol import HOLD_BYTES, BoundedHttpToolsProtocol
from adapters.http.watch import ON_GONE
from tests.e2e.conftest import free_port

GONE: list[str] = []  # the `/stream/...` responses whose client went away, by path


async def app(scope: Any, receive: Any, send: Any) -> None:
    """A JSON answer (its head and its body sent together, as every JSON response is), or
    at `/slow` a body written a turn after its head; at `/stream/...` a body that does not
    end until its client goes away (what `ON_GONE` says)."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/stream/late":  # looks only once its client has gone
        for _ in range(1000):
            if scope[ON_GONE] is None:
                GONE.append("/stream/late")
                return
            await asyncio.sleep(0.01)
        return
    if scope["path"].startswith("/stream/"):
        went = asyncio.Event()
        scope[ON_GONE].append(lambda: (GONE.append(scope["path"]), went.set()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        complete = scope["path"] == "/stream/complete"
        await send({"type": "http.response.body", "body": b"first", "more_body": not complete})
        if not complete:
            await asyncio.wait_for(went.wait(), 10)
        return
    body = b'{"path":"%s"}' % scope["path"].encode()
    large = scope["path"].startswith("/large/")  # chunked: bodies of this many bytes first
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")]
            + ([] if large else [(b"content-length", b"%d" % len(body))]),
        }
    )
    if scope["path"] == "/slow":
        await asyncio.sleep(0.05)
    if large:  # in one turn
        size = int(scope["path"].split("/")[2])
        for piece in range(6):
            await send(
                {"type": "http.response.body", "body": b"%d" % piece * size, "more_body": True}
            )
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[int, list[bytes]]]:
    writes: list[bytes] = []
    write = selector_events._SelectorSocketTransport.write

    def recorded(self: Any, data: Any) -> None:
        writes.append(bytes(data))
        write(self, data)

    monkeypatch.setattr(selector_events._SelectorSocketTransport, "write", recorded)
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=BoundedHttpToolsProtocol,
        lifespan="off",
        log_level="warning",
    )
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve())
    for _ in range(1000):  # up in a few ms; `serve` itself would fail the test otherwise
        if srv.started or task.done():
            break
        await asyncio.sleep(0.01)
    assert srv.started
    yield port, writes
    srv.should_exit = True
    await task


def exchange(port: int, request: bytes, answers: int, end: bytes = b"}") -> bytes:
    """Send `request` at once; read until `answers` whole JSON bodies came back, and what
    came ends with `end` (a chunked body's last chunk)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        got = b""
        while got.count(b"}") < answers or not got.endswith(end):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def get(path: str) -> bytes:
    return b"GET %s HTTP/1.1\r\nhost: x\r\n\r\n" % path.encode()


async def test_a_response_sent_in_one_turn_is_one_write(server: tuple[int, list[bytes]]) -> None:
    port, writes = server
    answer = await asyncio.to_thread(exchange, port, get("/fast"), 1)
    assert answer.endswith(b'{"path":"/fast"}')
    assert writes == [answer]  # the head and the body: one write, the bytes as they are


async def test_a_body_sent_a_turn_later_is_a_write_of_its_own(
    server: tuple[int, list[bytes]],
) -> None:
    port, writes = server
    answer = await asyncio.to_thread(exchange, port, get("/slow"), 1)
    assert len(writes) == 2 and b"".join(writes) == answer
    assert writes[1] == b'{"path":"/slow"}'


async def test_pipelined_requests_are_answered_in_order(server: tuple[int, list[bytes]]) -> None:
    port, writes = server
    paths = ["/one", "/slow", "/three"]
    answer = await asyncio.to_thread(exchange, port, b"".join(get(p) for p in paths), 3)
    bodies = [b'{"path":"%s"}' % p.encode() for p in paths]
    assert [answer.index(b) for b in bodies] == sorted(answer.index(b) for b in bodies)
    assert b"".join(writes) == answer


@pytest.mark.parametrize("size", [HOLD_BYTES // 4, HOLD_BYTES])
async def test_what_is_held_back_is_bounded(server: tuple[int, list[bytes]], size: int) -> None:
    """Writes of one turn are held only up to `HOLD_BYTES`, and a write that large goes to
    the socket as it is: a stream of large events meets flow control write by write."""
    port, writes = server
    answer = await asyncio.to_thread(exchange, port, get(f"/large/{size}"), 1, b"0\r\n\r\n")
    assert b"".join(writes) == answer
    assert len(writes) > 1
    assert max(len(w) for w in writes) < HOLD_BYTES + size + 64  # + a chunk's framing
    if size == HOLD_BYTES:  # each piece a write of its own, after what was held
        assert len(writes) >= 6


async def gone_noted() -> None:
    """Until the app noted a response whose client went away (5 s at most)."""
    for _ in range(500):
        if GONE:
            return
        await asyncio.sleep(0.01)


async def test_a_response_is_told_when_its_client_goes_away(
    server: tuple[int, list[bytes]],
) -> None:
    """The callbacks a response put in its scope's `ON_GONE` run when the connection is lost
    before the response is complete (a stream's body stops without a task of its own
    waiting on `receive`: adapters/http/streaming.py); a complete response's do not."""
    port, _ = server
    GONE.clear()

    def read_the_head_and_leave() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(get("/stream/left"))
            assert b"first" in sock.recv(65536)

    await asyncio.to_thread(read_the_head_and_leave)
    await gone_noted()
    assert GONE == ["/stream/left"]
    answer = await asyncio.to_thread(exchange, port, get("/stream/complete"), 0, b"0\r\n\r\n")
    assert answer.endswith(b"first\r\n0\r\n\r\n")  # complete; then the client leaves
    await asyncio.sleep(0.1)
    assert GONE == ["/stream/left"]


async def test_a_response_that_looks_after_its_client_went_away_is_told_so(
    server: tuple[int, list[bytes]],
) -> None:
    """Once the connection is lost the scope's `ON_GONE` is None: a stream that begins only
    then (a create's, whose first events were still committing) asks `receive`, which
    says `http.disconnect` at once, rather than register a callback nothing will run."""
    port, _ = server
    GONE.clear()

    def send_and_leave() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(get("/stream/late"))

    await asyncio.to_thread(send_and_leave)
    await gone_noted()
    assert GONE == ["/stream/late"]
