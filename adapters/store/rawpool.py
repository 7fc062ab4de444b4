"""A small asyncpg pool beside SQLAlchemy's, for the statements a create runs most: the
group commit's one statement, a tail's page, the check that a stream ended.

Each of them is one statement run as its own transaction, with its parameters already in
the driver's types, so SQLAlchemy adds nothing to it but cost: a connection checkout with
its events and reset, a greenlet switch (whose frame stack is a fresh allocation each
time), a cursor adapter and a result object. Measured on this project's box, a one-row
statement cost about 300-450 µs of CPU through an `AUTOCOMMIT` SQLAlchemy connection and
130-175 µs through an asyncpg pool (docs/performance.md, "What a create costs").

Everything that is a transaction of several statements, and everything that is not hot,
stays on SQLAlchemy. Errors are asyncpg's and the sockets' own; the store's `guarded`
boundary translates them as it does SQLAlchemy's (adapters/store/transient.py).

The pool is made on first use (a CLI command that never appends opens no connection) and
never holds a connection it does not need (`min_size=0`; an idle one closes after a minute).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from sqlalchemy.engine import URL

from adapters.store.multihost import racing_connect
from adapters.store.settings import StoreSettings
from adapters.store.transient import lost_under_operation
from adapters.store.urls import asyncpg_dsn

# Enough for a burst of tails; a tail waits for a free connection rather than opening one
# more (each read holds it for one short statement). The group commit has a pool of its own
# (`PostgresEventStore`), so that its flush never queues behind a burst of reads.
MAX_SIZE = 10
IDLE_SECONDS = 60.0
CLOSE_SECONDS = 5.0


class RawPool:
    """asyncpg connections for single statements, made when first asked for."""

    def __init__(self, url: URL, settings: StoreSettings, max_size: int | None = None) -> None:
        """`max_size`: at most this many connections (default: the store's `pool_size`, else
        `MAX_SIZE`)."""
        self._dsn = asyncpg_dsn(url)
        self._options: dict[str, Any] = {}
        if settings.connect_timeout is not None:
            self._options["timeout"] = settings.connect_timeout
        if settings.statement_timeout is not None:
            self._options["command_timeout"] = settings.statement_timeout
        self._acquire_timeout = settings.connect_timeout
        # A URL of several hosts that wants the writable one connects as the engine does
        # (each attempt with the same timeouts).
        racing = racing_connect(url, dict(self._options))
        self._connect: Callable[..., Awaitable[Any]] | None = None
        if racing is not None:
            self._connect = _ignoring_arguments(racing)
        size = max_size or settings.pool_size or MAX_SIZE
        self._max_size = max(1, size)
        self._pool: asyncpg.Pool | None = None
        self._making = asyncio.Lock()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        pool = self._pool or await self._make()
        try:
            async with pool.acquire(timeout=self._acquire_timeout) as conn:
                try:
                    yield conn
                except Exception as exc:
                    if lost_under_operation(exc):
                        conn.terminate()  # never back into the pool
                    raise
        except Exception as exc:
            # The server ended the connection (a restart, a failover) and asyncpg found out
            # at the next statement or at the release, as a state error: a lost connection,
            # as SQLAlchemy's handling (`PostgresEventStore`) calls it too.
            if lost_under_operation(exc):
                raise LostConnection(f"the connection was lost ({exc})") from exc
            raise

    async def _make(self) -> asyncpg.Pool:
        async with self._making:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=0,
                    max_size=self._max_size,
                    max_inactive_connection_lifetime=IDLE_SECONDS,
                    connect=self._connect,
                    reset=_nothing_to_reset,
                    **self._options,
                )
            return self._pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:  # each statement is short; one that hangs is not waited for past this
            await asyncio.wait_for(pool.close(), CLOSE_SECONDS)
        except TimeoutError:
            pool.terminate()


async def _nothing_to_reset(_conn: asyncpg.Connection) -> None:
    """A connection goes back to the pool as it is. asyncpg's own reset is a round trip per
    release (advisory unlocks, `CLOSE ALL`, `UNLISTEN *`, `RESET ALL`) undoing what these
    single statements never do: none takes a lock past itself, opens a cursor, listens or
    sets anything."""


def _ignoring_arguments(connect: Callable[[], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    # The pool passes its own keywords (loop, connection and record class) to `connect`; the
    # racing connect has its options already and makes plain asyncpg connections.
    async def run(*_args: Any, **_kwargs: Any) -> Any:
        return await connect()

    return run


class LostConnection(asyncpg.ConnectionDoesNotExistError):  # type: ignore[misc]
    """A pooled connection found dead at its next statement (SQLSTATE 08003: a retry, on a
    fresh connection, may succeed)."""
