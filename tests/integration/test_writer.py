"""The group-commit writer on both stores: durability, conflicts and their isolation,
backpressure, retries."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy.exc as sa_exc

from adapters.store.factory import open_store
from adapters.store.sql import SqlEventStore
from adapters.store.transient import Unreached
from adapters.store.writer import GroupCommitWriter
from domain.builder.emit import emit
from domain.errors import Conflict, StoreUnavailable
from domain.events import encode
from domain.fold.replay import replay
from domain.generation import TextDelta
from tests.integration import streams
from tests.integration.test_store_contract import _insert_raw, _renumber, write


@pytest.fixture
async def other(store_url: str) -> AsyncIterator[SqlEventStore]:
    """A second store on the same database (another process, as far as it can tell)."""
    s = await open_store(store_url, listen=False)
    yield s
    await s.close()


def rid_of(appends: list[streams.Append]) -> str:
    return appends[0][1][0].response.id  # type: ignore[attr-defined]


async def queue_all(
    writer: GroupCommitWriter,
    appends: list[streams.Append],
    *,
    durable: bool = False,
    rid: str | None = None,
) -> None:
    rid = rid or rid_of(appends)
    for expected, batch in appends:
        await writer.append(rid, expected, batch, durable=durable)


async def test_a_durable_append_returns_once_committed(
    store: SqlEventStore, other: SqlEventStore
) -> None:
    appends = streams.script(deltas=3)
    async with GroupCommitWriter(store) as writer:
        await queue_all(writer, appends, durable=True)
        assert await other.read_events(rid_of(appends)) == streams.events_of(appends)


async def test_a_durable_append_waits_for_the_flush(store: SqlEventStore) -> None:
    appends = streams.script(deltas=1)
    writer = GroupCommitWriter(store)
    task = asyncio.create_task(queue_all(writer, appends[:1], durable=True))
    await asyncio.sleep(0.05)
    assert not task.done()
    assert await store.read(rid_of(appends)) == []
    await writer.start()
    async with asyncio.timeout(20):
        await task
    assert len(await store.read(rid_of(appends))) == len(appends[0][1])
    await writer.close()


async def test_a_non_durable_append_returns_once_queued_and_commits_later(
    store: SqlEventStore,
) -> None:
    appends = streams.script(deltas=3)
    writer = GroupCommitWriter(store)
    await queue_all(writer, appends, durable=False)
    assert await store.read(rid_of(appends)) == []
    await writer.start()
    await writer.flush()
    assert await store.read_events(rid_of(appends)) == streams.events_of(appends)
    await writer.close()


async def test_many_streams_commit_in_one_flush(store: SqlEventStore) -> None:
    scripts = [streams.script(deltas=2) for _ in range(20)]
    writer = GroupCommitWriter(store)
    for appends in scripts:
        await queue_all(writer, appends)
    await writer.start()
    await writer.flush()
    assert writer.flushes == 1
    for appends in scripts:
        assert await store.read_events(rid_of(appends)) == streams.events_of(appends)
    await writer.close()


async def test_a_large_backlog_is_split_into_bounded_flushes(store: SqlEventStore) -> None:
    scripts = [streams.script(deltas=10) for _ in range(10)]
    writer = GroupCommitWriter(store, max_batch_events=25)
    for appends in scripts:
        await queue_all(writer, appends)
    await writer.start()
    await writer.flush()
    total = sum(len(streams.events_of(a)) for a in scripts)
    assert writer.flushes >= total // 25
    for appends in scripts:
        assert await store.read_events(rid_of(appends)) == streams.events_of(appends)
    await writer.close()


async def test_one_conflicting_stream_does_not_sink_the_others_in_its_flush(
    store: SqlEventStore,
) -> None:
    """The bad stream's waiters get `Conflict` and it is unchanged; the rest commit."""
    good = [streams.script(deltas=2) for _ in range(3)]
    bad_appends = streams.script(deltas=3, end="open")
    bad = await write(store, bad_appends)
    bad_state = replay(streams.events_of(bad_appends))
    stale = replay(streams.events_of(bad_appends[:-1]))  # one append behind
    stale_batch = emit(stale, TextDelta(text="late")).events

    writer = GroupCommitWriter(store)
    await queue_all(writer, good[0])
    loser = asyncio.create_task(writer.append(bad, stale.version, stale_batch))
    await asyncio.sleep(0)
    await queue_all(writer, good[1])
    await queue_all(writer, good[2], durable=False)
    await writer.start()
    with pytest.raises(Conflict):
        async with asyncio.timeout(20):
            await loser
    await writer.flush()
    assert writer.flushes == 1
    for appends in good:
        assert await store.read_events(rid_of(appends)) == streams.events_of(appends)
    assert await store.read_events(bad) == streams.events_of(bad_appends)
    row = await store.get(bad)
    assert row is not None
    assert row.version == bad_state.version
    await writer.close()


