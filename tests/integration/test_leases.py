"""Leases on both stores: who may append (fencing), claiming queued work without doubles,
taking over expired leases, renewal in one pass, and the doorbells across processes."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from adapters.engines.scripted import ScriptedEngine
from adapters.store.factory import open_store
from adapters.store.leases import SqlLeases
from adapters.store.migrate import upgrade
from adapters.store.sql import SqlEventStore
from adapters.store.tables import responses as t_responses
from adapters.store.writer import GroupCommitWriter
from domain.builder.emit import emit
from domain.commands import start
from domain.errors import Conflict
from domain.events import ResponseCancelled
from domain.fold.replay import replay
from domain.generation import TextDelta
from domain.reasons import CancelReason
from domain.state import ResponseState
from service.prompts.build import build_prompt
from service.work.leases import LeaseKeeper
from service.work.runner import Runner
from tests.integration import streams
from tests.integration.test_store_contract import write

Opener = Callable[..., Awaitable[SqlEventStore]]
SHORT = 0.3  # a lease lifetime the tests can wait out (where none checks it is live first)


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def lease_db(
    request: pytest.FixtureRequest,
    fresh_pg: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """A database of this module's own: claims take the oldest queued work of all."""
    if request.param == "postgres":
        url = fresh_pg()
    else:
        url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('leases') / 'leases.db'}"
    upgrade(url)
    return url


@pytest.fixture
async def proc(lease_db: str) -> AsyncIterator[Opener]:
    """Opens a store as a process named `owner` would; all are closed at teardown."""
    opened: list[SqlEventStore] = []

    async def open_(owner: str, ttl: float = 15.0, **settings: object) -> SqlEventStore:
        s = await open_store(lease_db, lease_owner=owner, lease_ttl=ttl, **settings)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        await s.close()


async def empty_queue(proc: Opener) -> None:
    """Earlier tests' queued responses: claimed for good, out of this test's way."""
    await SqlLeases(await proc("sink", ttl=3600)).claim(100_000)


async def lease_of(store: SqlEventStore, rid: str) -> tuple[str | None, float | None]:
    c = t_responses.c
    async with store.engine.connect() as conn:
        row = (
            await conn.execute(sa.select(c.lease_owner, c.lease_expires_at).where(c.id == rid))
        ).one()
    return row.lease_owner, row.lease_expires_at


async def lapse(store: SqlEventStore, rid: str) -> None:
    """End `rid`'s lease now, as if its lifetime had passed, whichever clock the store keeps
    leases by. A test that checks a lease is live before it lapses uses this rather than a
    short lifetime: a slow machine could outlast that while the test still checks."""
    c = t_responses.c
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.update(t_responses)
            .where(c.id == rid)
            .values(lease_expires_at=c.lease_expires_at - 3600)
        )


async def open_stream(store: SqlEventStore, *, background: bool = False) -> ResponseState:
    appends = streams.script(deltas=1, end="open", background=background)
    await write(store, appends)
    return replay(streams.events_of(appends))


async def queued(store: SqlEventStore) -> str:
    appends = streams.script(deltas=0, end="open", background=True)[:1]
    return await write(store, appends)


async def test_a_stream_created_in_progress_is_leased_to_its_creator(proc: Opener) -> None:
    a = await proc("proc-a")
    state = await open_stream(a)
    owner, expires = await lease_of(a, state.response.id)  # type: ignore[union-attr]
    assert owner == "proc-a"
    assert expires is not None and expires > time.time()
    assert await lease_of(a, await queued(a)) == (None, None)


