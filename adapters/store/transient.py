"""The store's error boundary: which database errors are worth retrying (a lost connection,
a lock or deadlock timeout, a serialization failure; never a constraint violation), and
the translation of every driver error into the project's own (`StoreUnavailable` for those,
`StoreError` for the rest) at the store's public methods.

Nothing above the store sees SQLAlchemy, asyncpg, sqlite3 or the sockets' OSError: the
HTTP layer answers 503 to `StoreUnavailable`, the CLI prints any `StoreError` in one line.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import asyncpg
import sqlalchemy.exc as sa_exc

from domain.errors import StoreError, StoreUnavailable

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

# What the drivers and the network raise. (asyncio's TimeoutError is an OSError.)
RAW: tuple[type[BaseException], ...] = (
    sa_exc.SQLAlchemyError,
    OSError,
    sqlite3.Error,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    # Its own state and protocol errors; and every host of a multi-host URL tried, none
    # read-write (a failover in progress), which is one of them.
    asyncpg.InternalClientError,
)

# What a statement the database refused raises: through SQLAlchemy, or straight from asyncpg
# (the hot statements of rawpool.py).
STATEMENT_ERRORS: tuple[type[BaseException], ...] = (sa_exc.DBAPIError, asyncpg.PostgresError)

# SQLite has no SQLSTATE: these of its messages mean "busy or unavailable", not "wrong".
_SQLITE_TRANSIENT = ("locked", "busy", "disk i/o error", "unable to open database file")

# SQLSTATE classes and codes that a retry can cure.
_TRANSIENT_CLASSES = ("08", "53", "57")  # connection exception, resources, operator intervention
_TRANSIENT_CODES = frozenset({"40001", "40P01", "55P03"})  # serialization, deadlock, lock

# What a Citus coordinator raises as an internal error (XX000, no SQLSTATE of its own) when
# a connection to a worker it already used in the transaction fails (the worker stopped or
# restarted): a retry opens a new one.
_CITUS_LOST_WORKER = "failure on connection marked as essential"


class Unreached(StoreUnavailable):
    """A stream of a flush on Citus whose shard's transaction failed on a transient error
    while the flush's other shards committed: the group-commit writer retries its batch
    alone (writer.py); anyone else answers it as the outage it is (HTTP 503)."""


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver error, raised by asyncpg or wrapped by SQLAlchemy."""
    orig = getattr(exc, "orig", None)
    for candidate in (exc, orig, getattr(orig, "__cause__", None)):
        code = getattr(candidate, "sqlstate", None)
        if isinstance(code, str):
            return code
    return None


def _driver_errors(exc: BaseException) -> tuple[BaseException | None, ...]:
    """`exc` and what it may wrap: SQLAlchemy's error, its adapter's exception (`orig`),
    and the driver's own exception that caused either."""
    orig = getattr(exc, "orig", None)
    return (exc, orig, getattr(orig, "__cause__", None), exc.__cause__)


def _no_writable_host(exc: BaseException) -> bool:
    """asyncpg found no host of a multi-host URL read-write (a failover under way), raised
    as it is or wrapped by SQLAlchemy (as an `InternalError`, which is no SQLSTATE)."""
    return any(
        isinstance(candidate, asyncpg.TargetServerAttributeNotMatched)
        for candidate in _driver_errors(exc)
    )


def lost_under_operation(exc: BaseException) -> bool:
    """asyncpg's state error ("cannot switch to state N; another operation is in progress"),
    raised as it is or wrapped by SQLAlchemy: the server ended the connection while an
    operation was under way or while it sat idle in a pool (a restart, a failover), and the
    connection is no use any more, though asyncpg may not call it closed. A retry on another
    connection cures it."""
    return any(
        isinstance(candidate, asyncpg.InternalClientError)
        and not isinstance(
            candidate, asyncpg.TargetServerAttributeNotMatched | asyncpg.ProtocolError
        )
        for candidate in _driver_errors(exc)
    )


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same transaction may succeed."""
    if isinstance(exc, StoreError):
        return isinstance(exc, StoreUnavailable)
    if _no_writable_host(exc) or lost_under_operation(exc):
        return True
    if isinstance(exc, sa_exc.IntegrityError | sqlite3.IntegrityError):
        return False
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    code = sqlstate(exc)
    if code == "XX000" and _CITUS_LOST_WORKER in str(exc):
        return True
    if code is not None:
        return code in _TRANSIENT_CODES or code.startswith(_TRANSIENT_CLASSES)
    orig = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    if isinstance(orig, sqlite3.Error):
        # "database is locked" is worth a retry; "no such table" never is.
        return any(word in str(orig).lower() for word in _SQLITE_TRANSIENT)
    if isinstance(exc, sa_exc.DBAPIError):
        # A dropped asyncpg connection lands here.
        return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
    return isinstance(exc, OSError | sa_exc.TimeoutError | asyncpg.InterfaceError)


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def store_error(exc: BaseException) -> BaseException:
    """The project's error for a driver's `exc` (its cause); anything else unchanged."""
    if not isinstance(exc, RAW):
        return exc
    error: StoreError
    if is_transient(exc):
        error = StoreUnavailable(f"cannot use the database now (retry shortly): {_one_line(exc)}")
    else:
        error = StoreError(f"cannot use the database: {_one_line(exc)}")
    error.__cause__ = exc
    return error


@contextmanager
def boundary() -> Iterator[None]:
    """Translate what escapes the block (for the few synchronous entry points)."""
    try:
        yield
    except RAW as exc:
        raise store_error(exc) from exc


def guarded(method: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """A public coroutine of the store: driver errors leave it translated."""

    @functools.wraps(method)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except RAW as exc:
            raise store_error(exc) from exc

    return run


def guarded_iter(
    method: Callable[P, AsyncGenerator[T, None]],
) -> Callable[P, AsyncGenerator[T, None]]:
    """The same for a public async generator (closing it closes the one it wraps)."""

    @functools.wraps(method)
    async def run(*args: P.args, **kwargs: P.kwargs) -> AsyncGenerator[T, None]:
        inner = method(*args, **kwargs)
        try:
            async for item in inner:
                yield item
        except RAW as exc:
            raise store_error(exc) from exc
        finally:
            await inner.aclose()

    return run
