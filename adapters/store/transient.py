"""Which database errors are worth retrying: a lost connection, a lock or deadlock timeout,
a serialization failure. A constraint violation never is (it means a conflict). Also the
error for "the database cannot be reached right now" that the HTTP layer turns into 503."""

from __future__ import annotations

import sqlalchemy.exc as sa_exc

# SQLite has no SQLSTATE: these of its messages mean "busy or unavailable", not "wrong".
_SQLITE_TRANSIENT = ("locked", "busy", "disk i/o error", "unable to open database file")

# SQLSTATE classes and codes that a retry can cure.
_TRANSIENT_CLASSES = ("08", "53", "57")  # connection exception, resources, operator intervention
_TRANSIENT_CODES = frozenset({"40001", "40P01", "55P03"})  # serialization, deadlock, lock


class Unreachable(ConnectionError):
    """The database cannot be reached right now (the writer is riding out an outage)."""


def _sqlstate(exc: sa_exc.DBAPIError) -> str | None:
    for candidate in (exc.orig, getattr(exc.orig, "__cause__", None)):
        code = getattr(candidate, "sqlstate", None)
        if isinstance(code, str):
            return code
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same transaction may succeed."""
    if isinstance(exc, sa_exc.IntegrityError):
        return False
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        code = _sqlstate(exc)
        if code is not None:
            return code in _TRANSIENT_CODES or code.startswith(_TRANSIENT_CLASSES)
        if type(exc.orig).__module__.startswith("sqlite3"):
            # "database is locked" is worth a retry; "no such table" never is.
            return any(word in str(exc.orig).lower() for word in _SQLITE_TRANSIENT)
        # A dropped asyncpg connection lands here.
        return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
    return isinstance(exc, OSError | TimeoutError | sa_exc.TimeoutError)
