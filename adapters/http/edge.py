"""The one wrapper of the server's `send` for HTTP requests, outermost in what `serve` runs:
each request's id (in `scope["state"]` and the `x-request-id` header), the deadline on body
writes (adapters/http/backpressure.py), and what the request log and the metrics see of
each response.

Those four each wrapped `send` for themselves, and litestar put an exception handler of
its own inside the request-id middleware, so that every message of every response went
through six calls before uvicorn's. The observers now `watch` the request instead: the
edge hands each of them the response's start and its body messages until it has seen
enough (the start and the first body, for both), and afterwards a body write is one call
(docs/performance.md, "The edge").

A WebSocket gets the deadline alone, as before (its id is the socket route's own).
"""

from __future__ import annotations

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from adapters.http.backpressure import flow_of, send_deadline, send_within
from adapters.http.errors import new_request_id
from adapters.http.turns import NEVER_HELD, turnstile
from adapters.http.watch import WATCHERS, Watcher


def edge(app: ASGIApp, deadline: float) -> ASGIApp:
    """`app` behind the edge; `deadline`: seconds a body write may wait for the client (0:
    no limit). Wrap the outermost app, so that `send` is the server's own."""
    others = send_deadline(app, deadline)

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await others(scope, receive, send)
            return
        if scope.get("path") not in NEVER_HELD:
            turns = turnstile()
            if not turns.room():
                await turns.wait()  # a burst: this request begins in a later turn
        rid = new_request_id()
        scope.setdefault("state", {})["request_id"] = rid
        header = (b"x-request-id", rid.encode())
        watchers: list[Watcher] = []
        scope[WATCHERS] = watchers  # type: ignore[literal-required]
        flow = flow_of(send)

        async def send_edge(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            if watchers:
                watchers[:] = [w for w in watchers if w.sent(message)]  # type: ignore[arg-type]
            if (
                deadline <= 0
                or message["type"] != "http.response.body"
                or (flow is not None and not flow.write_paused)
            ):
                await send(message)  # uvicorn hands it to the transport without waiting
                return
            await send_within(send, message, deadline, scope)

        await app(scope, receive, send_edge)

    return middleware