async def test_a_constraint_violation_is_isolated_to_its_stream(store: SqlEventStore) -> None:
    """The guard passes but a stray row collides: that stream alone fails, by savepoint."""
    appends = streams.script(deltas=1, end="open")
    rid = await write(store, appends)
    state = replay(streams.events_of(appends))
    batch = emit(state, TextDelta(text="x")).events
    await _insert_raw(store, rid, state.version + 1, "response.output_text.delta", "{}")
    good = [streams.script(deltas=2) for _ in range(2)]
    writer = GroupCommitWriter(store)
    await queue_all(writer, good[0])
    loser = asyncio.create_task(writer.append(rid, state.version, batch))
    await asyncio.sleep(0)
    await queue_all(writer, good[1])
    await writer.start()
    with pytest.raises(Conflict):
        async with asyncio.timeout(20):
            await loser
    await writer.flush()
    for a in good:
        assert await store.read_events(rid_of(a)) == streams.events_of(a)
    row = await store.get(rid)
    assert row is not None
    assert row.version == state.version
    await writer.close()


async def test_appends_following_a_failed_one_fail_too_until_the_caller_reloads(
    store: SqlEventStore, other: SqlEventStore
) -> None:
    appends = streams.script(deltas=2, end="open")
    rid = await write(store, appends)
    state = replay(streams.events_of(appends))
    # Another process moves the stream on; our writer still believes in `state`.
    theirs = emit(state, TextDelta(text="theirs"))
    await other.append(rid, state.version, theirs.events)

    async with GroupCommitWriter(store) as writer:
        ours = emit(state, TextDelta(text="ours"))
        await writer.append(rid, state.version, ours.events, durable=False)
        after = emit(ours.state, TextDelta(text="more"))
        with pytest.raises(Conflict):
            await writer.append(rid, ours.state.version, after.events)  # failed with `ours`
        then = emit(after.state, TextDelta(text="then"))
        with pytest.raises(Conflict):
            await writer.append(rid, after.state.version, then.events)  # the lost chain
        # Reloaded from the log, the caller continues from the real version.
        fresh = replay(await store.read_events(rid))
        final = emit(fresh, TextDelta(text="again"))
        await writer.append(rid, fresh.version, final.events)
    got = await store.read_events(rid)
    assert got == streams.events_of(appends) + theirs.events + final.events


async def test_an_append_that_does_not_follow_the_queue_conflicts_at_once(
    store: SqlEventStore,
) -> None:
    appends = streams.script(deltas=1)
    writer = GroupCommitWriter(store)
    await writer.append(rid_of(appends), -1, appends[0][1], durable=False)
    with pytest.raises(Conflict):
        await writer.append(rid_of(appends), -1, appends[0][1], durable=False)
    skipped = [_renumber(e, 8 + i) for i, e in enumerate(appends[1][1])]
    with pytest.raises(Conflict):
        await writer.append(rid_of(appends), 7, skipped, durable=False)  # type: ignore[arg-type]
    await writer.start()
    await writer.flush()
    assert await store.read_events(rid_of(appends)) == appends[0][1]
    await writer.close()


