"""The listening socket's accept loop: every connection waiting on it is accepted in the
turn of the event loop that sees it readable, not one a turn.

uvloop's server (`loop.create_server`, what uvicorn uses) accepts one connection each time
the loop polls (`strace`: one `accept4` after each `epoll_pwait`). Behind a burst of 256
connections, a liveness probe that arrives last is accepted some 256 turns later, and each
of those turns also runs the work of the connections accepted in the turns before: the
probe waits for about the whole burst (docs/performance.md, "Stalled readers"). Here the
socket is watched with `add_reader`, and each time it is readable everything queued on it
is accepted (up to `BATCH`) and handed to the loop's transport
(`loop.connect_accepted_socket`, uvloop's own TCP transport, `TCP_NODELAY` set as
`create_server` would), so the probe's request is read in the next turn, beside the
burst's, and answered in the turn after.

With `serve --processes N` the children share the listening socket: each wakes when it is
readable, and whichever accepts first takes what is queued, up to `BATCH` a turn, so one
burst is spread over the children that are free, as the kernel spreads wake-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable

log = logging.getLogger("resplog.accept")

# At most this many connections accepted in one turn: a burst far larger than any
# reasonable listen backlog still gives the loop its turns (and, across processes, the
# other children theirs).
BATCH = 512
# Out of descriptors (or kernel memory): stop watching the socket this long rather than
# wake every turn to fail again (asyncio's own servers wait a second too).
RETRY_AFTER_S = 1.0
# Bytes a connection's socket may hold that the kernel has not yet sent
# (`TCP_NOTSENT_LOWAT`); past them a write takes no more and the rest waits in the
# transport, which then pauses the response (uvicorn's flow control). Without it the kernel
# takes as much as the send buffer it grows on its own allows, up to `tcp_wmem`'s 4 MiB,
# whatever the client reads: 256 replays whose clients never read held 962 MiB of kernel
# memory, and copying it in was half the CPU of their burst (docs/performance.md,
# "Stalled readers"); with the bound, 44 MiB. Data sent and not yet acknowledged is not
# counted, so a fast client over a long path still gets a full window.
UNSENT_BYTES = 128 * 1024
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)  # Linux's number
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class Acceptor:
    """Accepts the connections of one listening socket, each handed to a new
    `protocol_factory()` protocol. Shaped as uvicorn uses its servers (`close`,
    `wait_closed`); closing it stops accepting and leaves the socket to its owner."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._factory = protocol_factory
        self._connecting: set[asyncio.Task[None]] = set()
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(BATCH):
            try:
                conn, _address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # the client gave up while it waited: the next one
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                log.error("cannot accept connections for now: %s", exc.strerror or exc)
                self._loop.remove_reader(self._sock.fileno())
                self._retry = self._loop.call_later(RETRY_AFTER_S, self._resume)
                return
            conn.setblocking(False)
            with contextlib.suppress(OSError):  # a system without the option
                conn.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, UNSENT_BYTES)
            task = self._loop.create_task(self._connect(conn))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    def _resume(self) -> None:
        self._retry = None
        if not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._accept)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError as exc:  # gone before its transport was made
            log.debug("an accepted connection failed: %s", exc)
            conn.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        self._loop.remove_reader(self._sock.fileno())

    async def wait_closed(self) -> None:
        """The connections being set up are done with (uvicorn waits for the rest)."""
        if self._connecting:
            await asyncio.gather(*self._connecting, return_exceptions=True)
