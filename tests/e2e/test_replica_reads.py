"""Replays from a hot standby (`--replica-database-url`) on a private primary and its
streaming standby: the events of ended responses are read on the standby (its own table
statistics count the reads), and so are the `input_items` of an ended response (the request
its first event carries); a response the standby has not replayed yet is read on the
primary (the standby's replay paused), and a standby that is down, or a "replica" that is a
primary, leaves every replay served by the primary, with a clear line in the log."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
import httpx
import openai
import pytest

from adapters.store.factory import open_store
from adapters.store.postgres import PostgresEventStore
from adapters.store.replica import RECHECK
from tests.e2e.cluster import PrivatePostgres, replicated_postgres
from tests.e2e.conftest import Server, start_server, stop_server

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
    with replicated_postgres() as (primary, standby):
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
    return [item.content[0].text for item in listed]  # type: ignore[union-attr]


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


async def test_a_replica_that_is_a_primary_is_refused_and_the_primary_serves(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    (rid,) = created(pair.server, 1)
    store = await open_store(pair.primary.url(), replica_url=pair.primary.url(), listen=False)
    try:
        assert "names a primary (not in recovery)" in caplog.text
        events = await store.read_events(rid)
        assert type(events[-1]).__name__ == "ResponseCompleted"
        assert isinstance(store, PostgresEventStore) and store.replica is not None
        assert store.replica.reads == 0
    finally:
        await store.close()


def test_a_standby_that_is_down_leaves_the_reads_to_the_primary(pair: Pair) -> None:
    ids = created(pair.server, 2)
    for rid in ids:
        until_replayed(pair.standby, rid)
    expected = {rid: replay(pair.server, rid) for rid in ids}
    pair.standby.kill()
    # The primary waits for its synchronous standby at each commit: nothing is created
    # now, but every stored response replays.
    for rid in ids:
        assert replay(pair.server, rid) == expected[rid]
    assert "cannot be read" in pair.server.log_text()
    assert "replays go to the primary" in pair.server.log_text()