async def test_a_queued_stream_created_with_lease_is_leased_to_its_creator_and_not_claimed(
    proc: Opener,
) -> None:
    """A background response its creator will run (`append(..., lease=True)`): leased by
    the insert, so no other process's worker can claim it until that lease lapses."""
    await empty_queue(proc)
    a = await proc("proc-a")
    b = SqlLeases(await proc("proc-b"))
    [(_, created)] = streams.script(deltas=0, end="open", background=True)[:1]
    rid = created[0].response.id  # type: ignore[attr-defined]
    async with GroupCommitWriter(a) as writer:
        await writer.append(rid, -1, created, lease=True)
    assert (await a.read_events(rid))[-1].response.status == "queued"  # type: ignore[attr-defined]
    owner, expires = await lease_of(a, rid)
    assert owner == "proc-a" and expires is not None and expires > time.time()
    assert await b.claim(10) == []
    assert await b.acquire(rid) is None
    await lapse(a, rid)  # its creator died before running it: anyone may now
    assert [c.response_id for c in await b.claim(10)] == [rid]


async def test_lease_on_an_append_that_creates_and_ends_the_stream_leaves_no_lease(
    proc: Opener,
) -> None:
    a = await proc("proc-a")
    appends = streams.script(deltas=1, background=True)
    rid = appends[0][1][0].response.id  # type: ignore[attr-defined]
    await a.append(rid, -1, streams.events_of(appends), lease=True)
    assert await lease_of(a, rid) == (None, None)


async def test_a_terminal_event_releases_the_lease(proc: Opener) -> None:
    a = await proc("proc-a")
    rid = await write(a, streams.script(deltas=2))
    assert await lease_of(a, rid) == (None, None)


async def test_a_writer_whose_lease_was_taken_over_cannot_append_even_at_the_right_version(
    proc: Opener,
) -> None:
    a = await proc("proc-a")
    b = await proc("proc-b")
    state = await open_stream(a)
    rid = state.response.id  # type: ignore[union-attr]
    assert await SqlLeases(b).acquire(rid) is None  # a's lease is live
    await lapse(a, rid)
    assert await SqlLeases(b).acquire(rid) is not None
    late = emit(state, TextDelta(text="late")).events
    async with GroupCommitWriter(a) as writer:
        with pytest.raises(Conflict):
            await writer.append(rid, state.version, late)
    assert len(await a.read(rid)) == state.version + 1
    mine = emit(state, TextDelta(text="mine")).events
    async with GroupCommitWriter(b) as writer:
        await writer.append(rid, state.version, mine)
    assert (await b.read_events(rid))[-len(mine) :] == mine


async def test_a_fenced_stream_fails_alone_in_its_flush(proc: Opener) -> None:
    """One flush, two streams: the one leased elsewhere conflicts, the other commits."""
    a = await proc("proc-a")
    b = await proc("proc-b")
    mine, theirs = await open_stream(a), await open_stream(b)
    async with GroupCommitWriter(a, flush_interval=0.05) as writer:
        results = await asyncio.gather(
            *(
                writer.append(s.response.id, s.version, emit(s, TextDelta(text="x")).events)  # type: ignore[union-attr]
                for s in (mine, theirs)
            ),
            return_exceptions=True,
        )
    assert results[0] is None
    assert isinstance(results[1], Conflict)


async def test_an_append_by_the_lease_owner_extends_its_lease(proc: Opener) -> None:
    """Every append of the owner extends its lease, deltas and lifecycle events alike. On
    PostgreSQL a renewal skips the rows a flush holds locked, and a busy writer (one flush
    after another, each waiting for a synchronous standby) holds them most of the time:
    without this a stream streaming at full speed could miss its renewals until its lease
    lapsed, and another process's sweeper ended it `failed` while it still ran."""
    a = await proc("proc-a", ttl=600)
    sweeper = SqlLeases(await proc("sweeper"))
    rid = await queued(a)
    assert await SqlLeases(a).acquire(rid) is not None
    state = replay(await a.read_events(rid))
    async with GroupCommitWriter(a) as writer:
        for step in (start, lambda s: emit(s, TextDelta(text="more"))):
            await lapse(a, rid)  # no renewal found the row free for a whole lease
            d = step(state)
            await writer.append(rid, state.version, d.events)
            state = d.state
            owner, expires = await lease_of(a, rid)
            assert owner == "proc-a"
            assert expires == pytest.approx(time.time() + 600, abs=60)
            assert rid not in await sweeper.expired(1000)


