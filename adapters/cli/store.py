"""The CLI's composition root: the database a URL names, checked and opened for a command
as the audit's ports (`opened`), and what a command needs of the URL itself. The only
module of the CLI that imports the store; the store (SQLAlchemy, the drivers) is imported
by the commands that run, never by `--help`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from domain.errors import ResplogError

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit

T = TypeVar("T")


def run(work: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(work)


@asynccontextmanager
async def opened(
    url: str, *, listen: bool = False, replica_url: str | None = None
) -> AsyncIterator[Audit]:
    """The audit's ports over the store at `url`, checked to be migrated; a SQLite file
    must already exist (a reading command must not create an empty database where a path
    was mistyped). `replica_url`: a hot standby the reads go to once it has caught up with
    the primary (adapters/store/replica.py)."""
    from adapters.store.factory import audit_ports, open_store

    refuse_missing_file(url)
    store = await open_store(url, listen=listen, replica_url=replica_url)
    try:
        yield audit_ports(store)
    finally:
        await store.close()


def check_url(url: str) -> None:
    """Raises unless `url` names a database resplog can use: ValueError for another scheme,
    SQLAlchemy's ArgumentError for what is not a URL at all."""
    from adapters.store.urls import async_url

    async_url(url)


def sqlite_file(url: str) -> str | None:
    """The path of the SQLite file `url` names (None: PostgreSQL, or SQLite in memory)."""
    from adapters.store.urls import async_url

    parsed = async_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return parsed.database


def refuse_missing_file(url: str) -> None:
    """Only `resplog migrate` creates a SQLite database: any other command refuses a path
    where none is, and says where it looked (a relative path is from the working directory)."""
    database = sqlite_file(url)
    if database is None:
        return
    path = Path(database).expanduser()
    if not path.is_file():
        raise ResplogError(
            f"no SQLite database at {str(path.absolute())!r}; create it with "
            f'"resplog migrate --database-url {url}" (or give --database-url)'
        )


def migrate(
    url: str, *, lock_wait: float, citus: bool = False, shards: int | None = None
) -> list[str]:
    """Upgrade the database at `url` to the newest schema (creating a SQLite file); with
    `citus`, then distribute it (a Citus coordinator with workers, checked before anything
    changes); the tables it distributed."""
    from adapters.store.migrate import distribute, upgrade

    if citus:
        distribute(url, check=True)
    upgrade(url, lock_wait=lock_wait)
    return distribute(url, shards=shards) if citus else []
