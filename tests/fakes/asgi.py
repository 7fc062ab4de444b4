"""The little HTTP the fake servers need: a bare ASGI request/response layer, server-sent
event streams that notice a client going away, and a uvicorn runner on a free port."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
READY = "FAKE READY "


class Request:
    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.receive = receive
        self.send = send

    async def body(self) -> bytes:
        chunks = []
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                return b"".join(chunks)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                return b"".join(chunks)

    async def respond(
        self, status: int, body: bytes, content_type: str = "application/json"
    ) -> None:
        headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    async def json(self, status: int, document: Any) -> None:
        await self.respond(status, json.dumps(document).encode())


class EventStream:
    """A `text/event-stream` body; `gone` is set when the client disconnects."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.gone = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await self.request.send({"type": "http.response.start", "status": 200, "headers": headers})
        self._watch = asyncio.create_task(self._watch_disconnect())

    async def _watch_disconnect(self) -> None:
        while (await self.request.receive())["type"] != "http.disconnect":
            pass
        self.gone.set()

    async def data(self, payload: bytes) -> None:
        body = b"data: " + payload + b"\n\n"
        await self.request.send({"type": "http.response.body", "body": body, "more_body": True})

    async def end(self) -> None:
        await self.request.send({"type": "http.response.body", "body": b"", "more_body": False})

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()


class DropConnection(Exception):
    """Raised inside a handler after the response started: uvicorn then closes the socket
    mid-body, as a server that died would."""


def serve(app: Callable[[Scope, Receive, Send], Awaitable[None]], port: int = 0) -> None:
    """Serve on 127.0.0.1 and print `FAKE READY <url>` once connections are accepted."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)  # connections queue from now on, so READY can be printed before serving
    config = uvicorn.Config(
        app, lifespan="off", log_level="critical", access_log=False, timeout_keep_alive=30
    )
    print(f"{READY}http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
