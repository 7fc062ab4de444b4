"""Fixtures the integration tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.store.factory import open_store
from adapters.store.postgres import PostgresEventStore


@pytest.fixture
async def pg_pair(pg_url: str) -> AsyncIterator[tuple[PostgresEventStore, PostgresEventStore]]:
    """A writer process and a tailer process (each its own store: own pool, hub and LISTEN
    connection) whose poll is too slow to matter: only the doorbell, and the shared
    catch-up reads it starts, can bring the tailer its events within a test's time."""
    writer = await open_store(pg_url, listen=False)
    tailer = await open_store(pg_url, poll_interval=600)
    assert isinstance(writer, PostgresEventStore)
    assert isinstance(tailer, PostgresEventStore)
    yield writer, tailer
    await writer.close()
    await tailer.close()
