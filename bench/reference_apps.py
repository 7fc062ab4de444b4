"""Two servers that answer a streaming create with bytes recorded from resplog and do nothing
else: what the platform under resplog costs for the same reply (`burst_bench.py --floors`).

- `asgi`: a bare ASGI function under uvicorn. It reads the request's body, sends the head,
  then each recorded write, with a turn of the event loop before each (resplog's writes
  are separated by commits), and ends the body.
- `litestar`: a litestar app with one `POST /v1/responses` route that reads the body and
  returns the same writes as a litestar `Stream`.

Any other request (the bench sends `GET /health`) is answered as resplog answers
`GET /health`: `{"status":"ok"}`, by the ASGI function itself or by a litestar route.

Both run as `serve` runs: uvicorn with uvloop and httptools, its access log off. With
`granian` as a fourth argument they run under granian instead (an HTTP server in Rust that
serves ASGI: one worker process, its Rust runtime on one thread, uvloop, no access log;
not a dependency: `.venv/bin/pip install granian`), to see what a front end that parses
and writes HTTP outside Python would save.

    .venv/bin/python bench/reference_apps.py asgi|litestar PORT WRITES.json [granian]

`WRITES.json`: a list of the reply's writes, as text (`burst_bench.py` records them).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import uvicorn
from litestar import Litestar, Request, get, post
from litestar.response import Stream

# The headers resplog's create sends (its `x-request-id` is made per request there).
HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
SSE = "text/event-stream; charset=utf-8"
HEALTH = b'{"status":"ok"}'
JSON_HEAD = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(HEALTH))]


class Health(msgspec.Struct):
    status: str


def asgi_app(writes: list[bytes]) -> Any:
    head = [(b"content-type", SSE.encode())]
    head += [(k.encode(), v.encode()) for k, v in HEADERS.items()]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # the lifespan: nothing to start
            return
        while (await receive()).get("more_body"):
            pass
        if scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 200, "headers": JSON_HEAD})
            await send({"type": "http.response.body", "body": HEALTH, "more_body": False})
            return
        await send({"type": "http.response.start", "status": 200, "headers": head})
        for chunk in writes:
            await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def litestar_app(writes: list[bytes]) -> Litestar:
    async def body() -> AsyncIterator[bytes]:
        for chunk in writes:
            await asyncio.sleep(0)
            yield chunk

    @post("/v1/responses", status_code=200)
    async def create(request: Request[Any, Any, Any]) -> Stream:
        await request.body()
        return Stream(body(), media_type=SSE, headers=HEADERS)

    @get("/health")
    async def health() -> Health:
        return Health(status="ok")

    return Litestar([create, health], logging_config=None)


def app_of(kind: str, path: Path) -> Any:
    writes = [w.encode() for w in json.loads(path.read_text())]
    return asgi_app(writes) if kind == "asgi" else litestar_app(writes)


def from_environment() -> Any:
    """The app granian's worker builds (it imports its app by name, in a process of its
    own): the kind and the recorded writes `main` put in the environment."""
    return app_of(os.environ["REFERENCE_KIND"], Path(os.environ["REFERENCE_WRITES"]))


def main() -> None:
    if (
        len(sys.argv) not in (4, 5)
        or sys.argv[1] not in ("asgi", "litestar")
        or sys.argv[4:] not in ([], ["granian"])
    ):
        raise SystemExit(f"usage: {sys.argv[0]} asgi|litestar PORT WRITES.json [granian]")
    kind, port, path = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    if sys.argv[4:] == ["granian"]:
        from granian import Granian
        from granian.constants import Interfaces, Loops
        from granian.log import LogLevels

        os.environ.update(REFERENCE_KIND=kind, REFERENCE_WRITES=str(path.resolve()))
        sys.path.insert(0, str(Path(__file__).parent))  # its workers import this module
        Granian(
            "reference_apps:from_environment",
            factory=True,
            address="127.0.0.1",
            port=port,
            interface=Interfaces.ASGI,
            loop=Loops.uvloop,
            workers=1,
            runtime_threads=1,
            websockets=False,
            log_level=LogLevels.warning,
            log_access=False,
        ).serve()
        return
    app = app_of(kind, path)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        lifespan="off",
    )


if __name__ == "__main__":
    main()
