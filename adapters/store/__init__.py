"""The event store adapters: PostgreSQL and SQLite stores, the group-commit writer, the API
keys table."""

from adapters.store.factory import make_store, open_store
from adapters.store.keys import SqlApiKeyStore
from adapters.store.migrate import NotMigrated
from adapters.store.readmodel import ResponsePage
from adapters.store.settings import StoreSettings
from adapters.store.sql import SqlEventStore
from adapters.store.writer import GroupCommitWriter

__all__ = [
    "GroupCommitWriter",
    "NotMigrated",
    "ResponsePage",
    "SqlApiKeyStore",
    "SqlEventStore",
    "StoreSettings",
    "make_store",
    "open_store",
]
