"""Alembic environment (async): runs the migrations on PostgreSQL (asyncpg) or SQLite
(aiosqlite), on a connection handed over by `adapters.store.migrate` or on its own engine.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from adapters.store.tables import described, metadata
from adapters.store.urls import async_url

config = context.config


def _url() -> str:
    x_args = context.get_x_argument(as_dictionary=True)
    url = x_args.get("url") or os.environ.get("RESPLOG_DATABASE_URL")
    url = url or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: pass -x url=... or set RESPLOG_DATABASE_URL")
    return async_url(url).render_as_string(hide_password=False)


def _configure(connection: Connection) -> None:
    # Batch mode lets later ALTERs work on SQLite, which rebuilds the table for them.
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=described,
    )


def _run_sync(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_url(), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_sync)
            await connection.commit()
    finally:
        await engine.dispose()


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    given = config.attributes.get("connection")
    if isinstance(given, Connection):
        _run_sync(given)
    else:
        asyncio.run(_run_async())


if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

if context.is_offline_mode():
    run_offline()
else:
    run_online()
