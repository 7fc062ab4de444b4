"""Real `resplog serve` processes, one on PostgreSQL and one on SQLite, for the SDK tests.

Each test session gets a fresh PostgreSQL database (other runs share the server) and a
fresh SQLite file; the servers are started through the CLI exactly as an operator would.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import asyncpg
import httpx
import openai
import pytest

PG_BASE = os.environ.get("RESPLOG_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
RESPLOG = str(Path(sys.executable).with_name("resplog"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def _pg_admin(sql: str) -> None:
    conn = await asyncpg.connect(_pg_dsn(PG_BASE))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@dataclass
class Server:
    """A running server, its database, and the log file of its output."""

    base_url: str
    database_url: str
    kind: str
    log_path: Path
    process: subprocess.Popen[bytes]
    log_file: BinaryIO

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def count_rows(self, table: str = "events") -> int:
        return asyncio.run(self._count(table))

    async def _count(self, table: str) -> int:
        if self.kind == "sqlite":
            path = self.database_url.split("///", 1)[1]
            with sqlite3.connect(path) as db:
                return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        conn = await asyncpg.connect(_pg_dsn(self.database_url))
        try:
            return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))
        finally:
            await conn.close()


# The tests' MCP servers listen on the loopback, which `serve` does not reach for a
# request by default (`--mcp-hosts public`: adapters/tools/hosts.py).
LOOPBACK_MCP = ("--mcp-hosts", "127.0.0.0/8")


def start_server(
    database_url: str,
    kind: str,
    log_path: Path,
    *extra: str,
    engine: tuple[str, ...] = ("--engine", "scripted", "--scripted-delay-ms", "0"),
    env: dict[str, str] | None = None,
    resplog: str = RESPLOG,
    port: int | None = None,
    migrate: bool = True,
) -> Server:
    """`env`: the server's whole environment (the benches run another tree's code with it);
    `resplog`: the command (a bench runs another virtual environment's); `port`: a given
    one (a restart's), else a free one; `migrate`: False for a URL that cannot migrate (a
    pooler's), whose database the caller migrated."""
    if migrate:
        subprocess.run(
            [resplog, "migrate", "--database-url", database_url],
            check=True,
            capture_output=True,
            env=env,
        )
    port = port or free_port()
    log = log_path.open("ab")
    process = subprocess.Popen(
        [
            resplog,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--database-url",
            database_url,
            *engine,
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.close()
            raise RuntimeError(f"server exited: {log_path.read_text()}")
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return Server(base, database_url, kind, log_path, process, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    log.close()
    raise RuntimeError(f"server did not become healthy: {log_path.read_text()}")


def stop_server(server: Server) -> None:
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    server.log_file.close()


@pytest.fixture(scope="session", params=["postgres", "sqlite"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(f"server-{request.param}")
    if request.param == "postgres":
        url = request.getfixturevalue("fresh_pg")()
    else:
        url = f"sqlite+aiosqlite:///{tmp / 'resplog.db'}"
    srv = start_server(url, request.param, tmp / "server.log")
    yield srv
    stop_server(srv)


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0
    ) as c:
        yield c


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        yield c
