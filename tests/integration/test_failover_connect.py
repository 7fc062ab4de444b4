"""A URL of several hosts after a failover whose old primary neither answers nor refuses
(its machine frozen: SIGSTOP, as a power cut or a partition looks from outside): the store,
its LISTEN connection and the migrations still reach the promoted standby, because every
host is asked at once (adapters/store/multihost.py). asyncpg's own way asks the hosts in
turn within one timeout, and never gets past the frozen one."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from adapters.store.factory import open_store
from adapters.store.migrate import current_is_head, upgrade
from adapters.store.urls import async_url, asyncpg_dsn
from tests.e2e.cluster import replicated_postgres


async def _reach(url: str, standby_port: int) -> None:
    store = await open_store(url, connect_timeout=2, statement_timeout=2)
    try:
        async with store.engine.connect() as conn:
            port, recovering = (
                await conn.exec_driver_sql("SELECT inet_server_port(), pg_is_in_recovery()")
            ).one()
        assert (port, recovering) == (standby_port, False)
        assert await store.read_events("resp_none") == []
        for pool in (store.raw, store.raw_commit):  # the hot statements' pools (rawpool.py)
            async with pool.connection() as raw:
                assert await raw.fetchval("SELECT inet_server_port()") == standby_port
        assert store.listener.connected.is_set()
        backend = store.listener.backend_pid
        async with store.engine.connect() as conn:
            listening = await conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", (backend,)
            )
            assert listening.scalar_one() == 1  # the LISTEN connection is on the new primary
    finally:
        await store.close()


def test_a_frozen_old_primary_does_not_keep_the_store_from_the_promoted_standby() -> None:
    with replicated_postgres() as (primary, standby):
        url = f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/postgres"
        upgrade(url)
        primary.freeze()
        standby.promote()

        ordered = asyncpg.connect(asyncpg_dsn(async_url(url)), timeout=2)
        with pytest.raises(TimeoutError):
            asyncio.run(ordered)

        asyncio.run(_reach(url, standby.port))
        assert current_is_head(url)


async def test_the_hot_statements_have_the_statement_timeout_too(pg_url: str) -> None:
    """The asyncpg pool of the flush and the tails' reads is made with the store's limits:
    a statement that runs past `statement_timeout` ends as the store's transient error."""
    store = await open_store(pg_url, connect_timeout=2, statement_timeout=0.5)
    try:
        async with store.raw.connection() as raw:
            with pytest.raises(TimeoutError):
                await raw.fetchval("SELECT pg_sleep(5)")
        async with store.raw.connection() as raw:  # and the pool goes on
            assert await raw.fetchval("SELECT 1") == 1
    finally:
        await store.close()
