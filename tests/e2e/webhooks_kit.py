"""What the webhook tests share: a receiver (a real HTTP server in a thread) that keeps
every POST with its headers and answers as the test says, a reasoning key that seals the
endpoints' secrets, and the `resplog webhooks` commands."""

from __future__ import annotations

import asyncio
import base64
import json
import sqlite3
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import asyncpg

from tests.e2e.conftest import RESPLOG

T = TypeVar("T")
KEY = base64.b64encode(b"resplog webhook tests, no secret").decode()
# Small enough that a retry comes within the test: the first retry waits 0.05-0.1 s. Only
# 127.0.0.1 is an allowed host: a receiver on 127.0.0.2 (the loopback too) is a refused one.
FAST = (
    "--reasoning-key",
    KEY,
    "--webhook-hosts",
    "127.0.0.1/32",
    "--webhook-backoff-s",
    "0.1",
    "--webhook-poll-s",
    "0.05",
)


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """`answer(received)` gives the status to answer with (None: hold the request until
    `release` is set, then answer 200)."""

    answer: Callable[[Received], int | None] = lambda _: 200
    delay_s: float = 0.0
    got: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    port: int = 0
    host: str = "127.0.0.1"
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                got = Received(
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(size),
                    time.time(),
                )
                receiver.got.append(got)
                status = receiver.answer(got)
                if status is None:
                    receiver.release.wait(60)
                    status = 200
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.release.set()
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def wait(self, count: int, timeout: float = 20.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.got) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.got) >= count, f"{len(self.got)} of {count} webhooks came"
        return self.got

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(r.body) for r in self.got]


def webhooks(*args: str, url: str, key: bool = True) -> subprocess.CompletedProcess[str]:
    env_key = ("--reasoning-key", KEY) if key and args[0] in ("add", "rotate-secret") else ()
    return subprocess.run(
        [RESPLOG, "webhooks", *args, "--database-url", url, *env_key],
        capture_output=True,
        text=True,
        timeout=60,
    )


def add_endpoint(
    url: str, target: str, events: str = "response.completed", owner: str | None = None
) -> tuple[str, str]:
    """(endpoint id, signing secret) of a new endpoint."""
    who = ("--owner", owner) if owner else ()
    done = webhooks("add", target, "--events", events, *who, url=url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    endpoint_id = lines[0].split()[3]
    assert endpoint_id.startswith("whep_") and lines[-1].startswith("whsec_"), lines
    return endpoint_id, lines[-1]


async def _on_store(url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    from adapters.store.factory import open_store

    store = await open_store(url)
    try:
        return await work(store)
    finally:
        await store.close()


def add_direct(
    url: str, target: str, events: str = "response.completed", owner: str = "anonymous"
) -> tuple[str, str]:
    """`add_endpoint` through the use-case in this process (the CLI takes a second or
    more to start; the tests of the CLI itself use `add_endpoint`)."""
    from adapters.sealing import AesGcmSealer
    from adapters.store.webhooks import SqlWebhooks
    from service.webhooks.manage import add_endpoint as add

    sealer = AesGcmSealer.from_setting(KEY)[0]

    async def work(store: Any) -> tuple[str, str]:
        new = await add(
            SqlWebhooks(store), sealer, target, events.split(","), owner, now=time.time()
        )
        return new.endpoint.id, new.secret

    return asyncio.run(_on_store(url, work))


def set_status(url: str, endpoint_id: str, status: str) -> None:
    """`webhooks enable|disable` through the use-case, in this process (for the steps a
    test must make quickly; the CLI's own are tested too)."""
    from adapters.store.webhooks import SqlWebhooks
    from service.webhooks.manage import set_status as change

    async def work(store: Any) -> None:
        await change(SqlWebhooks(store), endpoint_id, status)  # type: ignore[arg-type]

    asyncio.run(_on_store(url, work))


def api_key(url: str, owner: str) -> str:
    """A new API key of `owner` (through the use-case, in this process)."""
    from adapters.store.keys import SqlApiKeyStore
    from service.access.keys import create_key

    async def work(store: Any) -> str:
        return (await create_key(SqlApiKeyStore(store), owner, None, now=time.time())).secret

    return asyncio.run(_on_store(url, work))


def deliveries(url: str, *args: str) -> list[dict[str, Any]]:
    done = webhooks("deliveries", *args, "--json", url=url)
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def first(url: str, endpoint_id: str) -> str | None:
    """The status of the endpoint's first delivery (None: none yet)."""
    found = status(url, endpoint_id)
    return found[0][0] if found else None


def status(url: str, endpoint_id: str | None = None) -> list[tuple[str, int]]:
    """(status, attempts) of each delivery (of one endpoint), oldest first, read from the
    database: a test waits on this, not on the CLI, which takes a second or so to start."""
    where = "" if endpoint_id is None else f" WHERE endpoint_id = '{endpoint_id}'"
    sql = f"SELECT status, attempts FROM webhook_deliveries{where} ORDER BY event_at"
    return [(str(s), int(str(n))) for s, n in rows(url, sql)]


def endpoint_status(url: str, endpoint_id: str) -> str:
    return str(rows(url, f"SELECT status FROM webhook_endpoints WHERE id = '{endpoint_id}'")[0][0])


def attempts_recorded(url: str, endpoint_id: str) -> int:
    """Attempts of the endpoint's deliveries that have ended (not in flight)."""
    sql = (
        "SELECT count(*) FROM webhook_attempts "
        f"WHERE endpoint_id = '{endpoint_id}' AND outcome <> 'in_flight'"
    )
    return int(str(rows(url, sql)[0][0]))


def rows(url: str, sql: str) -> list[tuple[object, ...]]:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1]) as db:
            return [tuple(r) for r in db.execute(sql).fetchall()]

    async def read() -> list[tuple[object, ...]]:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return [tuple(r) for r in await conn.fetch(sql)]
        finally:
            await conn.close()

    return asyncio.run(read())


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
