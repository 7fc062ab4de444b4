"""Schema migrations: upgrade a database to the head revision and tell whether it is there.

The `resplog migrate` command and the store's start-up check call these. The Alembic scripts
are found through the installed `migrations` package, so this works from a wheel as well as
from a checkout; `alembic.ini` at the repository root is only for developers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

import migrations
from adapters.store import citus
from adapters.store.multihost import engine_arguments, racing_connect
from adapters.store.pooler import keeps_session, probe_connect
from adapters.store.transient import guarded
from adapters.store.urls import async_url, asyncpg_dsn, ensure_sqlite_directory, is_postgres
from domain.errors import NotMigrated as NotMigrated  # where the composition roots look
from domain.errors import StoreError


def not_migrated(url: URL) -> NotMigrated:
    """The error for a database at `url` that is not at the head revision."""
    shown = url.render_as_string(hide_password=True)
    return NotMigrated(f'database is not migrated: run "resplog migrate --database-url {shown}"')


def script_location() -> Path:
    return Path(migrations.__file__).resolve().parent


# How long a step of a migration waits at a time for a lock that holds up the log's writes
# while it waits (migration 0008), before it gives way to them and tries again.
LOCK_WAIT = 1.0


def _config(connection: Connection | None = None, lock_wait: float = LOCK_WAIT) -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    config.attributes["connection"] = connection
    config.attributes["configure_logging"] = False
    config.attributes["lock_wait"] = lock_wait
    return config


def head_revisions() -> frozenset[str]:
    return frozenset(ScriptDirectory.from_config(_config()).get_heads())


def connection_is_head(connection: Connection) -> bool:
    """On a (sync) connection: whether the schema is at the head revision."""
    current = MigrationContext.configure(connection).get_current_heads()
    return frozenset(current) == head_revisions()


# Serialises the runs of `resplog migrate` on one PostgreSQL database (several pods that
# each migrate as they start): the second waits for the first, then finds it at head. A
# session's lock, since migration 0008 commits between its steps; the session ends with the
# run (`_run`'s engine keeps no connection), and the lock with it.
_MIGRATE_LOCK = 0x7265_7370_6C6F_6702


def _take_turn(connection: Connection) -> None:
    """Wait for `_MIGRATE_LOCK`, trying every half second: not by `pg_advisory_lock`, since
    a run that waits in a statement holds a snapshot, which the other run's `CREATE INDEX
    CONCURRENTLY` (migration 0009) waits for in turn."""
    take = sa.text("SELECT pg_try_advisory_lock(:key)")
    while True:
        got = connection.execute(take, {"key": _MIGRATE_LOCK}).scalar()
        connection.commit()  # idle between tries; Alembic then runs its own transactions
        if got:
            return
        time.sleep(0.5)


def _on_connection(
    action: Callable[[Config], None], lock_wait: float = LOCK_WAIT
) -> Callable[[Connection], None]:
    def run(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            _take_turn(connection)
        action(_config(connection, lock_wait))

    return run


@guarded
async def _run(url: str | URL, work: Callable[[Connection], object]) -> object:
    parsed = async_url(url)
    ensure_sqlite_directory(parsed)
    engine = create_async_engine(parsed, poolclass=NullPool, **engine_arguments(parsed, {}))
    try:
        async with engine.connect() as conn:
            result = await conn.run_sync(work)
            await conn.commit()
            return result
    finally:
        await engine.dispose()


@guarded
async def _refuse_pooler(url: str | URL) -> None:
    """A migration holds a session's lock across transactions (`_MIGRATE_LOCK`): through a
    pooler that hands out a server connection per transaction (adapters/store/pooler.py) the
    lock would stay on a server connection the pooler keeps, and every later run would wait
    for it for ever. Refused, naming the fix."""
    parsed = async_url(url)
    if not is_postgres(parsed):
        return
    options = {"statement_cache_size": 0, "timeout": 10.0}
    connect = racing_connect(parsed, options) or probe_connect(asyncpg_dsn(parsed), 10.0)
    if not await keeps_session(connect):
        shown = parsed.render_as_string(hide_password=True)
        raise StoreError(
            f"cannot migrate through {shown}: it keeps no session between statements (a "
            "pooler in transaction mode, such as PgBouncer's); give --database-url straight "
            "to PostgreSQL"
        )


async def upgrade_async(
    url: str | URL, revision: str = "head", *, lock_wait: float = LOCK_WAIT
) -> None:
    """`lock_wait`: seconds a step waits at a time for a lock that holds up writes."""
    await _refuse_pooler(url)
    upgrade = _on_connection(lambda config: command.upgrade(config, revision), lock_wait)
    await _run(url, upgrade)


async def downgrade_async(url: str | URL, revision: str = "base") -> None:
    await _refuse_pooler(url)
    await _run(url, _on_connection(lambda config: command.downgrade(config, revision)))


async def current_is_head_async(url: str | URL) -> bool:
    return bool(await _run(url, connection_is_head))


def upgrade(url: str | URL, revision: str = "head", *, lock_wait: float = LOCK_WAIT) -> None:
    """Migrate the database at `url` up to `revision` (call from sync code, e.g. the CLI)."""
    asyncio.run(upgrade_async(url, revision, lock_wait=lock_wait))


def downgrade(url: str | URL, revision: str = "base") -> None:
    asyncio.run(downgrade_async(url, revision))


def current_is_head(url: str | URL) -> bool:
    """Whether the database at `url` is at the head revision (sync)."""
    return asyncio.run(current_is_head_async(url))


async def citus_async(
    url: str | URL, *, check: bool = False, shards: int | None = None
) -> list[str]:
    """Distribute the log on the Citus coordinator at `url` (`citus.distribute`), in one
    transaction: a failure leaves every table as it was. With `check`, only whether it can
    (`citus.usable`)."""
    parsed = async_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise citus.NotCitus("--citus needs a PostgreSQL coordinator with the Citus extension")
    engine = create_async_engine(parsed, poolclass=NullPool, **engine_arguments(parsed, {}))
    try:
        async with engine.begin() as conn:
            if check:
                await citus.usable(conn)
                return []
            return await citus.distribute(conn, shards)
    finally:
        await engine.dispose()


def distribute(url: str | URL, *, check: bool = False, shards: int | None = None) -> list[str]:
    """`citus_async`, from sync code (the CLI)."""
    return asyncio.run(guarded(citus_async)(url, check=check, shards=shards))
