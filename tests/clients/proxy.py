"""A logging reverse proxy between an agent client and `resplog serve`: it passes every
request through unchanged (SSE streamed as it comes) and appends one JSON line per request,
`{"method", "path", "headers", "body", "status", "error"}` (and, for a response, its
`response_id` and `output_ids`), to a file. A client may act on a response before its
last bytes pass (an SSE client on `response.completed`), so a line is written once the
upstream answer ended; `GET /_proxy/idle` says how many requests are still in flight.

The server logs no access lines, so this is how a test knows what a client sent and that
every answer was 200. Run: `python -m tests.clients.proxy UPSTREAM LOG [--strip]`; it
prints `FAKE READY <url>` as the fakes do (so `FakeProcess` starts it).

`--strip` forwards only function tools and drops `client_metadata` (still logging what the
client sent): how the fixtures under tests/fixtures/clients/ were captured from whole turns
before the server accepted those shapes.
"""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from tests.fakes.asgi import READY

# Hop-by-hop headers a proxy must not forward (RFC 9110 7.6.1), plus those aiohttp sets.
_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "host",
    "content-length",
    "content-encoding",
}


def _body(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def _stripped(raw: bytes) -> bytes:
    body = _body(raw)
    if not isinstance(body, dict):
        return raw
    body.pop("client_metadata", None)
    if "tools" in body:
        body["tools"] = [t for t in body["tools"] if t.get("type") == "function"]
    return json.dumps(body).encode()


def _answered(raw: bytes) -> dict[str, Any]:
    """The response id and its output item ids, from a JSON response or the last SSE event
    that carries the response (so a replay can map the ids a client refers to later)."""
    response: Any = None
    for line in raw.decode(errors="replace").splitlines():
        event = _body(line.removeprefix("data: ").encode()) if line.startswith("data: ") else None
        if isinstance(event, dict) and isinstance(event.get("response"), dict):
            response = event["response"]
    if response is None:
        response = _body(raw)
    try:
        return {"response_id": response["id"], "output_ids": [i["id"] for i in response["output"]]}
    except (TypeError, KeyError):  # not a response (a models list, say)
        return {}


class Proxy:
    def __init__(self, upstream: str, log: Path, strip: bool = False) -> None:
        self.upstream = upstream.rstrip("/")
        self.log = log
        self.strip = strip
        self.inflight = 0
        self.session: ClientSession | None = None

    async def close(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    def record(self, entry: dict[str, Any]) -> None:
        with self.log.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    async def idle(self, request: web.Request) -> web.Response:
        """How many requests are still passing through (a test reads the log at 0)."""
        return web.json_response({"inflight": self.inflight})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.inflight += 1
        try:
            return await self._forward(request)
        finally:
            self.inflight -= 1

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        entry: dict[str, Any] = {
            "method": request.method,
            "path": request.path_qs,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body": _body(raw),
        }
        if self.session is None:
            self.session = ClientSession(timeout=ClientTimeout(total=120), auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        chunks: list[bytes] = []
        if self.strip:
            raw = _stripped(raw)
        try:
            async with self.session.request(
                request.method, self.upstream + request.path_qs, data=raw, headers=headers
            ) as up:
                entry["status"] = up.status
                out = web.StreamResponse(status=up.status)
                for k, v in up.headers.items():
                    if k.lower() not in _HOP:
                        out.headers[k] = v
                await out.prepare(request)
                async for chunk in up.content.iter_any():
                    chunks.append(chunk)
                    await out.write(chunk)
                await out.write_eof()
                return out
        finally:
            got = b"".join(chunks)
            entry |= {"error": _body(got)} if entry.get("status") != 200 else _answered(got)
            self.record(entry)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("upstream")
    p.add_argument("log", type=Path)
    p.add_argument("--strip", action="store_true")
    a = p.parse_args(argv)
    proxy = Proxy(a.upstream, a.log, a.strip)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/_proxy/idle", proxy.idle)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    app.on_cleanup.append(proxy.close)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on, so READY can be printed first
    print(f"{READY}http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    web.run_app(app, sock=sock, print=None)


if __name__ == "__main__":
    main()
