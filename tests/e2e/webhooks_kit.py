"""What the webhook tests share: a receiver (a real HTTP server in a thread) that keeps
every POST with its headers and answers as the test says, a reasoning key that seals the
endpoints' secrets, and the `resplog webhooks` commands."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.e2e.conftest import RESPLOG

KEY = base64.b64encode(b"resplog webhook tests, no secret").decode()
# Small enough that a retry comes within the test: the first retry waits 0.05-0.1 s.
FAST = (
    "--reasoning-key",
    KEY,
    "--webhook-hosts",
    "127.0.0.0/8",
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
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                size = int(self.headers.get("content-length", "0"))
                got = Received(
                    {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(size), time.time()
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

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
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


def deliveries(url: str, *args: str) -> list[dict[str, Any]]:
    done = webhooks("deliveries", *args, "--json", url=url)
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
