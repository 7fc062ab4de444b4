"""Opening the store for an admin command, and folding one response's log from it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from domain.errors import ResplogError
from service.audit.reading import replay as replay  # re-exported for the commands
from service.ports import ResponseRow, StoredEvent

if TYPE_CHECKING:  # the store (SQLAlchemy, the drivers) is imported by the commands that run
    from adapters.store.sql import SqlEventStore

T = TypeVar("T")


def run(work: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(work)


@asynccontextmanager
async def opened(url: str, *, listen: bool = False) -> AsyncIterator[SqlEventStore]:
    """The store at `url`, checked to be migrated; a SQLite file must already exist (a
    reading command must not create an empty database where a path was mistyped)."""
    from adapters.store.factory import open_store

    refuse_missing_file(url)
    store = await open_store(url, listen=listen)
    try:
        yield store
    finally:
        await store.close()


def refuse_missing_file(url: str) -> None:
    """Only `resplog migrate` creates a SQLite database: any other command refuses a path
    where none is, and says where it looked (a relative path is from the working directory)."""
    from adapters.store.urls import async_url

    parsed = async_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    path = Path(parsed.database or "").expanduser()
    if not path.is_file():
        raise ResplogError(
            f"no SQLite database at {str(path.absolute())!r}; create it with "
            f'"resplog migrate --database-url {url}" (or give --database-url)'
        )


class Dense:
    """One stream's positions as they are read, checked to run on with none missing: a
    reading command reports a hole (or events its row does not count) instead of passing
    over it, and `resplog verify` explains it."""

    def __init__(self, rid: str, record: ResponseRow | None, after: int = -1) -> None:
        self.rid = rid
        self.record = record
        self.due = after + 1

    def check(self, stored: StoredEvent) -> None:
        if stored.position != self.due:
            self._damaged(f"position {stored.position} where {self.due} was due")
        self.due += 1

    def end(self) -> None:
        """After the last event: as many as the row counts (none missing at the end)."""
        if self.record is not None and self.due != self.record.version + 1:
            self._damaged(f"{self.due} events where its row counts {self.record.version + 1}")

    def _damaged(self, what: str) -> None:
        raise ResplogError(
            f"the log of {self.rid} is damaged: {what} (see resplog verify {self.rid})"
        )