async def test_a_full_stream_queue_makes_non_durable_appends_wait(store: SqlEventStore) -> None:
    appends = streams.script(deltas=12)
    bound = sum(len(batch) for _, batch in appends[:4])
    writer = GroupCommitWriter(store, max_pending_per_stream=bound)
    await queue_all(writer, appends[:4])  # exactly at the bound
    blocked = asyncio.create_task(queue_all(writer, appends[4:], rid=rid_of(appends)))
    await asyncio.sleep(0.05)
    assert not blocked.done()
    await writer.start()
    async with asyncio.timeout(20):
        await blocked
    await writer.flush()
    assert await store.read_events(rid_of(appends)) == streams.events_of(appends)
    await writer.close()


async def test_an_append_cancelled_while_it_waits_is_still_queued(store: SqlEventStore) -> None:
    """The runner advances its state before awaiting an append and is cancelled through
    `Task.cancel()`; that is only safe if the events are queued before the first await."""
    appends = streams.script(deltas=12)
    rid = rid_of(appends)
    bound = sum(len(batch) for _, batch in appends[:4])
    writer = GroupCommitWriter(store, max_pending_per_stream=bound)
    await queue_all(writer, appends[:4])
    expected, batch = appends[4]
    waiting = asyncio.create_task(writer.append(rid, expected, batch, durable=True))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await writer.start()
    await queue_all(writer, appends[5:], rid=rid)
    await writer.flush()
    assert await store.read_events(rid) == streams.events_of(appends)
    await writer.close()