async def test_concurrent_claimers_never_get_the_same_response(proc: Opener) -> None:
    await empty_queue(proc)
    creator = await proc("creator")
    ids = {await queued(creator) for _ in range(12)}
    claimers = [SqlLeases(await proc(f"w{i}")) for i in range(4)]
    got: list[str] = []
    for _ in range(2):
        claims = await asyncio.gather(*(c.claim(2) for c in claimers))
        got += [claim.response_id for batch in claims for claim in batch]
    assert sorted(got) == sorted(ids)


async def test_a_claim_takes_queued_work_oldest_first_and_not_twice(proc: Opener) -> None:
    await empty_queue(proc)
    creator = await proc("creator")
    first, second = await queued(creator), await queued(creator)
    worker = SqlLeases(await proc("worker"))
    assert [c.response_id for c in await worker.claim(1)] == [first]
    assert [c.response_id for c in await worker.claim(5)] == [second]
    assert await worker.claim(5) == []


async def test_an_expired_claim_is_claimable_again(proc: Opener) -> None:
    await empty_queue(proc)
    creator = await proc("creator")
    rid = await queued(creator)
    dead = SqlLeases(await proc("dead"))
    assert [c.response_id for c in await dead.claim(1)] == [rid]
    other = SqlLeases(await proc("other"))
    assert await other.claim(1) == []
    await lapse(creator, rid)
    assert [c.response_id for c in await other.claim(1)] == [rid]


async def test_a_claim_reports_a_cancel_requested_before_it(proc: Opener) -> None:
    await empty_queue(proc)
    creator = await proc("creator")
    rid = await queued(creator)
    await creator.request_cancel(rid)
    claims = await SqlLeases(await proc("worker")).claim(1)
    assert [(c.response_id, c.cancel) for c in claims] == [(rid, CancelReason.CANCELLED_BY_USER)]


async def test_acquire_refuses_a_live_lease_and_takes_an_expired_or_own_one(
    proc: Opener,
) -> None:
    a = await proc("proc-a")
    rid = (await open_stream(a)).response.id  # type: ignore[union-attr]
    assert await SqlLeases(a).acquire(rid) is not None  # its own
    b = SqlLeases(await proc("proc-b"))
    assert await b.acquire(rid) is None
    await lapse(a, rid)
    assert await b.acquire(rid) is not None
    assert await lease_of(a, rid) == ("proc-b", pytest.approx(time.time() + 15, abs=5))
    done = await write(a, streams.script(deltas=1))
    assert await b.acquire(done) is None  # ended: nothing to lease


async def test_two_takers_of_one_expired_lease_exactly_one_wins(proc: Opener) -> None:
    dead = await proc("dead", ttl=SHORT)
    rid = (await open_stream(dead)).response.id  # type: ignore[union-attr]
    await asyncio.sleep(SHORT + 0.2)
    takers = [SqlLeases(await proc(f"sweeper{i}")) for i in range(4)]
    won = await asyncio.gather(*(t.acquire(rid) for t in takers))
    assert sum(w is not None for w in won) == 1


async def test_renew_extends_held_leases_and_reports_lost_and_cancelled(proc: Opener) -> None:
    a = await proc("proc-a", ttl=SHORT)
    kept = (await open_stream(a)).response.id  # type: ignore[union-attr]
    lost = (await open_stream(a)).response.id  # type: ignore[union-attr]
    await asyncio.sleep(SHORT + 0.2)
    assert await SqlLeases(await proc("proc-b")).acquire(lost) is not None
    await a.request_cancel(kept)
    before = await lease_of(a, kept)
    renewal = await SqlLeases(a).renew([kept, lost])
    assert renewal.held == {kept}
    assert renewal.cancel == {kept: "cancelled_by_user"}
    after = await lease_of(a, kept)
    assert after[1] is not None and before[1] is not None and after[1] > before[1]


