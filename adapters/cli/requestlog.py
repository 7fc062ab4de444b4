"""The request log: one line per HTTP request once it is answered (a stream: once it ends),
with its method, route template, status, duration, request id, owner and response id.

Never the prompt, a header, a query string or a key: the route is the template
(`/v1/responses/{response_id}`), the owner is the tenant an API key belongs to, and the only
thing read from a body is the id at the start of a created response. An ASGI wrapper the
`serve` command puts around the app, inside the edge (adapters/http/edge.py), which shows it
the response's start and first body.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from adapters.http.watch import answered, unanswered, watch
from service.access.admission import Principal

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]  # litestar's own type is not ours to import

log = logging.getLogger("resplog.requests")
# The first id in a created response's first body bytes (its JSON, or the SSE
# `response.created` event); openai-python `Response.id`.
_CREATED_ID = re.compile(rb'"id":"(resp_[0-9a-zA-Z]{1,64})"')
_SNIFF_BYTES = 1024


class _Seen:
    """What the request log sees of a response (an `edge.Watcher`): its status, and the id
    at the start of a created response's first body."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.status: int | None = None  # no response begun (yet): see `unanswered`
        self.sniffed: str | None = None

    def sent(self, message: Message) -> bool:
        if message["type"] == "http.response.start":
            self.status = answered(self.scope, int(message["status"]))
            return self.scope.get("method") == "POST" and self._given() is None
        found = _CREATED_ID.search(bytes(message.get("body", b""))[:_SNIFF_BYTES])
        self.sniffed = found.group(1).decode() if found else None
        return False

    def response_id(self) -> str | None:
        given = self._given()
        return self.sniffed if given is None else given

    def _given(self) -> str | None:
        """The response id in the path (the routing has filled in the path params by the
        response's start), as the client sent it: bounded."""
        given = (self.scope.get("path_params") or {}).get("response_id")
        return None if given is None else str(given)[:80]


def request_log(app: ASGIApp) -> ASGIApp:
    """`app`, logging one line per HTTP request at INFO on `resplog.requests`; inside the
    edge (adapters/http/edge.py), which shows it the response."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        start = time.perf_counter()
        seen = _Seen(scope)
        watch(scope, seen)
        try:
            await app(scope, receive, send)
        finally:
            _log(scope, seen, time.perf_counter() - start)

    return middleware


def _log(scope: Scope, seen: _Seen, seconds: float) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    state = scope.get("state") or {}
    owner = next((v.owner for v in state.values() if isinstance(v, Principal)), None)
    response_id = seen.response_id()
    fields = {
        "method": scope.get("method", "-"),
        "route": scope.get("path_template") or "(no route)",
        "status": unanswered(scope) if seen.status is None else seen.status,
        "duration_ms": round(seconds * 1000, 2),
        "request_id": state.get("request_id"),
        "owner": owner,
        "response_id": response_id,
    }
    args = (
        fields["method"],
        fields["route"],
        fields["status"],
        fields["duration_ms"],
        fields["request_id"] or "-",
        owner or "-",
        response_id or "-",
    )
    # The record made here, not by `log.info`: that would look up its caller's file and
    # line in the stack, which no format shows, for each request (a third of the line's
    # cost).
    record = log.makeRecord(
        log.name, logging.INFO, __file__, 0, _LINE, args, None, None, {"fields": fields}
    )
    log.handle(record)


_LINE = "%s %s %d %.1fms %s owner=%s response=%s"
