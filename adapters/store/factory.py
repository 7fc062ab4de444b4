"""Open the store a database URL names (PostgreSQL or the embedded SQLite file), and the
audit's ports over it (`audit_ports`: for the app's bundle and the admin commands alike)."""

from __future__ import annotations

from typing import Any

from adapters.store.archive import SqlArchive
from adapters.store.conversations import SqlConversations
from adapters.store.gc import SqlGc
from adapters.store.keys import SqlApiKeyStore
from adapters.store.postgres import PostgresEventStore
from adapters.store.prompts import SqlPrompts
from adapters.store.scan import LogScan
from adapters.store.settings import StoreSettings
from adapters.store.sql import SqlEventStore
from adapters.store.sqlite import SqliteEventStore
from adapters.store.transient import boundary
from adapters.store.urls import async_url, is_postgres
from adapters.store.writer import GroupCommitWriter
from service.bundle import Audit
from service.ports import EventStore, EventWriter, ResponseIndex


def make_store(url: str, **settings: Any) -> SqlEventStore:
    """The store for `url`, not yet connected (no migration check, no listener)."""
    parsed = async_url(url)
    config = StoreSettings(**settings)
    with boundary():  # e.g. a SQLite directory that cannot be created
        if is_postgres(parsed):
            return PostgresEventStore(parsed, config)
        return SqliteEventStore(parsed, config)


async def open_store(url: str, **settings: Any) -> SqlEventStore:
    """Connect to `url`, check it is migrated to head, and start the doorbell listener.

    Accepts `postgresql+asyncpg://...`, `postgresql://...`, `sqlite+aiosqlite:///path` and
    `sqlite:///path`; `settings` are the fields of `StoreSettings`. Close with `close()`.
    """
    store = make_store(url, **settings)
    try:
        if store.settings.check_migrated:
            await store.check_migrated()
        await store.start()
    except BaseException:
        await store.close()
        raise
    return store


def audit_ports(store: SqlEventStore) -> Audit:
    """The audit's ports over `store`: its scans, archive, conversations, gc, keys and
    prompt templates."""
    scan, gc = LogScan(store), SqlGc(store)
    return Audit(
        store=store,
        log=scan,
        scan=scan,
        archive=SqlArchive(store),
        conversations=SqlConversations(store),
        collector=gc,
        leftovers=gc,
        keys=SqlApiKeyStore(store),
        prompts=SqlPrompts(store),
    )


def _implements_the_ports(
    store: SqlEventStore, writer: GroupCommitWriter
) -> tuple[EventStore, ResponseIndex, EventWriter, EventWriter]:
    """Never called: mypy checks here that the adapters satisfy the service ports."""
    return store, store, store, writer
