"""The group commit's one connection (adapters/store/rawpool.py `HeldConnection`), on a real
PostgreSQL: kept between statements, let go when lost, cut short or idle, and a new one made
at the next statement each time."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from adapters.store import rawpool
from adapters.store.factory import open_store
from adapters.store.postgres import PostgresEventStore
from adapters.store.urls import async_url, asyncpg_dsn


async def _backend(store: PostgresEventStore) -> int:
    async with store.raw_commit.connection() as conn:
        pid: int = await conn.fetchval("SELECT pg_backend_pid()")
    return pid


async def _alive(store: PostgresEventStore, pid: int) -> bool:
    async with store.raw.connection() as conn:
        found = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)
    return bool(found)


async def _open(pg_url: str, **limits: float) -> PostgresEventStore:
    store = await open_store(pg_url, **limits)
    assert isinstance(store, PostgresEventStore)
    return store


async def test_one_connection_serves_statement_after_statement(pg_url: str) -> None:
    store = await _open(pg_url)
    try:
        first = await _backend(store)
        assert [await _backend(store) for _ in range(5)] == [first] * 5
    finally:
        await store.close()
    assert await _gone(pg_url, first)  # closed with the store


async def test_a_connection_the_server_ended_is_replaced(pg_url: str) -> None:
    """Ended while idle (a restart, an administrator). A statement sent before asyncpg has
    read the goodbye fails as a lost connection (`transient.lost_under_operation`, covered
    in tests/unit/test_store_errors.py and tests/e2e/test_outage.py); once it has, the next
    statement just gets a new connection."""
    store = await _open(pg_url)
    try:
        first = await _backend(store)
        held = store.raw_commit._conn
        assert held is not None
        async with store.raw.connection() as conn:
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", first)
        for _ in range(100):
            if held.is_closed():
                break
            await asyncio.sleep(0.02)
        second = await _backend(store)
        assert second != first
        assert await _backend(store) == second
    finally:
        await store.close()


async def test_a_statement_cut_short_leaves_a_fresh_connection(pg_url: str) -> None:
    """Past its timeout, or cancelled midway: what the server still sends on that connection
    is unknown, so it is let go and the next statement opens another."""
    store = await _open(pg_url, statement_timeout=0.3)
    try:
        first = await _backend(store)
        with pytest.raises(TimeoutError):
            async with store.raw_commit.connection() as conn:
                await conn.fetchval("SELECT pg_sleep(5)")
        assert store.raw_commit._conn is None
        second = await _backend(store)
        assert second != first

        task = asyncio.create_task(_sleep_on_it(store))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.raw_commit._conn is None
        assert await _backend(store) not in (first, second)
        assert await _gone(pg_url, second)  # its statement over, the server sees it closed
    finally:
        await store.close()


async def _sleep_on_it(store: PostgresEventStore) -> None:
    async with store.raw_commit.connection() as conn:
        await conn.fetchval("SELECT pg_sleep(0.25)")


async def test_statements_take_turns(pg_url: str) -> None:
    """Two callers at once (a second writer, a direct `append`): one connection, in turn."""
    store = await _open(pg_url)
    try:
        pids = await asyncio.gather(*(_backend(store) for _ in range(4)))
        assert len(set(pids)) == 1
    finally:
        await store.close()


async def test_an_idle_connection_is_closed(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rawpool, "IDLE_SECONDS", 0.3)
    store = await _open(pg_url)
    try:
        first = await _backend(store)
        await asyncio.sleep(0.15)
        assert await _backend(store) == first  # used again: the clock starts over
        await asyncio.sleep(0.2)
        assert await _alive(store, first)  # 0.2 s since its last use
        await asyncio.sleep(1.3)  # the timer looks again at least a second later
        assert not await _alive(store, first)
        assert await _backend(store) != first  # and the next statement opens a new one
    finally:
        await store.close()


async def _gone(pg_url: str, pid: int) -> bool:
    """Whether backend `pid` ends within a few seconds, asked on a connection of its own."""
    conn = await asyncpg.connect(asyncpg_dsn(async_url(pg_url)))
    try:
        for _ in range(50):
            if not await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
                return True
            await asyncio.sleep(0.05)
        return False
    finally:
        await conn.close()
