"""The event store adapters: PostgreSQL and SQLite stores, the group-commit writer, the API
keys table."""

from adapters.store.factory import make_store, open_store
from adapters.store.keys import SqlApiKeyStore
from adapters.store.readmodel import ResponsePage
from adapters.store.settings import StoreSettings
from adapters.store.sql import SqlEventStore
from adapters.store.writer import GroupCommitWriter
from domain.errors import NotMigrated, StoreError, StoreUnavailable

__all__ = [
    "GroupCommitWriter",
    "NotMigrated",
    "ResponsePage",
    "SqlApiKeyStore",
    "SqlEventStore",
    "StoreError",
    "StoreSettings",
    "StoreUnavailable",
    "make_store",
    "open_store",
]
