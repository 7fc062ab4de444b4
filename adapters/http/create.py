"""`POST /v1/responses`, the create, as a plain ASGI endpoint that the app runs before
litestar's router (app.py, `ResplogApp`). Every other route is litestar's.

The create is the hot path, and litestar's machinery around a handler (the router's
lookup, a `Request` and three dependencies resolved for each call, a `Response` made into
an ASGI response, the exception middleware's wrapper of `send`) cost 5-6 % of a streaming
create's instructions, and as much of its CPU in a burst (docs/performance.md, "The create
outside litestar's handler"). This endpoint does what that route did, in the same order,
with the same answers:

1. admission (401, 429), before anything is read, as the app's `before_request` does for
   every other `/v1` route (auth.py);
2. the declared media type (400 `unsupported_content_type`, routes.py `check_json`);
3. the body, at most `--max-body-bytes` (413 `request_too_large`; at once when its
   `Content-Length` says so, as litestar's `Request.body`);
4. the use-case: a streaming, background or plain create.

An exception before the response starts is answered through the one error map
(errors.py `handle`), as litestar's exception middleware does it; one after it started is
raised on, and the server ends the connection. OPTIONS is admitted, then 204 with
`allow`; any other method is 405 at once (the WebSocket at this path is litestar's,
sockets.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import MethodNotAllowedException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.types import Message, Receive, Scope, Send

from adapters.http import errors
from adapters.http.auth import PRINCIPAL, bearer
from adapters.http.routes import JSON, check_json, sse_of
from service.access.admission import Access
from service.bundle import Bundle
from service.responses import create as responses
from service.responses import modes
from service.settings import Settings
from service.wire.decode import parse_create_body
from service.wire.extras import with_client_headers

PATH = "/v1/responses"
PATHS = frozenset({PATH, PATH + "/"})  # litestar's router took the path with a slash too
ALLOW = "POST, OPTIONS"
_JSON = JSON.encode()


class CreateEndpoint:
    """The endpoint over the app's running process: `bundle` and `access` are called for
    each request, as the dependencies were (each raises `StoreUnavailable` until the
    process runs)."""

    def __init__(
        self, settings: Settings, bundle: Callable[[], Bundle], access: Callable[[], Access]
    ) -> None:
        self.settings = settings
        self.bundle = bundle
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["path_template"] = PATH  # the request log's route, as litestar's router sets it
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self._answer(scope, receive, tracked)
        except Exception as exc:
            if started:
                raise
            request: Request[Any, Any, Any] = Request(scope, receive)
            await errors.handle(request, exc).to_asgi_response(None, request)(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]  # type: ignore[typeddict-item]
        if method not in ("POST", "OPTIONS"):  # refused before admission, as by the router
            raise MethodNotAllowedException(headers={"allow": ALLOW})
        headers = _headers(scope)
        access = self.access()
        principal = await access.admit(bearer(headers.get("authorization")))
        scope.setdefault("state", {})[PRINCIPAL] = principal
        if method == "OPTIONS":  # admitted, as litestar's OPTIONS of every other route
            head = [(b"allow", ALLOW.encode())]
            await send({"type": "http.response.start", "status": 204, "headers": head})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        check_json(headers.get("content-type"))
        body = await _body(receive, headers.get("content-length"), self.settings.max_body_bytes)
        if body is None:
            return  # the client went away before its body was in: no one to answer
        req = parse_create_body(body, self.settings.limits)
        req = with_client_headers(req, headers)
        bundle, owner = self.bundle(), principal.owner
        if req.stream:
            slot = access.open_stream(principal)  # before anything is written: a 429 writes none
            try:
                events = await modes.create_and_stream(bundle, req, owner)
            except BaseException:
                slot.release()
                raise
            stream = sse_of(events, slot, self.settings, created=True)
            await stream.asgi()(scope, receive, send)
            return
        if req.background:
            answer: bytes | msgspec.Struct = (
                await responses.create_response(bundle, req, owner)
            ).response
        else:
            gone = partial(_disconnected, receive)
            answer = await modes.create_and_wait(bundle, req, owner, client_gone=gone)
        data = answer if isinstance(answer, bytes) else msgspec.json.encode(answer)
        head = [(b"content-type", _JSON), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": data, "more_body": False})


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (as ASGI servers send them; lowered again
    for one that does not), the first of a repeated one as litestar's `Headers.get` gives
    it."""
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


async def _body(receive: Receive, declared: str | None, limit: int) -> bytes | None:
    """The request's body, or None if the client went away first; 413 over `limit`."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestEntityTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")  # type: ignore[assignment]
        if chunk:
            size += len(chunk)
            if size > limit:
                raise RequestEntityTooLarge
            chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _disconnected(receive: Receive) -> None:
    """Returns when the client closes the connection (its body is read by then, so the
    next ASGI message is the disconnect, or none until the response is sent)."""
    while (await receive())["type"] != "http.disconnect":
        pass
