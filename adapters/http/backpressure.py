"""A deadline on every write of a response body, so that a client that stops reading (or
vanished without closing its connection) is let go instead of holding a stream forever.

The bytes waiting for such a client are already bounded: uvicorn stops accepting writes
once its transport buffer passes the high-water mark (64 KiB), so the app's `send` waits,
the SSE pump waits on its 64-event queue, and the hub drops that subscriber's backlog for a
re-read later. What is not bounded is the time: the stream, its tail and its stream slot are
held as long as the connection lives, which for a half-open one is until TCP gives up. So
a write that cannot be handed over within `timeout` seconds aborts the connection. The
response then ends as for any client that went away (a non-background stream's generation
is cancelled with reason `client_disconnected`). A WebSocket's messages have the same
deadline, with the same end: the socket is dropped as a client that went away.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("resplog.http")


class SendTimeout(Exception):
    """A response body write waited longer than the deadline (the fallback when the
    connection cannot be aborted directly)."""


def _abort_connection(send: Send) -> bool:
    # uvicorn's `send` is a method of its request cycle, which holds the connection's
    # transport. Aborting it drops the socket at once (closing would wait for the unread
    # buffer to drain); uvicorn then reports the client as disconnected, which unblocks the
    # write and ends the response the usual way.
    transport: Any = getattr(getattr(send, "__self__", None), "transport", None)
    abort = getattr(transport, "abort", None)
    if not callable(abort):
        return False
    abort()
    return True


def flow_of(send: Send) -> Any:
    """uvicorn's flow control of an HTTP connection, if `send` is uvicorn's own.

    Its HTTP `send` waits only while the transport has paused writing (its buffer past the
    high-water mark): then `flow.write_paused` is true, and nothing else in it waits. So a
    write while it is false goes out at once, and needs no deadline: arming one for every
    write (a timer, scheduled and cancelled) cost about 2.5 % of a streaming create."""
    flow = getattr(getattr(send, "__self__", None), "flow", None)
    return flow if isinstance(getattr(flow, "write_paused", None), bool) else None


# The messages that carry a response's bytes: an HTTP body, a WebSocket message (the same
# events; uvicorn's WebSocket protocol waits for its transport to drain the same way).
_WRITES = {ScopeType.HTTP: "http.response.body", ScopeType.WEBSOCKET: "websocket.send"}


def send_deadline(app: ASGIApp, timeout: float) -> ASGIApp:
    """`app` with a deadline of `timeout` seconds (0: none) on each body write. Wrap the
    outermost app, so that `send` is the server's own. (`serve` runs HTTP requests through
    adapters/http/edge.py, which applies the same deadline with `send_within`.)"""
    if timeout <= 0:
        return app

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in _WRITES:
            await app(scope, receive, send)
            return
        write = _WRITES[scope["type"]]
        flow = flow_of(send) if scope["type"] == ScopeType.HTTP else None

        async def within(message: Message) -> None:
            if message["type"] != write or (flow is not None and not flow.write_paused):
                await send(message)  # uvicorn hands it to the transport without waiting
                return
            await send_within(send, message, timeout, scope)

        await app(scope, receive, within)

    return middleware


async def send_within(send: Send, message: Message, seconds: float, scope: Scope) -> None:
    """`send(message)`, the connection aborted if it takes longer than `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            await send(message)
    except TimeoutError:
        rid = scope.get("state", {}).get("request_id", "-")
        log.warning(
            "request %s: the client read nothing for %gs; dropping the connection", rid, seconds
        )
        if not _abort_connection(send):
            raise SendTimeout(f"no write within {seconds}s") from None
