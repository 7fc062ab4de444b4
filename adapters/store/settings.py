"""The tuning knobs of a store, as `open_store(url, **settings)` takes them."""

from __future__ import annotations

import msgspec


class StoreSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Tuning of a store; every field is a keyword of `open_store`."""

    poll_interval: float = 1.0  # a tail re-reads at least this often (lost doorbells)
    tail_buffer: int = 1024  # events a subscriber may have waiting before it must re-read
    read_page: int = 1000  # rows per catch-up read of a tail
    # ...and bytes (event JSON and facts) per catch-up read, past its first row: what a
    # tail holds while its reader is slow is a page, so a stalled reader of a response
    # whose events are megabytes pins about this much, not the whole log.
    read_page_bytes: int = 256 * 1024
    listen: bool = True  # PostgreSQL: run the LISTEN connection (cross-process doorbell)
    check_migrated: bool = True  # refuse to open a database that is not at the head revision
    # None: the dialect's own default. PostgreSQL keeps 20: every live tail reads the log
    # when it starts, so a burst of new streams wants many connections at once, and
    # connections beyond the pool are closed on return and reconnected at the next burst.
    # SQLite keeps 5: it has one writer anyway, and each connection keeps its own page cache.
    pool_size: int | None = None
    # Off: a probe per checkout doubles the round trips of every flush and read. A dropped
    # connection instead fails one statement, which invalidates the pool; the writer and
    # the tails retry such errors.
    pool_pre_ping: bool = False
    max_overflow: int | None = None
    pg_insert: str = "unnest"  # or "executemany": how a flush inserts its event rows
    sqlite_busy_timeout: float = 10.0  # seconds a writer waits for SQLite's write lock
    sqlite_synchronous: str = "FULL"  # SQLite's PRAGMA synchronous (NORMAL trades durability)
    echo: bool = False
    # PostgreSQL: seconds to open a connection (and to wait for a pooled one), and the most
    # any one statement may take before the client gives up on it (asyncpg's
    # `command_timeout`). None: no limit, for the admin commands whose scans take long;
    # `serve` and `worker` set both, so that a frozen or black-holed database (a stopped
    # server, a partition) is a quick 503 instead of a request that hangs with it.
    connect_timeout: float | None = None
    statement_timeout: float | None = None
    # The process identity that leases streams (`responses.lease_owner`). None: this store
    # takes no leases, and its appends move only streams that nobody leases.
    lease_owner: str | None = None
    lease_ttl: float = 15.0  # seconds a lease lasts unless renewed
    # PostgreSQL: the URL is a pooler's that hands out a server connection per transaction
    # (PgBouncer's transaction mode): no named prepared statements, no LISTEN on it
    # (pooler.py). `open_store` finds out by asking the URL unless told.
    pooled: bool = False
    # PostgreSQL: a URL straight to the database for what needs a session (the LISTEN
    # doorbells); None: the main URL, unless it is `pooled` (then the tails poll).
    session_url: str | None = None
    # PostgreSQL: a hot standby that reads of ended streams go to (replica.py); None: none.
    replica_url: str | None = None
