"""Open the store a database URL names (PostgreSQL or the embedded SQLite file), and the
audit's ports over it (`audit_ports`: for the app's bundle and the admin commands alike)."""

from __future__ import annotations

import logging
from typing import Any

from adapters.store.archive import SqlArchive
from adapters.store.conversations import SqlConversations
from adapters.store.gc import SqlGc
from adapters.store.keys import SqlApiKeyStore
from adapters.store.ledger import SqlLedger
from adapters.store.multihost import racing_connect
from adapters.store.pooler import POLL_WITHOUT_DOORBELL, keeps_session, probe_connect
from adapters.store.postgres import PostgresEventStore
from adapters.store.prompts import SqlPrompts
from adapters.store.scan import LogScan
from adapters.store.settings import StoreSettings
from adapters.store.sql import SqlEventStore
from adapters.store.sqlite import SqliteEventStore
from adapters.store.transient import boundary
from adapters.store.urls import async_url, asyncpg_dsn, is_postgres
from adapters.store.webhooks import SqlWebhooks
from adapters.store.writer import GroupCommitWriter
from service.bundle import Audit
from service.ports import EventStore, EventWriter, ResponseIndex

log = logging.getLogger(__name__)


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
    On PostgreSQL, unless `pooled` is given, the URL is first asked whether it keeps a
    session (pooler.py): the store then connects as a transaction pooler needs, and its
    doorbells listen where a session is (the session URL) or nowhere (the tails poll).
    """
    if is_postgres(async_url(url)) and "pooled" not in settings:
        settings = await _routed(url, settings)
    store = make_store(url, **settings)
    try:
        if store.settings.check_migrated:
            await store.check_migrated()
        await store.start()
    except BaseException:
        await store.close()
        raise
    return store


async def _session_kept(url: str, connect_timeout: float | None) -> bool:
    parsed = async_url(url)
    options = {"statement_cache_size": 0, "timeout": connect_timeout or 10.0}
    connect = racing_connect(parsed, options) or probe_connect(asyncpg_dsn(parsed), connect_timeout)
    with boundary():
        return await keeps_session(connect)


def _shown(url: str) -> str:
    return async_url(url).render_as_string(hide_password=True)


async def _routed(url: str, settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` with `pooled` found out, and the doorbells' session checked: a session
    URL that keeps no session (a pooler's too), or none where the main URL is a pooler's,
    is said at start, once, and the tails then poll instead of listening."""
    config = StoreSettings(**settings)
    pooled = not await _session_kept(url, config.connect_timeout)
    routed = {**settings, "pooled": pooled}
    if not config.listen:
        return routed
    polling = {"listen": False, "poll_interval": min(config.poll_interval, POLL_WITHOUT_DOORBELL)}
    if config.session_url is not None:
        if not await _session_kept(config.session_url, config.connect_timeout):
            log.error(
                "the session database URL %s keeps no session between statements (a pooler "
                "in transaction or statement mode, such as PgBouncer's): LISTEN cannot work "
                "through it; give --session-database-url straight to PostgreSQL. Live tails "
                "of other processes' streams poll every %.2fs meanwhile",
                _shown(config.session_url),
                polling["poll_interval"],
            )
            return {**routed, **polling}
        return routed
    if pooled:
        log.warning(
            "the database URL %s is a pooler's that keeps no session between statements "
            "(PgBouncer in transaction mode): prepared statements are not cached, and with no "
            "--session-database-url to listen on, live tails of other processes' streams "
            "poll every %.2fs",
            _shown(url),
            polling["poll_interval"],
        )
        return {**routed, **polling}
    return routed


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
        ledger=SqlLedger(store),
        webhooks=SqlWebhooks(store),
        prompts=SqlPrompts(store),
    )


def _implements_the_ports(
    store: SqlEventStore, writer: GroupCommitWriter
) -> tuple[EventStore, ResponseIndex, EventWriter, EventWriter]:
    """Never called: mypy checks here that the adapters satisfy the service ports."""
    return store, store, store, writer