async def test_a_transient_error_is_retried_without_duplicates(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt commits but "loses" its acknowledgement; the retry sees its own
    rows (byte for byte) and reports success, not a conflict, and nothing is doubled."""
    real = store.commit
    calls: list[bool] = []

    async def flaky(batches: object, *, recheck: bool = False) -> object:
        calls.append(recheck)
        result = await real(batches, recheck=recheck)  # type: ignore[arg-type]
        if len(calls) == 1:
            raise sa_exc.OperationalError("COMMIT", {}, ConnectionResetError("lost"))
        return result

    monkeypatch.setattr(store, "commit", flaky)
    appends = streams.script(deltas=2)
    async with GroupCommitWriter(store) as writer:
        await queue_all(writer, appends, durable=True)
    assert calls[:2] == [False, True]
    assert await store.read_events(rid_of(appends)) == streams.events_of(appends)


async def test_an_error_that_outlasts_the_retries_fails_the_waiters(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def down(batches: object, *, recheck: bool = False) -> object:
        raise sa_exc.OperationalError("BEGIN", {}, ConnectionRefusedError("down"))

    monkeypatch.setattr(store, "commit", down)
    appends = streams.script(deltas=1)
    async with GroupCommitWriter(store, retry_for=0.1) as writer:
        with pytest.raises(StoreUnavailable) as info:
            await writer.append(rid_of(appends), -1, appends[0][1])
    assert isinstance(info.value.__cause__, sa_exc.OperationalError)  # the driver's, kept


async def _timed(writer: GroupCommitWriter, rid: str, append: streams.Append) -> float:
    """Seconds from queueing `append` (durably) to its commit."""
    began = time.monotonic()
    await writer.append(rid, *append)
    return time.monotonic() - began


async def test_lone_streams_commit_their_start_and_end_without_waiting_the_interval(
    store: SqlEventStore, other: SqlEventStore
) -> None:
    # Each appends its creation, its first output and its end, after the flush before: an
    # interval's wait at any of them (after the first flush) would take half a minute.
    scripts = [streams.script(deltas=1) for _ in range(3)]
    async with GroupCommitWriter(store, flush_interval=30.0) as writer:
        async with asyncio.timeout(10):
            for appends in scripts:
                await queue_all(writer, appends, durable=True)
        assert writer.flushes == 9
    for appends in scripts:
        assert await other.read_events(rid_of(appends)) == streams.events_of(appends)


async def test_a_lone_stream_is_paced_by_the_interval_between_its_start_and_end(
    store: SqlEventStore,
) -> None:
    created, first, second, end = streams.script(deltas=2)
    rid = rid_of([created])
    async with GroupCommitWriter(store, flush_interval=1.0) as writer:
        await writer.append(rid, *created)
        took = await _timed(writer, rid, first)
        assert took < 0.8  # the first append after its creation does not wait
        # A fast engine's next tokens wait for the interval (from the start of the flush
        # before, `took` ago at most) and commit together.
        assert await _timed(writer, rid, second) >= 0.95 - took
        assert await _timed(writer, rid, end) < 0.8  # its end does not wait


async def test_a_stream_that_is_not_alone_waits_the_interval(store: SqlEventStore) -> None:
    a, b = streams.script(deltas=1), streams.script(deltas=1)
    async with GroupCommitWriter(store, flush_interval=1.0) as writer:
        took = await _timed(writer, rid_of(a), a[0])  # the first flush: at once (a quiet spell)
        # `a` is still open and was flushed within the interval: `b`'s creation waits for
        # the interval (from the start of `a`'s flush), so that streams together share flushes.
        assert await _timed(writer, rid_of(b), b[0]) >= 0.95 - took


async def test_close_commits_what_is_queued_and_refuses_more(store: SqlEventStore) -> None:
    appends = streams.script(deltas=3)
    writer = GroupCommitWriter(store)
    await writer.start()
    await queue_all(writer, appends)
    await writer.close()
    assert await store.read_events(rid_of(appends)) == streams.events_of(appends)
    with pytest.raises(RuntimeError):
        await writer.append(rid_of(appends), 99, [])


async def test_events_whose_numbers_do_not_follow_the_version_are_refused(
    store: SqlEventStore,
) -> None:
    appends = streams.script(deltas=1)
    async with GroupCommitWriter(store) as writer:
        with pytest.raises(ValueError, match="sequence_number"):
            await writer.append(rid_of(appends), 3, appends[0][1])


async def test_in_process_tailers_get_the_committed_events_of_a_flush(
    store: SqlEventStore,
) -> None:
    appends = streams.script(deltas=20)
    rid = rid_of(appends)

    async def tail() -> list[bytes]:
        return [e.data async for e in store.subscribe(rid)]

    tailers = [asyncio.create_task(tail()) for _ in range(3)]
    await asyncio.sleep(0.05)
    async with GroupCommitWriter(store) as writer:
        await queue_all(writer, appends)
    async with asyncio.timeout(20):
        seen = await asyncio.gather(*tailers)
    wanted = [encode(e).data for e in streams.events_of(appends)]
    assert seen == [wanted] * 3


async def test_two_writers_racing_on_one_stream_commit_exactly_one_append(
    store: SqlEventStore, other: SqlEventStore
) -> None:
    """Two processes' writers, same expected version: one wins, the loser writes nothing."""
    for _ in range(3):
        appends = streams.script(deltas=2, end="open")
        rid = await write(store, appends)
        state = replay(streams.events_of(appends))
        mine = emit(state, TextDelta(text="mine")).events
        theirs = emit(state, TextDelta(text="theirs")).events
        async with GroupCommitWriter(store) as w1, GroupCommitWriter(other) as w2:
            results = await asyncio.gather(
                w1.append(rid, state.version, mine),
                w2.append(rid, state.version, theirs),
                return_exceptions=True,
            )
        assert sorted(type(r).__name__ for r in results) == ["Conflict", "NoneType"]
        winner = mine if results[0] is None else theirs
        assert await store.read_events(rid) == streams.events_of(appends) + winner


async def test_a_new_stream_is_refused_at_once_while_a_flush_rides_out_an_outage(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams already queued keep retrying; a creation gets `StoreUnavailable` (HTTP 503) at
    once instead of waiting out the retries, and is accepted again after the outage."""
    real = store.commit
    outage = asyncio.Event()
    outage.set()

    async def flaky(batches: object, *, recheck: bool = False) -> object:
        if outage.is_set():
            raise sa_exc.OperationalError("BEGIN", {}, ConnectionRefusedError("down"))
        return await real(batches, recheck=recheck)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "commit", flaky)
    queued, later = streams.script(deltas=1), streams.script(deltas=1)
    async with GroupCommitWriter(store, retry_for=30) as writer:
        outage.clear()
        await queue_all(writer, queued[:1], durable=True)  # the stream exists
        outage.set()
        pending = asyncio.create_task(
            queue_all(writer, queued[1:], durable=True, rid=rid_of(queued))
        )
        while not writer.outage:  # noqa: ASYNC110  (the flusher's first failure)
            await asyncio.sleep(0.01)
        with pytest.raises(StoreUnavailable):
            await writer.append(rid_of(later), -1, later[0][1])
        outage.clear()
        await pending
        await queue_all(writer, later, durable=True)
    assert await store.read_events(rid_of(queued)) == streams.events_of(queued)
    assert await store.read_events(rid_of(later)) == streams.events_of(later)


async def test_a_creation_caught_by_an_outage_fails_within_its_short_budget_and_the_next_tries(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an idle server nothing is riding out the outage yet: a creation must still not
    wait out the retry window (30 s here) but fail after its few attempts (0.1 s), and
    after the outage the next creation commits (no restart, no sticky refusal)."""
    real = store.commit
    attempts: list[int] = []
    down = True

    async def flaky(batches: object, *, recheck: bool = False) -> object:
        attempts.append(len(batches))  # type: ignore[arg-type]
        if down:
            raise sa_exc.OperationalError("BEGIN", {}, ConnectionRefusedError("down"))
        return await real(batches, recheck=recheck)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "commit", flaky)
    first, second = streams.script(deltas=1), streams.script(deltas=1)
    async with GroupCommitWriter(store, retry_for=30) as writer:
        for _ in range(2):
            with pytest.raises(StoreUnavailable):
                await asyncio.wait_for(writer.append(rid_of(first), -1, first[0][1]), 5)
        assert 2 <= len(attempts) <= 8  # a few attempts each, not 30 s of them
        down = False
        await queue_all(writer, second, durable=True)
    assert await store.read_events(rid_of(second)) == streams.events_of(second)
    assert await store.read_events(rid_of(first)) == []


async def test_create_queues_a_new_stream_at_once_and_its_future_resolves_at_the_commit(
    store: SqlEventStore,
) -> None:
    """`create` returns with the events queued (what follows may be appended at once, and
    commits after them) and a future that is done only once they are committed."""
    appends = streams.script(deltas=2)
    rid = rid_of(appends)
    writer = GroupCommitWriter(store)
    created = writer.create(rid, appends[0][1])
    assert isinstance(created, asyncio.Future)
    await queue_all(writer, appends[1:], rid=rid)  # follows the queued head
    await asyncio.sleep(0.05)
    assert not created.done()
    assert await store.read(rid) == []
    await writer.start()
    async with asyncio.timeout(20):
        await created
    await writer.flush()
    assert await store.read_events(rid) == streams.events_of(appends)
    await writer.close()


async def test_create_refuses_at_once_what_cannot_be_queued(store: SqlEventStore) -> None:
    """A stream this writer already carries conflicts, and a closed writer refuses, before
    anything is queued: nothing commits of the refused events."""
    appends = streams.script(deltas=1)
    rid = rid_of(appends)
    async with GroupCommitWriter(store) as writer:
        await writer.create(rid, appends[0][1])
        await writer.append(rid, *appends[1], durable=False)  # still queued: carried
        with pytest.raises(Conflict):
            writer.create(rid, appends[0][1])
        with pytest.raises(ValueError, match="first events"):
            writer.create(rid_of(streams.script()), [])
    with pytest.raises(RuntimeError):
        writer.create(rid_of(streams.script()), streams.script()[0][1])
    assert await store.read_events(rid) == streams.events_of(appends[:2])


async def test_the_store_creates_a_stream_as_its_append_does(store: SqlEventStore) -> None:
    """The store is an `EventWriter` too (one commit an append): `create` commits in a task
    of its own, and a stream that exists conflicts there."""
    appends = streams.script(deltas=1)
    rid = rid_of(appends)
    await store.create(rid, appends[0][1])
    assert await store.read_events(rid) == appends[0][1]
    with pytest.raises(Conflict):
        await store.create(rid, appends[0][1])


def shard_down(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch, down: set[str], lose: set[str]
) -> list[tuple[dict[str, tuple[int, int]], bool]]:
    """`store.commit` as on Citus with the shard of the streams in `down` unreachable:
    the others commit, those fail with `Unreached`; a stream in `lose` commits once all
    the same (its acknowledgement lost), then is down like the rest. The calls' streams
    and re-check flags: each call's batches, by stream, as (expected version, last position),
    and its re-check flag."""
    real = store.commit
    calls: list[tuple[dict[str, tuple[int, int]], bool]] = []

    async def sharded(batches: list[Any], *, recheck: bool = False) -> dict[str, BaseException]:
        calls.append(({b.stream_id: (b.expected_version, b.last) for b in batches}, recheck))
        reach = [b for b in batches if b.stream_id not in down or b.stream_id in lose]
        failed = dict(await real(reach, recheck=recheck)) if reach else {}
        lose.difference_update(b.stream_id for b in reach)
        unreached = Unreached("the shard cannot be reached")
        return {**failed, **{b.stream_id: unreached for b in batches if b.stream_id in down}}

    monkeypatch.setattr(store, "commit", sharded)
    return calls


@pytest.mark.parametrize("lost", [False, True], ids=["refused", "acknowledgement-lost"])
async def test_a_stream_on_an_unreachable_shard_does_not_hold_up_the_others(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch, lost: bool
) -> None:
    """Its batch is retried alone while the other streams' appends commit flush after
    flush; once its shard is back it commits, then what queued behind it, in order and
    once (with `lost`, its first attempt did commit: the retry's re-check finds it)."""
    stuck, free = streams.script(deltas=6), streams.script(deltas=6)
    stuck_id, free_id = rid_of(stuck), rid_of(free)
    async with GroupCommitWriter(store, retry_for=30) as writer:
        await queue_all(writer, stuck[:1], durable=True)
        await queue_all(writer, free[:1], durable=True)
        down: set[str] = {stuck_id}
        calls = shard_down(store, monkeypatch, down, {stuck_id} if lost else set())
        waiting = asyncio.create_task(queue_all(writer, stuck[1:2], durable=True, rid=stuck_id))
        await asyncio.sleep(0.05)
        behind = asyncio.create_task(queue_all(writer, stuck[2:], durable=True, rid=stuck_id))
        for append in free[1:]:  # each commits promptly while the other's shard is away
            assert await asyncio.wait_for(_timed(writer, free_id, append), 2) < 1
        assert not waiting.done() and not behind.done()
        tries = [(batches[stuck_id], recheck) for batches, recheck in calls if stuck_id in batches]
        assert len(tries) >= 2 and all(recheck for _, recheck in tries[1:])  # retries re-check
        # The same batch each time: never merged with what queued behind it.
        assert {batch for batch, _ in tries} == {(stuck[1][0], stuck[1][0] + len(stuck[1][1]))}
        down.clear()
        async with asyncio.timeout(10):
            await waiting
            await behind
    assert await store.read_events(stuck_id) == streams.events_of(stuck)
    assert await store.read_events(free_id) == streams.events_of(free)


async def test_a_creation_on_an_unreachable_shard_is_refused_within_its_short_budget(
    store: SqlEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answered 503 after `create_retry_for`, not the whole retry window; the creation of
    a stream on another shard meanwhile commits."""
    doomed, fine = streams.script(deltas=1), streams.script(deltas=1)
    shard_down(store, monkeypatch, {rid_of(doomed)}, set())
    async with GroupCommitWriter(store, retry_for=30) as writer:
        began = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(writer.create(rid_of(doomed), doomed[0][1]), 5)
        assert time.monotonic() - began < 2
        assert not writer.outage  # nothing else is refused
        await queue_all(writer, fine, durable=True)
    assert await store.read_events(rid_of(doomed)) == []
    assert await store.read_events(rid_of(fine)) == streams.events_of(fine)
