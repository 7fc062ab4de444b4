"""Service-level tests run on the real SQLite store, a fresh file per test: `processes`
starts the bundles of one or more processes over it, each through the real composition
(its own connection pool, group-commit writer and lease identity, as `serve` builds it)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator

import pytest

from adapters.engines.scripted import ScriptedEngine
from adapters.store.factory import open_store
from adapters.store.keys import SqlApiKeyStore
from adapters.store.sql import SqlEventStore
from adapters.wiring import open_bundle, open_database
from service.bundle import Bundle
from service.ports import Engine
from service.settings import Settings

# Tails and leases reach across processes on SQLite by polling the table: poll often here.
POLL_S = 0.02


class Processes:
    """The processes of one test over one SQLite file, closed when the test ends; and the
    few peeks at the table that no port offers (leases, flags set behind a process's back)."""

    def __init__(self, url: str, stack: contextlib.AsyncExitStack) -> None:
        self.url = url
        self.path = url.split("///", 1)[1]  # the SQLite file
        self._stack = stack

    async def start(
        self,
        engine: object | None = None,
        *,
        owner: str = "proc-a",
        slots: int = 8,
        cancel_wait_s: float = 2.0,
        lease_ttl_s: float = 15.0,
        flush_interval_ms: float = 5.0,
    ) -> Bundle:
        """One process's bundle; `owner` is its identity on the leases it takes."""
        settings = Settings(
            database_url=self.url,
            workers=slots,
            cancel_wait_s=cancel_wait_s,
            lease_ttl_s=lease_ttl_s,
            flush_interval_ms=flush_interval_ms,
        )
        database = await open_database(settings, identity=owner, poll_interval=POLL_S)
        eng: Engine = engine or ScriptedEngine()  # type: ignore[assignment]
        return await self._stack.enter_async_context(
            open_bundle(settings, database=database, engine=eng)
        )

    async def _sql(self, query: str, *args: object) -> list[tuple[object, ...]]:
        """Run one statement on another connection, in a thread: a blocking call on the
        event loop would stall the store's own transactions, which may hold the lock it
        waits for."""

        def run() -> list[tuple[object, ...]]:
            db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            try:
                return db.execute(query, args).fetchall()
            finally:
                db.close()

        return await asyncio.to_thread(run)

    async def lease(self, rid: str) -> tuple[str | None, float | None]:
        """(owner, expires at) of the response's lease."""
        [(owner, expires)] = await self._sql(
            "SELECT lease_owner, lease_expires_at FROM responses WHERE id = ?", rid
        )
        assert owner is None or isinstance(owner, str)
        assert expires is None or isinstance(expires, float)
        return owner, expires

    async def set_lease(self, rid: str, owner: str, expires_at: float) -> None:
        """Move a lease as another process (or time) would, without telling anyone."""
        await self._sql(
            "UPDATE responses SET lease_owner = ?, lease_expires_at = ? WHERE id = ?",
            owner,
            expires_at,
            rid,
        )

    async def flag_cancel(self, rid: str, reason: str = "cancelled_by_user") -> None:
        """A cancel request whose doorbell never arrived: the flag (and its reason) alone."""
        await self._sql(
            "UPDATE responses SET cancel_requested_at = 1.0, cancel_reason = ? WHERE id = ?",
            reason,
            rid,
        )

    async def statuses(self) -> list[str]:
        return sorted(str(r[0]) for r in await self._sql("SELECT status FROM responses"))

    @contextlib.asynccontextmanager
    async def write_locked(self) -> AsyncIterator[None]:
        """Hold SQLite's write lock from another connection: every commit waits for it."""
        db = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
        try:
            await asyncio.to_thread(db.execute, "BEGIN IMMEDIATE")
            yield
            await asyncio.to_thread(db.execute, "COMMIT")
        finally:
            db.close()


@pytest.fixture
async def processes(fresh_sqlite: str) -> AsyncIterator[Processes]:
    async with contextlib.AsyncExitStack() as stack:
        yield Processes(fresh_sqlite, stack)


@pytest.fixture
async def key_store(fresh_sqlite: str) -> AsyncIterator[SqlApiKeyStore]:
    """The real API keys table, on a fresh SQLite file."""
    store: SqlEventStore = await open_store(fresh_sqlite)
    try:
        yield SqlApiKeyStore(store)
    finally:
        await store.close()
