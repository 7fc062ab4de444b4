"""The error tree of resplog.

    ResplogError
    ├── DomainError            a command or a log breaks a rule of the aggregate
    │   ├── InvalidTransition  the response's state does not allow it (e.g. terminal)
    │   ├── NotFound           no such response (or not visible to the caller)
    │   ├── Conflict           another writer appended first (wrong expected version)
    │   ├── InvalidRequest     the request is malformed or unsupported (-> HTTP 400)
    │   └── CorruptEvent       a stored row cannot be decoded (names stream and position)
    ├── ArchiveError           an export file cannot be imported (names the line)
    ├── EngineError            the generation engine failed (raised by engine adapters)
    ├── StoreError             the database failed in a way a retry cannot cure (-> HTTP 500)
    │   ├── StoreUnavailable   the database cannot be reached now: an outage, a lost
    │   │                      connection, a lock timeout (-> HTTP 503 with Retry-After)
    │   └── NotMigrated        the database is not at the head revision of the migrations
    └── AccessError            the caller may not make this request (now)
        ├── Unauthenticated    no API key, or one that is unknown or revoked (-> HTTP 401)
        └── RateLimited        a per-key rate or stream limit is reached (-> HTTP 429)

HTTP status and exit codes are assigned in exactly one place each
(`adapters/http/errors.py`, `adapters/cli/`). The store adapters raise only this tree: no
driver's exception (SQLAlchemy, asyncpg, sqlite3, OSError) leaves them as it is.
"""

from __future__ import annotations


class ResplogError(Exception):
    """Base of every error resplog raises on purpose."""


class DomainError(ResplogError):
    """A rule of the response aggregate was broken."""


class InvalidTransition(DomainError):
    """The response's current state does not allow this command or event."""


class NotFound(DomainError):
    """The response does not exist, was deleted, or belongs to someone else; `param` and
    `code` say which parameter named it, as OpenAI's error does."""

    def __init__(self, message: str = "", *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


class Conflict(DomainError):
    """An append lost the race: the stream was not at the expected version."""


class DuplicateItems(DomainError):
    """A conversation has (or had: a deleted item keeps its id) items with these ids, so
    the items given with them were not added; nothing was."""

    def __init__(self, item_ids: frozenset[str]):
        super().__init__(f"items already in the conversation: {', '.join(sorted(item_ids))}")
        self.item_ids = item_ids


class InvalidRequest(DomainError):
    """The request is malformed or asks for something unsupported."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class CorruptEvent(DomainError):
    """A stored event cannot be decoded; never skipped silently."""

    def __init__(self, stream_id: str, position: int, reason: str):
        super().__init__(f"corrupt event in stream {stream_id} at position {position}: {reason}")
        self.stream_id = stream_id
        self.position = position
        self.reason = reason


class ArchiveError(ResplogError):
    """An export file is malformed, cut short, or holds a log that does not verify."""


class EngineError(ResplogError):
    """The generation engine failed; `code` is machine-readable, the message says what.
    `said`: the engine's own words for a request it refused, without the operator's detail
    (its URL) that `message` carries, so a client may be shown them."""

    def __init__(self, message: str, *, code: str = "engine_error", said: str | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.said = said


class StoreError(ResplogError):
    """The database refused or failed an operation, and retrying it will not help (a
    missing table, a broken constraint, a permission). The driver's error is its cause."""


class StoreUnavailable(StoreError):
    """The database cannot be reached right now (a lost connection, a server restarting, an
    exhausted pool, a lock wait that timed out); retrying shortly may well succeed."""


class NotMigrated(StoreError):
    """The database is not at the head revision of the migrations; the message names the
    command that fixes it."""


class AccessError(ResplogError):
    """The caller may not make this request, or not now."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Unauthenticated(AccessError):
    """The request carries no API key, or one that is unknown or revoked."""


class RateLimited(AccessError):
    """A per-key limit is reached; `retry_after` is how many seconds to wait."""

    def __init__(self, message: str, *, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after
