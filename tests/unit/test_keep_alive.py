"""A keep-alive connection whose idle time runs out as its next request arrives
(adapters/cli/protocol.py): the request is answered, not dropped with a reset. A real
uvicorn server with `serve`'s protocol on uvloop, and a real client socket; the idle timer's
handler is run by hand in the same step of the loop as the request is sent, as a busy loop
runs it (its timers before it polls the sockets)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import uvicorn
import uvloop

from adapters.cli.protocol import BoundedHttpToolsProtocol


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b'{"path":"%s"}' % scope["path"].encode()
    headers = [(b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Recorded(BoundedHttpToolsProtocol):
    """`serve`'s protocol, each connection's kept where the test can reach it."""

    made: list[Recorded] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        Recorded.made.append(self)


def on_uvloop(test: Callable[[int], Coroutine[Any, Any, None]]) -> None:
    """`test(port)` on uvloop, with the server listening on `port`."""

    async def run() -> None:
        Recorded.made = []
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(app, http=Recorded, lifespan="off", log_level="warning")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        for _ in range(1000):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started
        try:
            await test(sock.getsockname()[1])
        finally:
            server.should_exit = True
            await task
            sock.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())


def get(path: str) -> bytes:
    return b"GET %s HTTP/1.1\r\nhost: x\r\n\r\n" % path.encode()


async def answer(client: socket.socket) -> bytes:
    """What comes back until a JSON body ends, or the connection does ("" if reset)."""
    got = b""
    while not got.endswith(b"}"):
        try:
            chunk = await asyncio.get_running_loop().sock_recv(client, 65536)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    return got


async def idle_connection(port: int) -> tuple[socket.socket, Recorded]:
    """A connection that had one request answered, and now waits on its idle timer."""
    client = socket.create_connection(("127.0.0.1", port))
    try:
        client.setblocking(False)
        await asyncio.get_running_loop().sock_sendall(client, get("/one"))
        assert (await answer(client)).endswith(b'{"path":"/one"}')
        [protocol] = Recorded.made
        for _ in range(100):  # the timer is armed once the response is complete
            if protocol.timeout_keep_alive_task is not None:
                break
            await asyncio.sleep(0)
        assert protocol.timeout_keep_alive_task is not None
    except BaseException:
        client.close()
        raise
    return client, protocol


def test_a_request_that_came_as_the_idle_time_ran_out_is_answered() -> None:
    async def test(port: int) -> None:
        client, protocol = await idle_connection(port)
        with client:
            client.send(get("/two"))  # in the server's socket now, not yet read by the loop
            protocol.timeout_keep_alive_handler()  # what the timer would run first
            assert (await answer(client)).endswith(b'{"path":"/two"}')
            assert not protocol.transport.is_closing()

    on_uvloop(test)


def test_an_idle_connection_still_closes_when_its_time_runs_out() -> None:
    async def test(port: int) -> None:
        client, protocol = await idle_connection(port)
        with client:
            protocol.timeout_keep_alive_handler()
            assert await answer(client) == b""  # closed, nothing more sent

    on_uvloop(test)
