"""The HTTP/1.1 connection protocol `serve` runs: uvicorn's httptools protocol with limits on
what a request line and its headers may hold, and OpenAI's error shape for the requests
refused before any route sees them.

uvicorn answers a request it cannot parse (conflicting `Content-Length` and
`Transfer-Encoding`, a malformed line) with a plain-text 400, and takes a URL or headers of
any size (1 MiB of headers, 10,000 of them). Here a URL past `MAX_URL_BYTES` is 414, headers
past `MAX_HEADER_BYTES` or `MAX_HEADERS` are 431, and every such refusal, like the parse
errors, is a JSON body `{"error": {...}}` with an `x-request-id`, as every other error.

A response's writes made in one turn of the event loop go to the socket together
(`_Coalesced`): uvicorn writes a response's head as soon as the app starts it, and its
body in writes of its own, one system call each, where the head and the first body are
nearly always sent in the same turn (a JSON response; a create's stream, whose first events
are committed before its head: adapters/http/streaming.py). On loopback a send costs the
sender the receiver's side of TCP too, so a write less is a visible part of a small
response's CPU (docs/performance.md, "Fewer collections, and one write for a head and
its first body").

A response that must stop when its client goes away registers a callback in its scope
(`ON_GONE`), run when the connection is lost before the response is complete; without it
such a response would need a task of its own waiting on `receive` for `http.disconnect`.
Once the connection is lost the scope holds None there instead of a list.

A keep-alive connection whose idle time runs out while a request waits unread on its socket
is not closed (`timeout_keep_alive_handler`). Each turn of the loop runs its timers before it
polls the sockets, so on a busy loop a client's next request can sit a whole turn in the
socket's buffer after the idle time ran out; closing the socket then drops it, and the
kernel answers the client with a reset (`httpx.ReadError`, "Connection reset by peer", for
a create the client cannot simply send again). The request is read in that same turn's
poll instead, and the idle timer is armed once more (should reading be paused, the
connection still closes an idle time later). A request sent after the close began is still
reset: no server can take it. So the idle time (`serve --keep-alive-s`, 75 s) is longer
than the clients' own (the OpenAI SDKs', httpx's, reuse a connection idle up to 5 s, and
uvicorn's own default is those same 5 s): an idle connection is then closed by its client,
never under a request.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import termios
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from adapters.http.watch import ON_GONE

# Far above what any client of the API sends (ids are in paths, and query strings are short)
# and what proxies commonly allow (8-16 KiB of request line, 8-64 KiB of headers).
MAX_URL_BYTES = 16 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 128

_REASONS = {400: b"Bad Request", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; httptools then raises its parser
    error, which uvicorn answers through `send_400_response`."""


# What a connection holds back for the end of a turn, at most; a larger write goes to the
# transport at once, uncopied. So a stream of large events (written in pieces of up to
# `MAX_WRITE`, adapters/http/sse.py) still meets uvicorn's flow control write by write,
# and a client that stopped reading pins no more than before (docs/performance.md,
# "Stalled readers").
HOLD_BYTES = 64 * 1024


class _Coalesced:
    """A connection's transport as its responses see it: what they write in one turn of the
    loop is handed to the socket in one write at the end of that turn (or sooner: before a
    close or an abort, and once `HOLD_BYTES` are held); everything else is the transport's
    own. The bytes and their order are the same; only the number of writes changes."""

    __slots__ = ("_held", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._pending: list[bytes] = []
        self._held = 0

    def write(self, data: bytes) -> None:
        if len(data) >= HOLD_BYTES:
            self.flush()
            self._transport.write(data)
            return
        if not self._pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self._pending.append(data)
        self._held += len(data)
        if self._held >= HOLD_BYTES:
            self.flush()

    def flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending, self._held = [], 0
        if not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending, self._held = [], 0
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _unread_bytes(transport: asyncio.BaseTransport) -> int:
    """The bytes waiting unread on the transport's socket (0 where that cannot be told)."""
    sock = transport.get_extra_info("socket")
    try:
        count = array.array("i", [0])
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, count, True)
    except (AttributeError, OSError, ValueError):  # no socket, or a closed one
        return 0
    return count[0]


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's protocol, bounded, with OpenAI-shaped refusals, and each response's writes
    of a turn coalesced (see the module's doc)."""

    _refusal: tuple[int, str, str] | None = None
    _header_bytes = 0
    _coalesced: _Coalesced | None = None

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        if self.cycle is not before and self.cycle is not None:  # a request, not an upgrade
            if self._coalesced is None:  # one per connection: its responses write in order
                self._coalesced = _Coalesced(self.transport)
            self.cycle.transport = self._coalesced  # type: ignore[assignment]
            self.cycle.scope[ON_GONE] = []  # type: ignore[literal-required]

    def connection_lost(self, exc: Exception | None) -> None:
        # The callbacks a response registered (adapters/http/streaming.py): the client went
        # away before it was complete, as `http.disconnect` from `receive` would say. The
        # list is taken away, so that a response that looks only now finds none and asks
        # `receive`, which answers `http.disconnect` at once.
        cycle = self.cycle
        gone: list[Callable[[], None]] | None = None
        if cycle is not None and not cycle.response_complete:
            gone = cycle.scope.get(ON_GONE)  # type: ignore[assignment]
            cycle.scope[ON_GONE] = None  # type: ignore[literal-required]
        super().connection_lost(exc)
        for callback in list(gone or ()):
            callback()

    # What the protocol itself writes or closes goes after what its responses wrote.
    def data_received(self, data: bytes) -> None:
        self._flush()  # a pipelined request's refusal (400) follows the response before it
        super().data_received(data)

    def shutdown(self) -> None:
        self._flush()
        super().shutdown()

    def timeout_keep_alive_handler(self) -> None:
        self._flush()
        if _unread_bytes(self.transport) and not self.transport.is_closing():
            # A request came as the idle time ran out: read it (see the module's doc).
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )
            return
        super().timeout_keep_alive_handler()

    def _flush(self) -> None:
        if self._coalesced is not None:
            self._coalesced.flush()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._refusal, self._header_bytes = None, 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_URL_BYTES:
            self._refuse(
                414, "uri_too_long", f"The request URL is longer than {MAX_URL_BYTES} bytes."
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if len(self.headers) >= MAX_HEADERS:
            self._refuse(
                431, "headers_too_large", f"The request has more than {MAX_HEADERS} headers."
            )
        if self._header_bytes > MAX_HEADER_BYTES:
            self._refuse(
                431,
                "headers_too_large",
                f"The request's headers are larger than {MAX_HEADER_BYTES} bytes.",
            )
        super().on_header(name, value)

    def _refuse(self, status: int, code: str, message: str) -> None:
        self._refusal = (status, code, message)
        raise _Refused(message)

    def send_400_response(self, msg: str) -> None:
        status, code, message = self._refusal or (
            400,
            "invalid_http_request",
            "The server could not parse the HTTP request (for example, it has both "
            "Content-Length and Transfer-Encoding, or a malformed request line).",
        )
        body = msgspec.json.encode(
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": code,
                }
            }
        )
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
        head += [
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        ]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"x-request-id: req_" + uuid.uuid4().hex.encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
