"""Reads from a hot standby (`--replica-database-url`) on a private primary and its
streaming standby: the events of ended responses are read on the standby (its own table
statistics count the reads), and so are the `input_items` of an ended response (the request
its first event carries); a response the standby has not replayed yet is read on the
primary (the standby's replay paused). Listings (a conversation's items, the audit view's
API) and `resplog export --replica-database-url` are read on the standby once it has
replayed the primary's WAL up to where it was when asked: the standby's
pg_stat_statements counts their statements, and with its replay paused they are read on
the primary, the newest rows included, with a line saying the standby lags. A standby that
is down, or a "replica" that is a primary, leaves every read served by the primary, with a
clear line in the log."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
import httpx
import openai
import pytest

from adapters.store.factory import open_store
from adapters.store.postgres import PostgresEventStore
from adapters.store.replica import LAG_BACKOFF, RECHECK
from tests.e2e.cluster import PrivatePostgres, replicated_postgres
from tests.e2e.conftest import RESPLOG, Server, free_port, start_server, stop_server

# resplog's connections on the standby whose last statement read a stream's events (a
# page or a whole read: both ask for positions after $2). pg_stat_activity shows it at
# once; the table statistics are flushed only once a backend has been idle a while.
_READERS = """
SELECT count(*)::int FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND query LIKE '%position > $2%'
"""


@dataclass
class Pair:
    primary: PrivatePostgres
    standby: PrivatePostgres
    server: Server


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """One pair for the module's tests, in their order: the last one kills the standby."""
    tmp = tmp_path_factory.mktemp("replica")
    # pg_stat_statements counts each statement the standby ran, as it ends.
    with replicated_postgres("-c shared_preload_libraries=pg_stat_statements") as (
        primary,
        standby,
    ):
        value(primary, "CREATE EXTENSION pg_stat_statements")
        replica = ("--replica-database-url", standby.url())
        server = start_server(primary.url(), "postgres", tmp / "server.log", *replica)
        try:
            yield Pair(primary, standby, server)
        finally:
            stop_server(server)


async def _value(dsn: str, sql: str) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


def value(cluster: PrivatePostgres, sql: str) -> object:
    return asyncio.run(_value(cluster.dsn(), sql))


def standby_readers(standby: PrivatePostgres) -> int:
    return int(str(value(standby, _READERS) or 0))


def standby_clock(standby: PrivatePostgres) -> str:
    return str(value(standby, "SELECT clock_timestamp()::text"))


def standby_readers_since(standby: PrivatePostgres, moment: str) -> int:
    """Those of `_READERS` whose last read began after `moment` (the standby's clock)."""
    since = f"{_READERS} AND query_start > '{moment}'::timestamptz"
    return int(str(value(standby, since) or 0))


def sent_and_listed(server: Server, rid: str) -> list[str]:
    """The texts `input_items` lists for `rid`, oldest first, a page of one at a time."""
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="-", max_retries=0)
    listed = client.responses.input_items.list(rid, order="asc", limit=1)
    return [item.content[0].text for item in listed]  # type: ignore[union-attr,index]


def created_with_inputs(server: Server, texts: list[str]) -> str:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="-", max_retries=0)
    sent = [{"role": "user", "content": text} for text in texts]
    return client.responses.create(model="scripted", input=sent).id  # type: ignore[arg-type]


def replay(server: Server, rid: str) -> list[dict[str, object]]:
    """The stored events of `rid` as JSON Lines (`follow=false`: what is stored now)."""
    reply = httpx.get(
        f"{server.base_url}/v1/responses/{rid}/events",
        params={"format": "jsonl", "follow": "false"},
        timeout=30,
    )
    reply.raise_for_status()
    return [json.loads(line) for line in reply.text.splitlines() if line.strip()]


def replayed_by_sdk(server: Server, rid: str, after: int) -> list[int]:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="-", max_retries=0)
    with client.responses.retrieve(rid, stream=True, starting_after=after) as events:
        return [e.sequence_number for e in events]


