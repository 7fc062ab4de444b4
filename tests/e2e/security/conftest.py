"""Servers for the security tests: `--auth keys` on PostgreSQL and SQLite, keys made in the
database as `resplog keys create` makes them, and a snapshot of what the log holds."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from unittest import mock

import asyncpg
import httpx
import openai
import pytest

from adapters.store.factory import open_store
from adapters.store.keys import SqlApiKeyStore
from service.access import keys
from tests.e2e.conftest import Server, start_server, stop_server

KEYED = ("--auth", "keys", "--key-cache-s", "0")


def launch(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    kind: str,
    *extra: str,
    env: dict[str, str] | None = None,
) -> Server:
    """A `resplog serve` on a fresh database of `kind` (postgres or sqlite)."""
    tmp = tmp_path_factory.mktemp(f"security-{kind}")
    if kind == "postgres":
        url = request.getfixturevalue("fresh_pg")()
    else:
        url = f"sqlite+aiosqlite:///{tmp / 'resplog.db'}"
    with mock.patch.dict(os.environ, env or {}):
        return start_server(url, kind, tmp / "server.log", *extra)


def make_key(server: Server, owner: str) -> str:
    """A new API key of `owner` (its secret), written straight to the server's database."""

    async def create() -> str:
        store = await open_store(server.database_url, listen=False)
        try:
            made = await keys.create_key(SqlApiKeyStore(store), owner, None, now=time.time())
            return made.secret
        finally:
            await store.close()

    return asyncio.run(create())


def query(server: Server, sql: str) -> int:
    """One integer from the server's database (`$1`-free SQL valid on both)."""
    if server.kind == "sqlite":
        with sqlite3.connect(server.database_url.split("///", 1)[1]) as db:
            return int(db.execute(sql).fetchone()[0])

    async def pg() -> int:
        conn = await asyncpg.connect(server.database_url.replace("+asyncpg", ""))
        try:
            return int(await conn.fetchval(sql))
        finally:
            await conn.close()

    return asyncio.run(pg())


def log_state(server: Server, *, running: str = "") -> tuple[int, ...]:
    """What a request could have written: responses, events (but those of the `running`
    stream, which its own generation keeps appending), cancel flags and deletions."""
    return (
        query(server, "SELECT count(*) FROM responses"),
        query(server, f"SELECT count(*) FROM events WHERE stream_id <> '{running}'"),
        query(server, "SELECT count(*) FROM responses WHERE cancel_requested_at IS NOT NULL"),
        query(server, "SELECT count(*) FROM responses WHERE deleted_at IS NOT NULL"),
        query(server, "SELECT count(*) FROM api_keys"),
    )


def sdk(server: Server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0)


def http(server: Server, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=server.base_url, headers=headers, timeout=30)


@pytest.fixture(scope="session", params=["postgres", "sqlite"])
def keyed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server that requires API keys and caches no key lookup."""
    srv = launch(request, tmp_path_factory, request.param, *KEYED)
    yield srv
    stop_server(srv)


@pytest.fixture
def key_of(keyed: Server) -> Callable[[str], str]:
    return lambda owner: make_key(keyed, owner)