async def test_expired_lists_responses_in_progress_whose_lease_lapsed(proc: Opener) -> None:
    dead = await proc("dead", ttl=SHORT)
    gone = (await open_stream(dead)).response.id  # type: ignore[union-attr]
    claimed = await queued(dead)
    await SqlLeases(dead).acquire(claimed)
    live = (await open_stream(await proc("live"))).response.id  # type: ignore[union-attr]
    await asyncio.sleep(SHORT + 0.2)
    found = await SqlLeases(await proc("sweeper")).expired(1000)
    assert gone in found
    assert live not in found
    assert claimed not in found  # queued: claimable, not lost


async def test_a_cancel_request_rings_only_the_lease_owner(proc: Opener) -> None:
    heard: dict[str, list[tuple[str, str]]] = {"proc-a": [], "proc-b": []}
    rang = asyncio.Event()

    def bell(name: str) -> Callable[[list[tuple[str, str]] | None], None]:
        def ring(ids: list[tuple[str, str]] | None) -> None:
            heard[name].extend(ids or [])
            rang.set()

        return ring

    a, b = await proc("proc-a"), await proc("proc-b")
    SqlLeases(a).listen(lambda: None, bell("proc-a"))
    SqlLeases(b).listen(lambda: None, bell("proc-b"))
    rid = (await open_stream(a)).response.id  # type: ignore[union-attr]
    rang.clear()  # (a reconnect rings with None)
    heard["proc-a"].clear()
    if a.dialect == "postgresql":  # another process asks; the owner hears it via NOTIFY
        assert await b.request_cancel(rid, CancelReason.DELETED)
    else:  # the embedded store: only the process that asked can hear it
        assert await a.request_cancel(rid, CancelReason.DELETED)
    async with asyncio.timeout(10):
        await rang.wait()
    assert heard["proc-a"] == [(rid, "deleted")]
    assert heard["proc-b"] == []


async def test_ring_work_wakes_the_workers_of_other_processes(pg_url: str) -> None:
    rung: list[str] = []
    b_rang = asyncio.Event()
    a = await open_store(pg_url, lease_owner="proc-a")
    b = await open_store(pg_url, lease_owner="proc-b")
    try:
        SqlLeases(b).listen(b_rang.set, lambda ids: None)
        SqlLeases(a).listen(lambda: rung.append("a"), lambda ids: None)
        b_rang.clear()
        rung.clear()
        await SqlLeases(a).ring_work()
        async with asyncio.timeout(10):
            await b_rang.wait()
        assert rung == ["a"]  # in-process; its own notification does not ring again
    finally:
        await a.close()
        await b.close()


@contextmanager
def statements(store: SqlEventStore) -> Iterator[list[str]]:
    """The SQL statements the store sends meanwhile."""
    sent: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        sent.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    pools = [getattr(store, name) for name in ("raw", "raw_commit") if hasattr(store, name)]
    try:
        for pool in pools:  # PostgreSQL's hot statements skip SQLAlchemy (rawpool.py)
            pool.connection = _logging(pool.connection, sent)
        yield sent
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", record)
        for pool in pools:
            del pool.connection


def _logging(
    connection: Callable[[], AbstractAsyncContextManager[Any]], sent: list[str]
) -> Callable[[], AbstractAsyncContextManager[Any]]:
    """A raw pool's `connection()` whose statements are also recorded in `sent`."""

    def record(query: Any) -> None:
        sent.append(query.query)

    @asynccontextmanager
    async def logged() -> AsyncIterator[Any]:
        async with connection() as conn:
            conn.add_query_logger(record)
            try:
                yield conn
            finally:
                conn.remove_query_logger(record)

    return logged


def writes(sent: list[str]) -> list[str]:
    return [s.split()[0] for s in sent if s.split()[0] in ("UPDATE", "INSERT", "WITH")]


async def test_one_renewal_pass_is_one_update_for_every_lease_of_the_process(
    proc: Opener,
) -> None:
    a = await proc("proc-a")
    ids = [(await open_stream(a)).response.id for _ in range(30)]  # type: ignore[union-attr]
    with statements(a) as sent:
        renewal = await SqlLeases(a).renew(ids)
    assert renewal.held == set(ids)
    assert writes(sent) == ["UPDATE"]