def until_replayed(standby: PrivatePostgres, rid: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    sql = f"SELECT status FROM responses WHERE id = '{rid}'"
    while value(standby, sql) != "completed":
        assert time.monotonic() < deadline, f"the standby never replayed {rid}"
        time.sleep(0.05)


def ran_on(cluster: PrivatePostgres, like: str) -> int:
    """How many times `cluster` ran statements whose text is `like` (pg_stat_statements:
    counted as each ends, whatever the connection)."""
    sql = f"SELECT coalesce(sum(calls), 0)::int FROM pg_stat_statements WHERE query LIKE '{like}'"
    return int(str(value(cluster, sql)))


# What a conversation's items page, the audit view's list of responses and of conversations,
# and a read of one response's row (the audit view's page of one) run, as SQLAlchemy writes
# them; `export` reads the rows of ended responses with `_EXPORTED`.
_ITEMS = "%FROM conversation_items%WHERE conversation_items.conversation_id = $%"
_RESPONSES = "%FROM responses%ORDER BY responses.created_at DESC, responses.id DESC%"
_CONVERSATIONS = "%FROM conversations%ORDER BY conversations.created_at DESC%"
_ONE = "%FROM responses%WHERE responses.id = $%"
_EXPORTED = "%FROM responses%ORDER BY responses.created_at, responses.id%"


def sdk(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="-", max_retries=0)


def conversation_with(server: Server, texts: list[str]) -> str:
    sent = [{"role": "user", "content": text} for text in texts]
    return sdk(server).conversations.create(items=sent).id  # type: ignore[arg-type]


def added(server: Server, cid: str, text: str) -> None:
    sdk(server).conversations.items.create(cid, items=[{"role": "user", "content": text}])


def items_listed(server: Server, cid: str) -> list[str]:
    """The texts of the conversation's items, oldest first, two to a page."""
    listed = sdk(server).conversations.items.list(cid, order="asc", limit=2)
    return [item.content[0].text for item in listed]  # type: ignore[union-attr,index]


def audit(server: Server, path: str) -> dict[str, object]:
    reply = httpx.get(f"{server.base_url}/audit/api/{path}", timeout=30)
    reply.raise_for_status()
    found: dict[str, object] = reply.json()
    return found


def listed_ids(server: Server, path: str) -> list[str]:
    data = audit(server, path)["data"]
    assert isinstance(data, list)
    return [str(row["id"]) for row in data]


def export(primary: PrivatePostgres, *replica: str) -> tuple[list[str], str]:
    """`resplog export`'s lines after its header (which says when it was made), and its
    stderr."""
    done = subprocess.run(
        [RESPLOG, "export", "--database-url", primary.url(), "--no-progress", *replica],
        capture_output=True,
        check=True,
    )
    return done.stdout.decode().splitlines()[1:], done.stderr.decode()


def created(server: Server, count: int) -> list[str]:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="-", max_retries=0)
    return [client.responses.create(model="scripted", input=f"r{i}").id for i in range(count)]


def test_replays_of_ended_responses_are_read_on_the_standby(pair: Pair) -> None:
    ids = created(pair.server, 5)
    for rid in ids:
        until_replayed(pair.standby, rid)
    assert standby_readers(pair.standby) == 0
    for rid in ids:
        events = replay(pair.server, rid)
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] == "response.completed"
        numbers = [int(str(e["sequence_number"])) for e in events]
        assert numbers == list(range(len(numbers)))
        assert replayed_by_sdk(pair.server, rid, numbers[1]) == numbers[2:]
    assert standby_readers(pair.standby) >= 1


def test_input_items_of_an_ended_response_are_read_on_the_standby(pair: Pair) -> None:
    rid = created_with_inputs(pair.server, ["one", "two", "three"])
    until_replayed(pair.standby, rid)
    moment = standby_clock(pair.standby)
    assert sent_and_listed(pair.server, rid) == ["one", "two", "three"]
    assert standby_readers_since(pair.standby, moment) >= 1


def test_a_lagging_standby_leaves_input_items_to_the_primary(pair: Pair) -> None:
    value(pair.standby, "SELECT pg_wal_replay_pause()")
    try:
        rid = created_with_inputs(pair.server, ["four", "five"])
        moment = standby_clock(pair.standby)
        assert sent_and_listed(pair.server, rid) == ["four", "five"]
        assert value(pair.standby, f"SELECT count(*) FROM responses WHERE id = '{rid}'") == 0
        assert standby_readers_since(pair.standby, moment) == 0
    finally:
        value(pair.standby, "SELECT pg_wal_replay_resume()")
    until_replayed(pair.standby, rid)
    time.sleep(RECHECK)  # found running on the standby: not asked of it again before this
    moment = standby_clock(pair.standby)
    assert sent_and_listed(pair.server, rid) == ["four", "five"]
    assert standby_readers_since(pair.standby, moment) >= 1


