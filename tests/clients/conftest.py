"""The agent clients people point at resplog, run as their users run them, against one real
`resplog serve` on PostgreSQL whose engine is the fake sglang (gpt-oss in harmony), behind a
logging proxy (`proxy.py`) that records every request a client sent and the status it got.

The Node clients (Codex CLI, the Vercel AI SDK) are pinned in package.json/package-lock.json
beside this file and installed here with `npm ci` on first use (about 10 s; node_modules is
kept, and reinstalled when the lock file changes). `RESPLOG_CAPTURE=1 pytest tests/clients`
also writes each test's requests to tests/fixtures/clients/<test>.json; with
`RESPLOG_PROXY_STRIP=1` the proxy forwards only function tools and drops `client_metadata`
(see proxy.py), to capture whole turns of shapes the server does not accept yet.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import LOOPBACK_MCP, RESPLOG, Server, start_server, stop_server
from tests.fakes.plugin import *  # noqa: F403
from tests.fakes.process import FakeProcess

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "clients"
# One reasoning key for every server and run, so the sealed reasoning in captured requests
# (`encrypted_content`, which Codex asks for) opens when they are replayed.
KEY = ("--reasoning-key", base64.b64encode(b"resplog client tests, not secret").decode())
SERVED = "gpt-oss-120b"  # the fake sglang's served model name
CUT = 400  # captured strings longer than this are cut (in bodies, not headers)
PORT_HEADERS = {"host", "content-length"}  # they name this run's port and body
WEATHER_PROMPT = "What's the weather in Tokyo? [fake:function_call]"
ANSWER = "It is 20°C and sunny in Tokyo."  # the fake's answer once a tool has answered


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """tests/clients/node_modules, installed from the lock file (`npm ci`) when absent or
    stale; a machine without Node gets it from Debian (`apt-get install nodejs npm`)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("the client tests need Node and npm: apt-get install -y nodejs npm")
    modules = HERE / "node_modules"
    stamp = modules / ".resplog-lock-sha256"
    want = hashlib.sha256((HERE / "package-lock.json").read_bytes()).hexdigest()
    # The suite runs in two processes (pytest-xdist), and each may come here first: one
    # installs while the other waits on the lock, then finds the stamp.
    with (HERE / ".npm-ci.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.read_text() != want:
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=HERE,
                check=True,
                timeout=600,
            )
            stamp.write_text(want)
    return modules


@dataclass
class Traffic:
    """What the clients sent through the proxy, and what they got."""

    log: Path
    proxy_url: str
    start: int = 0

    def mark(self) -> None:
        self.start = len(self._lines())

    def settle(self, within: float = 10.0) -> None:
        """Wait until no request is passing through the proxy (its line is then written)."""
        deadline = time.monotonic() + within
        while httpx.get(f"{self.proxy_url}/_proxy/idle", timeout=5).json()["inflight"]:
            assert time.monotonic() < deadline, "a request is still passing through the proxy"
            time.sleep(0.02)

    def _lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def requests(self) -> list[dict[str, Any]]:
        """Requests since the test began, in order; each with its `status`."""
        self.settle()
        return [json.loads(line) for line in self._lines()[self.start :]]

    def responses_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests() if r["path"].startswith("/v1/responses")]

    def assert_all_ok(self) -> None:
        bad = [(r["method"], r["path"], r.get("status"), r.get("error")) for r in self.requests()]
        assert all(status == 200 for _, _, status, _ in bad), [b for b in bad if b[2] != 200]


