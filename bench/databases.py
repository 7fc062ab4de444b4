"""The PostgreSQL databases the benchmarks run on: a fresh one per run, dropped after it."""

from __future__ import annotations

import argparse
import os
import secrets

import asyncpg
from sqlalchemy.engine import make_url

# The server the benches create their databases on (the test suite's, by default).
PG = os.environ.get("RESPLOG_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
# The name of each bench database starts with this (so that benches sharing a server can
# tell their databases apart).
PREFIX = os.environ.get("RESPLOG_BENCH_DB_PREFIX", "resplog_bench_")


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def database_arguments(p: argparse.ArgumentParser) -> None:
    """`--database-url` (the server to make the bench database on) and `--sqlite`."""
    p.add_argument(
        "--database-url",
        default=PG,
        help="PostgreSQL server to create the (dropped afterwards) bench database on",
    )
    p.add_argument("--sqlite", action="store_true", help="bench the embedded SQLite store")


async def _admin(admin_url: str, sql: str) -> None:
    conn = await asyncpg.connect(_dsn(admin_url))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def fresh_postgres(admin_url: str = PG) -> tuple[str, str]:
    """Create an empty database on `admin_url`'s server: its URL (same driver) and name."""
    name = f"{PREFIX}{secrets.token_hex(5)}"
    await _admin(admin_url, f'CREATE DATABASE "{name}"')
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), name


async def drop_postgres(admin_url: str, name: str) -> None:
    await _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