def test_a_lagging_standby_leaves_the_read_to_the_primary(pair: Pair) -> None:
    value(pair.standby, "SELECT pg_wal_replay_pause()")
    try:
        (rid,) = created(pair.server, 1)
        events = replay(pair.server, rid)
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] == "response.completed"
        numbers = [int(str(e["sequence_number"])) for e in events]
        assert replayed_by_sdk(pair.server, rid, -1) == numbers
        assert value(pair.standby, f"SELECT count(*) FROM responses WHERE id = '{rid}'") == 0
    finally:
        value(pair.standby, "SELECT pg_wal_replay_resume()")
    until_replayed(pair.standby, rid)
    assert replay(pair.server, rid) == events


def test_a_conversations_items_are_listed_on_the_standby(pair: Pair) -> None:
    cid = conversation_with(pair.server, ["one", "two", "three"])
    before = ran_on(pair.standby, _ITEMS)
    assert items_listed(pair.server, cid) == ["one", "two", "three"]
    # An item just added is listed at once: the standby waits to reach the primary's
    # position of the moment the listing was asked for.
    added(pair.server, cid, "four")
    assert items_listed(pair.server, cid) == ["one", "two", "three", "four"]
    assert ran_on(pair.standby, _ITEMS) >= before + 4  # two listings of two pages


def test_the_audit_views_api_is_read_on_the_standby(pair: Pair) -> None:
    (rid,) = created(pair.server, 1)
    cid = conversation_with(pair.server, ["audited"])
    before = {like: ran_on(pair.standby, like) for like in (_RESPONSES, _CONVERSATIONS, _ONE)}
    assert rid in listed_ids(pair.server, "responses?limit=5")
    assert cid in listed_ids(pair.server, "conversations?limit=5")
    detail = audit(pair.server, f"responses/{rid}")
    row = detail["row"]
    assert isinstance(row, dict) and row["status"] == "completed"
    for like, count in before.items():
        assert ran_on(pair.standby, like) > count, like


def test_a_lagging_standby_leaves_listings_to_the_primary(pair: Pair) -> None:
    cid = conversation_with(pair.server, ["five"])
    value(pair.standby, "SELECT pg_wal_replay_pause()")
    try:
        added(pair.server, cid, "six")
        (rid,) = created(pair.server, 1)
        before = {like: ran_on(pair.standby, like) for like in (_ITEMS, _RESPONSES)}
        assert items_listed(pair.server, cid) == ["five", "six"]
        assert rid in listed_ids(pair.server, "responses?limit=5")
        assert {like: ran_on(pair.standby, like) for like in before} == before
        assert "lags:" in pair.server.log_text()
        assert "listings go to the primary meanwhile" in pair.server.log_text()
    finally:
        value(pair.standby, "SELECT pg_wal_replay_resume()")
    until_replayed(pair.standby, rid)
    time.sleep(LAG_BACKOFF)  # a standby that lagged is skipped by listings for this long
    assert items_listed(pair.server, cid) == ["five", "six"]
    assert ran_on(pair.standby, _ITEMS) > before[_ITEMS]


def test_export_reads_on_the_standby(pair: Pair) -> None:
    created(pair.server, 2)
    conversation_with(pair.server, ["exported"])
    alone, _ = export(pair.primary)
    before_standby = ran_on(pair.standby, _EXPORTED)
    before_primary = ran_on(pair.primary, _EXPORTED)
    from_standby, said = export(pair.primary, "--replica-database-url", pair.standby.url())
    assert from_standby == alone
    assert ran_on(pair.standby, _EXPORTED) > before_standby
    assert ran_on(pair.primary, _EXPORTED) == before_primary
    assert "lags" not in said and "cannot be read" not in said