@dataclass
class ClientServer:
    """`resplog serve` (sglang fake) behind the logging proxy; clients use `base_url`."""

    server: Server
    proxy: FakeProcess
    traffic: Traffic
    model: str

    @property
    def base_url(self) -> str:
        return f"{self.proxy.url}/v1"

    def cli(self, *args: str) -> Any:
        """`resplog ARGS --json` on this server's database, as an operator runs it: the
        document, or the first line of JSON Lines."""
        result = subprocess.run(
            [RESPLOG, *args, "--json", "--database-url", self.server.database_url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, (result.stdout, result.stderr)
        try:
            return json.loads(result.stdout)
        except ValueError:
            return json.loads(result.stdout.splitlines()[0])

    def facts(self, rid: str) -> dict[str, Any]:
        """The request facts of a response's first event (the audit view)."""
        return dict(self.cli("events", rid)["facts"])

    def verify(self) -> dict[str, Any]:
        """`resplog verify --all` of the log, as an operator runs it."""
        report: dict[str, Any] = self.cli("verify", "--all")
        return report


class ClientServers:
    """`resplog serve` processes on the fake sglang, one per served model name, started when
    first asked for; each on a fresh PostgreSQL database behind a proxy of its own."""

    def __init__(self, sglang: FakeProcess, fresh_pg: Callable[[], str], tmp: Path) -> None:
        self.sglang, self.fresh_pg, self.tmp = sglang, fresh_pg, tmp
        self.running: dict[str, ClientServer] = {}

    def get(self, model: str = SERVED) -> ClientServer:
        if model not in self.running:
            tmp = self.tmp / model
            tmp.mkdir()
            engine = ("--engine", "sglang", "--engine-url", self.sglang.url, "--model", model)
            server = start_server(
                self.fresh_pg(), "postgres", tmp / "server.log", *KEY, *LOOPBACK_MCP, engine=engine
            )
            log = tmp / "requests.jsonl"
            strip = ("--strip",) if os.environ.get("RESPLOG_PROXY_STRIP") else ()
            try:
                proxy = FakeProcess("tests.clients.proxy", server.base_url, str(log), *strip)
            except BaseException:
                stop_server(server)
                raise
            self.running[model] = ClientServer(server, proxy, Traffic(log, proxy.url), model)
        return self.running[model]

    def stop(self) -> None:
        for srv in self.running.values():
            srv.proxy.stop()
            stop_server(srv.server)


@pytest.fixture(scope="session")
def client_servers(
    fake_sglang_server: FakeProcess,
    fresh_pg: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ClientServers]:
    servers = ClientServers(fake_sglang_server, fresh_pg, tmp_path_factory.mktemp("clients"))
    yield servers
    servers.stop()


@pytest.fixture
def serve_for_clients(
    client_servers: ClientServers, fake_sglang: FakeProcess, request: pytest.FixtureRequest
) -> Iterator[Callable[[str], ClientServer]]:
    """`serve(model)`: the server of that model name, its traffic counted from this test on;
    with RESPLOG_CAPTURE=1 the test's requests are written to tests/fixtures/clients/ after."""
    used: list[ClientServer] = []

    def serve(model: str = SERVED) -> ClientServer:
        srv = client_servers.get(model)
        srv.traffic.mark()
        used.append(srv)
        return srv

    yield serve
    if os.environ.get("RESPLOG_CAPTURE"):
        FIXTURES.mkdir(parents=True, exist_ok=True)
        captured = [_small(r) for srv in used for r in srv.traffic.requests()]
        module = request.node.module.__name__.rsplit(".test_", 1)[-1]
        name = request.node.name.removeprefix("test_").replace("[", "-").rstrip("]")
        out = FIXTURES / f"{module}.{name}.json"
        out.write_text(json.dumps(captured, indent=1, ensure_ascii=False) + "\n")


@pytest.fixture
def resplog_for_clients(serve_for_clients: Callable[[str], ClientServer]) -> ClientServer:
    """The server of the fake's own model name (gpt-oss-120b)."""
    return serve_for_clients(SERVED)


def _small(value: Any) -> Any:
    """A captured request with its long texts (Codex's instructions, tool descriptions) cut,
    and without the headers that name this run's port: the shapes, small enough to read."""
    if isinstance(value, str) and len(value) > CUT:
        return f"{value[: CUT // 2]}…[{len(value) - CUT // 2} more characters]"
    if isinstance(value, list):
        return [_small(v) for v in value]
    if isinstance(value, dict) and "headers" in value:  # a request: its headers whole
        headers = {k: v for k, v in value["headers"].items() if k not in PORT_HEADERS}
        return {k: _small(v) for k, v in value.items()} | {"headers": headers}
    if isinstance(value, dict):  # sealed reasoning whole: cut, it would not open
        return {k: v if k == "encrypted_content" else _small(v) for k, v in value.items()}
    return value
