"""The store's error boundary: every driver error leaves the store as the project's own,
`StoreUnavailable` when a retry may cure it, `StoreError` otherwise, the driver's as cause."""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest
import sqlalchemy.exc as sa_exc

from adapters.store.rawpool import LostConnection
from adapters.store.transient import guarded, guarded_iter, store_error
from domain.errors import Conflict, StoreError, StoreUnavailable


class _PgError(Exception):
    def __init__(self, sqlstate: str, message: str = "") -> None:
        super().__init__(message or f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


# A Citus coordinator whose connection to a worker, used earlier in the transaction, failed.
_ESSENTIAL = "failure on connection marked as essential: 127.0.0.1:5433"


def _wrapped(exc: Exception) -> sa_exc.DBAPIError:
    """As SQLAlchemy's asyncpg adapter raises a driver error with no SQLSTATE: an
    `InternalError` whose `orig` is the adapter's exception, caused by the driver's."""
    adapted = Exception(str(exc))
    adapted.__cause__ = exc
    return sa_exc.InternalError("connect", {}, adapted)


@pytest.mark.parametrize(
    "raw",
    [
        sa_exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("refused")),
        sa_exc.InterfaceError("SELECT 1", {}, ConnectionResetError("reset")),
        sa_exc.TimeoutError("QueuePool limit reached"),
        sa_exc.DBAPIError("SELECT 1", {}, _PgError("40P01")),  # deadlock
        sa_exc.OperationalError("BEGIN", {}, sqlite3.OperationalError("database is locked")),
        ConnectionRefusedError("connect call failed"),
        TimeoutError(),
        # A multi-host URL mid-failover: the old primary gone, the standby not yet promoted.
        asyncpg.TargetServerAttributeNotMatched("none of the hosts is read-write"),
        _wrapped(asyncpg.TargetServerAttributeNotMatched("none of the hosts is read-write")),
        # The server ended a pooled connection (a restart): asyncpg's state error, raw (the
        # raw pool's statements), wrapped by SQLAlchemy, and as the raw pool re-raises it.
        asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is ..."),
        _wrapped(asyncpg.InternalClientError("cannot switch to state 15; another operation")),
        LostConnection("the connection was lost (cannot switch to state 12; ...)"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        sa_exc.DBAPIError("UPDATE", {}, _PgError("XX000", _ESSENTIAL)),
        asyncpg.InternalServerError(_ESSENTIAL),  # straight from asyncpg (the raw pool)
    ],
)
def test_what_a_retry_may_cure_is_store_unavailable(raw: Exception) -> None:
    error = store_error(raw)
    assert isinstance(error, StoreUnavailable)
    assert error.__cause__ is raw
    assert str(error).startswith("cannot use the database")


@pytest.mark.parametrize(
    "raw",
    [
        sa_exc.IntegrityError("INSERT", {}, ValueError("duplicate key")),
        sa_exc.OperationalError("SELECT", {}, sqlite3.OperationalError("no such table: x")),
        sa_exc.ProgrammingError("SELECT", {}, _PgError("42P01")),  # undefined table
        sqlite3.DatabaseError("file is not a database"),
        asyncpg.UniqueViolationError("duplicate key value violates unique constraint"),
        asyncpg.ProtocolError("unexpected message from the server"),
        sa_exc.DBAPIError("SELECT", {}, _PgError("XX000", "could not find block containing")),
    ],
)
def test_what_it_cannot_is_a_store_error(raw: Exception) -> None:
    error = store_error(raw)
    assert type(error) is StoreError
    assert error.__cause__ is raw


def test_other_errors_pass_unchanged() -> None:
    conflict = Conflict("lost the race")
    assert store_error(conflict) is conflict
    bug = ValueError("a bug")
    assert store_error(bug) is bug


async def test_guarded_methods_and_generators_translate() -> None:
    @guarded
    async def read() -> None:
        raise sa_exc.OperationalError("SELECT 1", {}, ConnectionResetError("reset"))

    with pytest.raises(StoreUnavailable):
        await read()

    closed: list[bool] = []

    @guarded_iter
    async def rows():  # type: ignore[no-untyped-def]
        try:
            yield 1
            raise sqlite3.DatabaseError("file is not a database")
        finally:
            closed.append(True)

    got: list[int] = []

    async def drain() -> None:
        async for row in rows():
            got.append(row)

    with pytest.raises(StoreError):
        await drain()
    assert got == [1] and closed == [True]