def resplog(primary: PrivatePostgres, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RESPLOG, *args, "--database-url", primary.url()],
        capture_output=True,
        text=True,
        check=True,
    )


def test_the_admin_listing_and_verify_read_on_the_standby(pair: Pair) -> None:
    ids = created(pair.server, 3)
    for rid in ids:
        until_replayed(pair.standby, rid)
    on_standby = ran_on(pair.standby, _RESPONSES)
    on_primary = ran_on(pair.primary, _RESPONSES)
    replica = ("--replica-database-url", pair.standby.url())
    listed = resplog(pair.primary, "responses", "list", "--json", "--limit", "3", *replica)
    assert {row["id"] for row in json.loads(listed.stdout)["data"]} == set(ids)
    assert ran_on(pair.standby, _RESPONSES) > on_standby
    assert ran_on(pair.primary, _RESPONSES) == on_primary
    # verify --all's scans (the rows of every response, their events) on the standby too
    scanned = ran_on(pair.standby, "%FROM responses%")
    checked = resplog(pair.primary, "verify", "--all", "--no-progress", *replica)
    assert "ok" in checked.stdout.lower(), checked.stdout
    assert ran_on(pair.standby, "%FROM responses%") > scanned


def test_export_with_a_lagging_standby_misses_nothing(pair: Pair) -> None:
    value(pair.standby, "SELECT pg_wal_replay_pause()")
    try:
        (rid,) = created(pair.server, 1)
        lines, said = export(pair.primary, "--replica-database-url", pair.standby.url())
    finally:
        value(pair.standby, "SELECT pg_wal_replay_resume()")
    assert any(rid in line for line in lines)
    assert "lags:" in said


def test_export_with_a_primary_for_replica_reads_on_the_primary(pair: Pair) -> None:
    alone, _ = export(pair.primary)
    lines, said = export(pair.primary, "--replica-database-url", pair.primary.url())
    assert lines == alone
    assert "names a primary (not in recovery)" in said


async def test_a_replica_that_is_a_primary_is_refused_and_the_primary_serves(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    (rid,) = created(pair.server, 1)
    store = await open_store(pair.primary.url(), replica_url=pair.primary.url(), listen=False)
    try:
        assert "names a primary (not in recovery)" in caplog.text
        events = await store.read_events(rid)
        assert type(events[-1]).__name__ == "ResponseCompleted"
        page = await store.list(limit=5)
        assert rid in [row.id for row in page.rows]
        assert isinstance(store, PostgresEventStore) and store.replica is not None
        assert store.replica.reads == 0
        assert store.replica.listings == 0
    finally:
        await store.close()


async def test_a_replica_that_does_not_answer_is_said_without_its_password(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = f"postgresql+asyncpg://postgres:s3cret@127.0.0.1:{free_port()}/postgres"
    store = await open_store(pair.primary.url(), replica_url=nowhere, listen=False)
    try:
        page = await store.list(limit=5)
        assert page.rows
        assert isinstance(store, PostgresEventStore) and store.replica is not None
        assert store.replica.listings == 0
        assert "cannot be read" in caplog.text
        assert "postgres:***@127.0.0.1" in caplog.text
        assert "s3cret" not in caplog.text
    finally:
        await store.close()


def test_a_standby_that_is_down_leaves_the_reads_to_the_primary(pair: Pair) -> None:
    ids = created(pair.server, 2)
    cid = conversation_with(pair.server, ["kept", "too"])
    for rid in ids:
        until_replayed(pair.standby, rid)
    expected = {rid: replay(pair.server, rid) for rid in ids}
    responses = listed_ids(pair.server, "responses?limit=5")
    exported, _ = export(pair.primary)
    pair.standby.kill()
    # The primary waits for its synchronous standby at each commit: nothing is created
    # now, but every stored response replays, and every listing lists.
    for rid in ids:
        assert replay(pair.server, rid) == expected[rid]
    assert items_listed(pair.server, cid) == ["kept", "too"]
    assert listed_ids(pair.server, "responses?limit=5") == responses
    log = pair.server.log_text()
    assert "cannot be read" in log
    assert "its reads (replays, listings) go to the primary" in log
    lines, said = export(pair.primary, "--replica-database-url", pair.standby.url())
    assert lines == exported
    assert "cannot be read" in said
