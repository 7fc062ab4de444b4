"""Alembic migrations on fresh PostgreSQL and SQLite databases."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from setuptools import find_packages
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from adapters.store.factory import open_store
from adapters.store.migrate import current_is_head_async, downgrade_async, upgrade_async
from adapters.store.tables import described, metadata
from adapters.store.urls import async_url
from adapters.store.writer import GroupCommitWriter
from adapters.wiring import SqlDatabase
from domain.errors import NotMigrated
from service.ids import made_at, new_id
from tests.integration import streams

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["postgres", "sqlite"])
def empty_url(request: pytest.FixtureRequest, fresh_pg: Callable[[], str], tmp_path: Path) -> str:
    """A database with nothing in it."""
    if request.param == "postgres":
        return fresh_pg()
    return f"sqlite:///{tmp_path / 'fresh.db'}"


async def tables(url: str) -> set[str]:
    engine = create_async_engine(async_url(url))
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda c: sa.inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def test_upgrade_takes_a_fresh_database_to_head(empty_url: str) -> None:
    assert await current_is_head_async(empty_url) is False
    await upgrade_async(empty_url)
    assert await current_is_head_async(empty_url) is True
    assert {"events", "responses", "api_keys", "alembic_version"} <= await tables(empty_url)
    store = await open_store(empty_url)
    appends = streams.script(deltas=1)
    for expected, batch in appends:
        await store.append(appends[0][1][0].response.id, expected, batch)  # type: ignore[attr-defined]
    await store.close()


async def test_downgrade_removes_the_schema_and_upgrade_restores_it(empty_url: str) -> None:
    await upgrade_async(empty_url)
    await downgrade_async(empty_url, "base")
    assert await current_is_head_async(empty_url) is False
    assert not {"events", "responses", "api_keys"} & await tables(empty_url)
    await upgrade_async(empty_url)
    assert await current_is_head_async(empty_url) is True


async def _reloptions(url: str) -> dict[str, set[str]]:
    engine = create_async_engine(async_url(url))
    try:
        async with engine.connect() as conn:
            rows = await conn.exec_driver_sql(
                "SELECT relname, reloptions FROM pg_class WHERE relname IN ('responses', 'events')"
            )
            return {name: set(options or ()) for name, options in rows}
    finally:
        await engine.dispose()


async def test_the_hot_row_storage_parameters_go_up_and_down(empty_url: str) -> None:
    """0006 sets `responses`' fillfactor and both tables' autovacuum on PostgreSQL (and its
    downgrade puts back 0001's fillfactor and the defaults); on SQLite it is a no-op."""
    await upgrade_async(empty_url, "0005")
    await upgrade_async(empty_url, "0006")
    if not empty_url.startswith("postgresql"):
        await downgrade_async(empty_url, "0005")
        await upgrade_async(empty_url)
        assert await current_is_head_async(empty_url) is True
        return
    options = await _reloptions(empty_url)
    assert {"fillfactor=50", "autovacuum_vacuum_threshold=2000"} <= options["responses"]
    assert "autovacuum_vacuum_scale_factor=0.01" in options["events"]
    await downgrade_async(empty_url, "0005")
    assert await _reloptions(empty_url) == {"responses": {"fillfactor=80"}, "events": set()}


async def test_opening_an_unmigrated_database_names_the_fix(empty_url: str) -> None:
    with pytest.raises(NotMigrated) as info:
        await open_store(empty_url)
    message = str(info.value)
    assert message.startswith('database is not migrated: run "resplog migrate --database-url ')
    assert async_url(empty_url).database in message  # type: ignore[operator]


def test_the_sync_entry_points_work_from_any_directory(
    fresh_pg: Callable[[], str], tmp_path: Path
) -> None:
    """As the CLI calls them, from a directory without alembic.ini or the sources."""
    url = fresh_pg()
    code = (
        "import sys; from adapters.store import migrate as m; u = sys.argv[1]; "
        "assert not m.current_is_head(u); m.upgrade(u); assert m.current_is_head(u)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code, url], cwd=tmp_path, env=env, check=True)


def test_the_alembic_command_line_uses_the_async_env(tmp_path: Path) -> None:
    """`alembic -x url=... upgrade head` from the repository root (the developer's way)."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    alembic = [sys.executable, "-m", "alembic", "-x", f"url={url}"]
    subprocess.run([*alembic, "upgrade", "head"], cwd=REPO, check=True, capture_output=True)
    out = subprocess.run(
        [*alembic, "current"], cwd=REPO, check=True, capture_output=True, text=True
    )
    assert "0015 (head)" in out.stdout


def test_the_migrations_ship_as_packages() -> None:
    """A wheel carries `migrations.versions` only if it is a package (setuptools' find)."""
    found = find_packages(str(REPO), include=["migrations*"])
    assert {"migrations", "migrations.versions"} <= set(found)
    assert (REPO / "migrations" / "script.py.mako").is_file()


async def test_upgrade_creates_the_sqlite_file_and_its_directory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'dir' / 'resplog.db'}"
    await upgrade_async(url)
    assert await current_is_head_async(url) is True


async def test_the_sqlite_store_refuses_an_in_memory_database() -> None:
    with pytest.raises(ValueError, match="needs a file"):
        await open_store("sqlite+aiosqlite:///:memory:")


async def test_the_migrated_schema_is_what_tables_py_describes(empty_url: str) -> None:
    """No table, column, index or unique constraint differs (Alembic's own comparison)."""
    await upgrade_async(empty_url)
    engine = create_async_engine(async_url(empty_url))

    def differences(conn: sa.Connection) -> list[object]:
        opts = {"compare_type": True, "include_name": described}
        context = MigrationContext.configure(conn, opts=opts)
        return list(compare_metadata(context, metadata))

    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(differences) == []
    finally:
        await engine.dispose()


async def _sql(url: str, sql: str) -> list[tuple[object, ...]]:
    engine = create_async_engine(async_url(url))
    try:
        async with engine.begin() as conn:
            result = await conn.execute(sa.text(sql))
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        await engine.dispose()


async def _schema(url: str) -> tuple[set[str], set[str]]:
    """The columns and the index names of `responses`."""

    def inspect(c: sa.Connection) -> tuple[set[str], set[str]]:
        found = sa.inspect(c)
        columns = {col["name"] for col in found.get_columns("responses")}
        return columns, {str(ix["name"]) for ix in found.get_indexes("responses")}

    engine = create_async_engine(async_url(url))
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(inspect)
    finally:
        await engine.dispose()


async def test_0003_stores_the_cancel_reason_and_fills_it_for_flagged_rows(empty_url: str) -> None:
    """Rows flagged before 0003 get the reason the flag was read as then; a downgrade drops
    the column and keeps the rows (and their indexes), an upgrade brings it back."""
    await upgrade_async(empty_url, "0002")
    insert = (
        "INSERT INTO responses (id, owner, status, model, background, store, created_at, "
        "updated_at, version, snapshot_version, snapshot, cancel_requested_at, deleted_at) "
        "VALUES ('{id}', 'o', 'in_progress', 'm', {true}, {true}, 1.0, 1.0, 1, 1, '{{}}', "
        "{cancel}, {deleted})"
    )
    true = "true" if empty_url.startswith("postgres") else "1"
    flagged = (("r_plain", "NULL", "NULL"), ("r_cancel", "2.0", "NULL"), ("r_del", "2.0", "3.0"))
    for rid, cancel, deleted in flagged:
        await _sql(empty_url, insert.format(id=rid, true=true, cancel=cancel, deleted=deleted))
    columns, indexes = await _schema(empty_url)
    await upgrade_async(empty_url, "0003")
    assert await _sql(empty_url, "SELECT id, cancel_reason FROM responses ORDER BY id") == [
        ("r_cancel", "cancelled_by_user"),
        ("r_del", "deleted"),
        ("r_plain", None),
    ]
    assert await _schema(empty_url) == (columns | {"cancel_reason"}, indexes)
    await downgrade_async(empty_url, "0002")
    assert await _schema(empty_url) == (columns, indexes)
    assert len(await _sql(empty_url, "SELECT id FROM responses")) == 3
    await upgrade_async(empty_url)
    assert await current_is_head_async(empty_url) is True


async def test_ready_says_the_schema_is_behind_without_naming_the_database(
    empty_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`/ready` needs no key: during a rolling upgrade it names the fix, not the URL."""
    await upgrade_async(empty_url)
    store = await open_store(empty_url, lease_owner="test")
    database = SqlDatabase(store, GroupCommitWriter(store))
    try:
        assert await database.ready() is None
        async with store.engine.begin() as conn:  # a newer server's migration, undone
            await conn.execute(sa.text("UPDATE alembic_version SET version_num = '0001'"))
        with caplog.at_level("WARNING", logger="resplog.wiring"):
            reason = await database.ready()
    finally:
        await store.close()
    assert reason == (
        "the database schema is not at the version this server needs; run `resplog migrate`"
    )
    url = async_url(empty_url)
    logged = caplog.text
    assert url.database is not None and url.database in logged  # the operator's details
    assert url.database not in reason


@pytest.fixture
def empty_pg(fresh_pg: Callable[[], str]) -> str:
    return fresh_pg()


async def test_0008_partitions_the_log_by_day_keeping_its_rows_and_a_downgrade_joins_them(
    empty_pg: str,
) -> None:
    """The table of before becomes the legacy partition as it is (every id it holds, of any
    shape); a downgrade gathers every partition's rows back into one table."""
    url = empty_pg
    await upgrade_async(url, "0007")
    now = time.time()
    before = [f"resp_{'ab' * 24}", new_id("resp", now), new_id("conv", now)]
    for sid in before:
        await _sql(
            url,
            "INSERT INTO events (stream_id, position, type, data, recorded_at) "
            f"VALUES ('{sid}', 0, 't', '{{}}', 1.0)",
        )
    await upgrade_async(url)
    where = "SELECT stream_id, tableoid::regclass::text FROM events ORDER BY stream_id"
    assert await _sql(url, where) == sorted((sid, "events_legacy") for sid in before)

    store = await open_store(url)  # makes the coming days' partitions
    later = new_id("resp", (int(now // 86400) + 3) * 86400.0)
    try:
        created = streams.script(later, deltas=0, created_at=made_at(later))[0][1]
        await store.append(later, -1, created)
    finally:
        await store.close()
    assert (later, f"events_p{int(now // 86400) + 3}") in await _sql(url, where)

    await downgrade_async(url, "0007")
    kind = "SELECT relkind::text FROM pg_class WHERE relname = 'events'"
    assert await _sql(url, kind) == [("r",)]
    assert {r[0] for r in await _sql(url, "SELECT stream_id FROM events")} == {*before, later}
    assert await _sql(url, "SELECT count(*) FROM pg_class WHERE relname LIKE 'events_%'") == [(0,)]
    await upgrade_async(url)
    legacy = await _sql(url, "SELECT DISTINCT stream_id FROM events_legacy")
    assert {r[0] for r in legacy} == {*before, later}  # up to the newest response's day


async def _partition_options(url: str) -> dict[str, set[str]]:
    rows = await _sql(
        url,
        "SELECT c.relname, c.reloptions FROM pg_partition_tree('events') t "
        "JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
    )
    return {str(name): set(options or ()) for name, options in rows}


async def _statistics_targets(url: str) -> set[object]:
    """Every partition column's statistics target (-1: the server's default)."""
    rows = await _sql(
        url,
        "SELECT a.attstattarget FROM pg_partition_tree('events') t "
        "JOIN pg_attribute a ON a.attrelid = t.relid "
        "WHERE t.isleaf AND a.attnum > 0 AND NOT a.attisdropped",
    )
    return {row[0] for row in rows}


async def test_0010_turns_off_each_partitions_insert_vacuum_samples_less_and_a_downgrade_restores(
    empty_pg: str,
) -> None:
    """Every partition loses its vacuum after inserts alone and keeps its vacuum after
    deleted rows, and its columns sample a tenth as many rows for `ANALYZE`; the partitions
    made from then on are made so; a downgrade gives every partition 0008's settings back."""
    url = empty_pg
    await upgrade_async(url, "0009")
    before = await _partition_options(url)
    assert set(before) == {"events_legacy", "events_default"}
    assert all("autovacuum_vacuum_insert_scale_factor=0.02" in o for o in before.values())
    assert await _statistics_targets(url) == {-1}

    await upgrade_async(url)
    store = await open_store(url)  # makes the coming days' partitions
    await store.close()
    after = await _partition_options(url)
    assert len(after) > 2  # the coming days' too
    for options in after.values():
        assert "autovacuum_vacuum_insert_threshold=-1" in options
        assert not any(o.startswith("autovacuum_vacuum_insert_scale_factor") for o in options)
        assert "autovacuum_vacuum_scale_factor=0.01" in options
    assert await _statistics_targets(url) == {10}

    await downgrade_async(url, "0009")
    for options in (await _partition_options(url)).values():
        assert "autovacuum_vacuum_insert_scale_factor=0.02" in options
        assert not any(o.startswith("autovacuum_vacuum_insert_threshold") for o in options)
    assert await _statistics_targets(url) == {-1}


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _event_row(sid: str) -> str:
    return (
        "INSERT INTO events (stream_id, position, type, data, recorded_at) "
        f"VALUES ('{sid}', 0, 't', '{{}}', 1.0)"
    )


async def _until(conn: asyncpg.Connection, waiting_on: str) -> None:
    """Until a backend waits on a lock in a statement that starts with `waiting_on`."""
    sql = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query ILIKE $1 AND pid <> pg_backend_pid() AND datname = current_database()"
    )
    for _ in range(300):
        if await conn.fetchval(sql, f"{waiting_on}%"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing waits in {waiting_on!r}")


async def test_0008_reads_the_log_while_writes_go_on(empty_pg: str) -> None:
    """The step that reads the whole log (the validation of the legacy partition's `CHECK`)
    lets writes go on: here it waits on a lock that a write does not conflict with, and a
    write is taken meanwhile. (Adding the `CHECK` validated, as before, read the log under
    the lock of its transaction, which stops every write.)

    The order is forced with locks: a reader holds the migration's first lock back (it
    may wait a minute here); a session queues for SHARE UPDATE EXCLUSIVE behind it, and is
    granted that lock when the migration's first transaction commits, before the
    validation asks for it."""
    url = empty_pg
    await upgrade_async(url, "0007")
    now = time.time()
    first, during = new_id("resp", now), new_id("resp", now)
    await _sql(url, _event_row(first))
    reader, holder, writer = [await asyncpg.connect(_dsn(url)) for _ in range(3)]
    tasks: list[asyncio.Task[object]] = []
    try:
        reading = reader.transaction()
        await reading.start()
        await reader.fetchval("SELECT count(*) FROM events")
        migration = asyncio.create_task(upgrade_async(url, lock_wait=60))
        tasks.append(migration)
        await _until(writer, "LOCK TABLE events IN ACCESS EXCLUSIVE")
        holding = holder.transaction()
        await holding.start()
        locking = asyncio.create_task(
            holder.execute("LOCK TABLE events IN SHARE UPDATE EXCLUSIVE MODE")
        )
        tasks.append(locking)
        await _until(writer, "LOCK TABLE events IN SHARE UPDATE EXCLUSIVE")
        await reading.commit()
        await asyncio.wait_for(locking, 30)
        await _until(writer, "ALTER TABLE events VALIDATE CONSTRAINT")
        await writer.execute("SET lock_timeout = '2s'")
        await writer.execute(_event_row(during))  # not queued behind the migration
        await holding.commit()
        await asyncio.wait_for(migration, 30)
    finally:
        for task in tasks:
            task.cancel()
        for conn in (reader, holder, writer):
            await conn.close()
    where = "SELECT stream_id, tableoid::regclass::text FROM events ORDER BY stream_id"
    assert await _sql(url, where) == sorted((sid, "events_legacy") for sid in (first, during))
    valid = "SELECT convalidated FROM pg_constraint WHERE conname = 'events_legacy_period'"
    assert await _sql(url, valid) == [(True,)]


async def test_0008_runs_again_after_an_interrupted_run(empty_pg: str) -> None:
    """A run stopped after its `CHECK` was committed (by then unvalidated, its bound maybe
    past) leaves it on `events`; the next run makes it again and finishes."""
    url = empty_pg
    await upgrade_async(url, "0007")
    sid = new_id("resp", time.time())
    await _sql(url, _event_row(sid))
    await _sql(
        url,
        "ALTER TABLE events ADD CONSTRAINT events_legacy_period "
        "CHECK (octet_length(stream_id) < 0) NOT VALID",
    )
    await upgrade_async(url)
    where = "SELECT stream_id, tableoid::regclass::text FROM events"
    assert await _sql(url, where) == [(sid, "events_legacy")]
    assert await current_is_head_async(url)


async def test_0008_gives_way_to_writes_while_a_long_transaction_holds_the_log(
    empty_pg: str,
) -> None:
    """A step that waits for its lock behind a long transaction gives way after
    `lock_wait` and tries again, so the writes queued behind it are held up that long at
    most, not for as long as the transaction lasts; it finishes once that has ended."""
    url = empty_pg
    await upgrade_async(url, "0007")
    now = time.time()
    first, during = new_id("resp", now), new_id("resp", now)
    await _sql(url, _event_row(first))
    reader, writer = [await asyncpg.connect(_dsn(url)) for _ in range(2)]
    migration: asyncio.Task[None] | None = None
    try:
        reading = reader.transaction()
        await reading.start()
        await reader.fetchval("SELECT count(*) FROM events")  # an export, say
        migration = asyncio.create_task(upgrade_async(url, lock_wait=0.2))
        await _until(writer, "LOCK TABLE events IN ACCESS EXCLUSIVE")
        await writer.execute("SET lock_timeout = '2s'")
        await writer.execute(_event_row(during))
        assert not migration.done()
        await reading.commit()
        await asyncio.wait_for(migration, 30)
    finally:
        if migration is not None:
            migration.cancel()
        await reader.close()
        await writer.close()
    where = "SELECT stream_id, tableoid::regclass::text FROM events ORDER BY stream_id"
    assert await _sql(url, where) == sorted((sid, "events_legacy") for sid in (first, during))


async def test_0009_builds_again_an_index_an_interrupted_run_left_invalid(empty_pg: str) -> None:
    """`CREATE INDEX CONCURRENTLY` interrupted leaves an invalid index behind (here, one
    marked so, as the interrupted build would have); the next run builds it anew."""
    url = empty_pg
    await upgrade_async(url, "0008")
    await _sql(url, "CREATE INDEX ix_responses_unstored ON responses (created_at, id)")
    await _sql(
        url,
        "UPDATE pg_index SET indisvalid = false "
        "WHERE indexrelid = 'ix_responses_unstored'::regclass",
    )
    await upgrade_async(url)
    state = (
        "SELECT c.relname, i.indisvalid, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indpred IS NOT NULL "
        "ORDER BY c.relname"
    )
    assert await _sql(url, state) == [
        ("ix_responses_deleted", True, "(deleted_at IS NOT NULL)"),
        ("ix_responses_unstored", True, "(store IS FALSE)"),
    ]


async def test_two_migrations_at_once_take_turns(empty_pg: str) -> None:
    """Several processes that each migrate as they start (pods of one deployment): the
    runs take turns, and the later one finds the database at head. Migration 0008 commits
    between its steps, so two at once would trip over each other's."""
    url = empty_pg
    await upgrade_async(url, "0007")
    await _sql(url, _event_row(new_id("resp", time.time())))
    resplog = str(Path(sys.executable).with_name("resplog"))
    runs = [
        await asyncio.create_subprocess_exec(
            resplog, "migrate", "--database-url", url, stdout=subprocess.DEVNULL
        )
        for _ in range(2)
    ]
    try:
        assert await asyncio.wait_for(asyncio.gather(*(r.wait() for r in runs)), 60) == [0, 0]
    finally:
        for run in runs:
            if run.returncode is None:
                run.kill()
                await run.wait()
    assert await current_is_head_async(url)
    where = "SELECT tableoid::regclass::text FROM events"
    assert await _sql(url, where) == [("events_legacy",)]
