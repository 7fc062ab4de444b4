"""The accept loop (adapters/cli/accept.py), on uvloop as `serve` runs it: every connection
waiting on the socket is accepted in one turn (uvloop's own server takes one a turn); each
accepted socket holds at most `UNSENT_BYTES` the kernel has not sent; out of descriptors it
waits and tries again; closed, it accepts nothing more."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from adapters.cli import accept
from adapters.cli.accept import TCP_NOTSENT_LOWAT, UNSENT_BYTES, Acceptor


def on_uvloop(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(test())


class Made(asyncio.Protocol):
    """Records the loop turn it was connected in, and its transport."""

    def __init__(self, made: list[Made], count: list[int]) -> None:
        self.made, self.count = made, count
        self.transport: asyncio.BaseTransport | None = None
        self.turn = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport, self.turn = transport, self.count[0]
        self.made.append(self)


def turn_counter() -> list[int]:
    loop = asyncio.get_running_loop()
    count = [0]

    def tick() -> None:
        count[0] += 1
        loop.call_soon(tick)

    loop.call_soon(tick)
    return count


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    return sock


async def turns_until(done: Callable[[], bool], limit: int = 1000) -> None:
    for _ in range(limit):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("never done")


def test_everything_waiting_is_accepted_in_the_same_turn() -> None:
    async def test() -> None:
        sock = listening()
        clients = [socket.create_connection(sock.getsockname()) for _ in range(64)]
        made: list[Made] = []
        count = turn_counter()
        acceptor = Acceptor(asyncio.get_running_loop(), sock, lambda: Made(made, count))
        try:
            await turns_until(lambda: len(made) == 64)
            assert len({m.turn for m in made}) == 1  # not one a turn
        finally:
            acceptor.close()
            await acceptor.wait_closed()
            for m in made:
                assert m.transport is not None
                m.transport.close()
            for client in clients:
                client.close()
            sock.close()

    on_uvloop(test)


def test_an_accepted_socket_holds_little_the_kernel_has_not_sent() -> None:
    async def test() -> None:
        sock = listening()
        client = socket.create_connection(sock.getsockname())
        made: list[Made] = []
        acceptor = Acceptor(asyncio.get_running_loop(), sock, lambda: Made(made, [0]))
        try:
            await turns_until(lambda: len(made) == 1)
            assert made[0].transport is not None
            conn = made[0].transport.get_extra_info("socket")
            assert conn.getsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT) == UNSENT_BYTES
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        finally:
            acceptor.close()
            for m in made:
                assert m.transport is not None
                m.transport.close()
            client.close()
            sock.close()

    on_uvloop(test)


class Exhausted(socket.socket):
    """A listening socket whose `accept` fails as with no descriptor left, while `failing`."""

    failing = True
    tries = 0

    def accept(self) -> tuple[socket.socket, Any]:
        self.tries += 1
        if self.failing:
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


def test_out_of_descriptors_it_waits_and_tries_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accept, "RETRY_AFTER_S", 0.05)

    async def test() -> None:
        sock = Exhausted()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        client = socket.create_connection(sock.getsockname())
        made: list[Made] = []
        acceptor = Acceptor(asyncio.get_running_loop(), sock, lambda: Made(made, [0]))
        try:
            await asyncio.sleep(0.02)
            assert not made
            assert sock.tries == 1  # not again every turn meanwhile
            sock.failing = False
            await asyncio.sleep(0.2)
            assert len(made) == 1
        finally:
            acceptor.close()
            for m in made:
                assert m.transport is not None
                m.transport.close()
            client.close()
            sock.close()

    on_uvloop(test)


def test_a_closed_acceptor_accepts_nothing_more() -> None:
    async def test() -> None:
        sock = listening()
        made: list[Made] = []
        acceptor = Acceptor(asyncio.get_running_loop(), sock, lambda: Made(made, [0]))
        acceptor.close()
        client = socket.create_connection(sock.getsockname())
        await asyncio.sleep(0.05)
        assert not made
        client.close()
        sock.close()

    on_uvloop(test)
