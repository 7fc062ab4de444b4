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

The group commit runs one statement at a time (one flusher per writer), so it has no pool
but one connection kept between its statements (`HeldConnection`): a pool's checkout and
return are a task each (`wait_for` on the acquire's timeout, `shield` on the release), about
60 µs of CPU a statement on this project's box, three statements a streaming create.
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
# more (each read holds it for one short statement). The group commit has a connection of its
# own (`HeldConnection`), so that its flush never queues behind a burst of reads.
MAX_SIZE = 10
IDLE_SECONDS = 60.0
CLOSE_SECONDS = 5.0


def _limits(settings: StoreSettings) -> dict[str, Any]:
    """asyncpg's connect options for the store's connect and statement timeouts."""
    options: dict[str, Any] = {}
    if settings.connect_timeout is not None:
        options["timeout"] = settings.connect_timeout
    if settings.statement_timeout is not None:
        options["command_timeout"] = settings.statement_timeout
    if settings.pooled:  # no named statement survives a transaction pooler (pooler.py)
        options["statement_cache_size"] = 0
    return options


class RawPool:
    """asyncpg connections for single statements, made when first asked for."""

    def __init__(self, url: URL, settings: StoreSettings) -> None:
        """At most the store's `pool_size` connections, else `MAX_SIZE`."""
        self._dsn = asyncpg_dsn(url)
        self._options = _limits(settings)
        self._acquire_timeout = settings.connect_timeout
        # A URL of several hosts that wants the writable one connects as the engine does
        # (each attempt with the same timeouts).
        racing = racing_connect(url, dict(self._options))
        self._connect: Callable[..., Awaitable[Any]] | None = None
        if racing is not None:
            self._connect = _ignoring_arguments(racing)
        self._max_size = max(1, settings.pool_size or MAX_SIZE)
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


class HeldConnection:
    """One asyncpg connection kept between statements, for callers that run one statement
    at a time and are few (the group commit's flusher; a direct `append` waits its turn).

    Made on first use; closed after `IDLE_SECONDS` unused; dropped, for a new one at the
    next statement, when it is lost (as the pool terminates such a connection) or when a
    statement on it times out or is cancelled midway (its state is then unknown). An error
    the server answered (a conflict, a constraint) leaves it as it was, and kept."""

    def __init__(self, url: URL, settings: StoreSettings) -> None:
        dsn = asyncpg_dsn(url)
        options = _limits(settings)
        racing = racing_connect(url, dict(options))  # as `RawPool` connects

        async def plain() -> Any:
            return await asyncpg.connect(dsn, **options)

        self._open: Callable[[], Awaitable[Any]] = racing or plain
        self._conn: asyncpg.Connection | None = None
        self._turn = asyncio.Lock()
        self._last_used = 0.0
        self._idle: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        async with self._turn:
            conn = self._conn
            if conn is None or conn.is_closed():
                conn = self._conn = await self._open()
            try:
                yield conn
            except Exception as exc:
                if lost_under_operation(exc):
                    self._drop(conn)
                    raise LostConnection(f"the connection was lost ({exc})") from exc
                if isinstance(exc, TimeoutError) or conn.is_closed():
                    self._drop(conn)  # a statement cut short by its timeout: start afresh
                raise
            except BaseException:  # cancelled midway: what the server still sends is unknown
                self._drop(conn)
                raise
            finally:
                self._used()

    def _drop(self, conn: asyncpg.Connection) -> None:
        conn.terminate()
        if self._conn is conn:
            self._conn = None

    def _used(self) -> None:
        loop = asyncio.get_running_loop()
        self._last_used = loop.time()
        if self._idle is None and self._conn is not None:
            self._idle = loop.call_later(IDLE_SECONDS, self._maybe_close)

    def _maybe_close(self) -> None:
        """The idle timer: close the connection if nothing used it for `IDLE_SECONDS`, else
        look again when that much will have passed since its last use (one timer, not one
        per statement)."""
        self._idle = None
        conn = self._conn
        if conn is None:
            return
        loop = asyncio.get_running_loop()
        left = self._last_used + IDLE_SECONDS - loop.time()
        if self._turn.locked() or left > 0:
            self._idle = loop.call_later(max(left, 1.0), self._maybe_close)
            return
        self._conn = None
        task = loop.create_task(_close(conn))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        conn, self._conn = self._conn, None
        if conn is not None:
            await _close(conn)
        for task in list(self._closing):
            await task


async def _close(conn: asyncpg.Connection) -> None:
    """Close politely (the server logs no lost client), but not for longer than
    `CLOSE_SECONDS`; a connection already lost is just let go."""
    try:
        await conn.close(timeout=CLOSE_SECONDS)
    except Exception:  # lost, or the close timed out: nothing more to say to the server
        conn.terminate()


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