async def test_renewal_leaves_nothing_for_the_cyclic_collector(proc: Opener) -> None:
    """Renewal runs once a second for as long as a process holds leases: what it allocates
    must be freed by reference counts, not wait for a collection that a steady load puts
    off for minutes (adapters/store/leases.py)."""
    a = await proc("proc-a")
    leases = SqlLeases(a)
    ids = [(await open_stream(a)).response.id for _ in range(30)]  # type: ignore[union-attr]
    await leases.renew(ids)  # the first pass fills SQLAlchemy's and the pool's caches
    gc.collect()
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage
    try:
        for _ in range(20):
            assert (await leases.renew(ids)).held == set(ids)
        gc.collect()
        left = [type(thing).__module__ + "." + type(thing).__qualname__ for thing in gc.garbage]
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
    assert len(left) < 20, sorted(set(left))  # not one object a pass


async def test_a_flush_of_many_fenced_streams_is_still_one_statement_per_kind(
    proc: Opener,
) -> None:
    """The lease check rides in the guard: no statement per stream, leased or not (and on
    PostgreSQL the whole flush is one statement, `commit_one`)."""
    a = await proc("proc-a")
    states = [await open_stream(a) for _ in range(20)]
    async with GroupCommitWriter(a, flush_interval=0.05) as writer:
        with statements(a) as sent:
            await asyncio.gather(
                *(
                    writer.append(
                        s.response.id,  # type: ignore[union-attr]
                        s.version,
                        emit(s, TextDelta(text="x")).events,
                    )
                    for s in states
                )
            )
    assert writer.flushes == 1
    assert writes(sent) == (["WITH"] if a.dialect == "postgresql" else ["UPDATE", "INSERT"])


async def test_a_delete_whose_doorbell_is_lost_is_found_by_the_owners_renewal(
    proc: Opener,
) -> None:
    """Another process deletes a response this one generates, and its cancel doorbell never
    arrives (no listener here; SQLite has none across processes): the next renewal pass
    reads the flag and its reason from the row, and the log records `deleted`, not the
    `cancelled_by_user` that the flag alone used to be taken for."""
    owner = await proc("proc-a", listen=False)
    other = await proc("proc-b")
    state = await open_stream(owner)
    assert state.response is not None and state.facts is not None
    rid = state.response.id
    async with GroupCommitWriter(owner) as writer:
        runner = Runner(writer, ScriptedEngine(delay_s=0.01, tokens=10_000))
        keeper = LeaseKeeper(SqlLeases(owner), runner, slots=1, renew_every=3600)
        gen = runner.launch(state, build_prompt(state.response, state.facts.input, []))
        assert await other.request_cancel(rid, CancelReason.DELETED)
        await asyncio.sleep(0.05)
        assert not gen.task.done()  # type: ignore[union-attr]  (nobody told it yet)
        await keeper.renew_once()
        async with asyncio.timeout(10):
            await gen.wait()
    last = (await owner.read_events(rid))[-1]
    assert isinstance(last, ResponseCancelled) and last.facts is not None
    assert last.facts.reason == CancelReason.DELETED
    row = await other.get(rid)
    assert row is not None and row.cancel_reason == CancelReason.DELETED


async def test_the_first_cancel_reason_is_kept(proc: Opener) -> None:
    """As the runner keeps the first reason it is given: a doorbell and a later renewal
    pass agree on why a response stopped."""
    a = await proc("proc-a")
    rid = (await open_stream(a)).response.id  # type: ignore[union-attr]
    assert await a.request_cancel(rid, CancelReason.CANCELLED_BY_USER)
    first = await a.get(rid)
    assert await a.request_cancel(rid, CancelReason.DELETED)
    again = await a.get(rid)
    assert first is not None and again is not None
    assert again.cancel_reason == CancelReason.CANCELLED_BY_USER
    assert again.cancel_requested_at == first.cancel_requested_at
    renewal = await SqlLeases(a).renew([rid])
    assert renewal.cancel == {rid: CancelReason.CANCELLED_BY_USER}
