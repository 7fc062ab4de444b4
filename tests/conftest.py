"""Store fixtures: a fresh PostgreSQL database per test session (other engineers share the
server) and a fresh SQLite file, both migrated to head; `store` runs a test on each;
`fresh_sqlite`, a SQLite database of a test's own (a copy of one migrated template)."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from adapters.store.factory import open_store
from adapters.store.migrate import upgrade
from adapters.store.sql import SqlEventStore

PG_BASE_URL = os.environ.get(
    "RESPLOG_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(_dsn(PG_BASE_URL))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test has an id of its own. The suite runs under pytest-xdist, whose workers are
    sent ids to run: of items that share one, a worker runs the first only, and the rest
    pass unseen (so it was with schemathesis' items under pytest 9.2: tests/e2e/security/
    test_fuzz.py)."""
    shared = [nodeid for nodeid, n in Counter(item.nodeid for item in items).items() if n > 1]
    if shared:
        raise pytest.UsageError(f"tests that share an id: {sorted(shared)}")


@pytest.fixture(scope="session")
def fresh_pg() -> Iterator[Callable[[], str]]:
    """A factory of fresh, empty PostgreSQL databases (dropped at the end of the session)."""
    made: list[str] = []

    def make() -> str:
        name = f"resplog_test_{secrets.token_hex(6)}"
        asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
        made.append(name)
        return make_url(PG_BASE_URL).set(database=name).render_as_string(hide_password=False)

    yield make
    for name in made:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_url(fresh_pg: Callable[[], str]) -> str:
    """One migrated PostgreSQL database for the session's store tests."""
    url = fresh_pg()
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One migrated SQLite file for the session's store tests."""
    path: Path = tmp_path_factory.mktemp("sqlite") / "resplog.db"
    url = f"sqlite+aiosqlite:///{path}"
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once per session, for `fresh_sqlite` to copy: a copy
    costs a millisecond, running the migrations a few hundred."""
    path: Path = tmp_path_factory.mktemp("template") / "resplog.db"
    upgrade(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture
def fresh_sqlite(sqlite_template: Path, tmp_path: Path) -> str:
    """The URL of a migrated SQLite database of this test's own."""
    path = tmp_path / "resplog.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture(params=["postgres", "sqlite"])
def store_url(request: pytest.FixtureRequest) -> str:
    """The URL of each store in turn (the contract suite runs on both)."""
    name = "pg_url" if request.param == "postgres" else "sqlite_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SqlEventStore]:
    s = await open_store(store_url, poll_interval=0.2)
    yield s
    await s.close()
