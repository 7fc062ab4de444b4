"""The event-store contract, run against PostgreSQL and SQLite alike (`store` fixture)."""

from __future__ import annotations

import asyncio
import secrets
from types import SimpleNamespace

import msgspec
import pytest
import sqlalchemy as sa

from adapters.store.rows import encode_append, merge
from adapters.store.sql import SqlEventStore
from adapters.store.tables import events as t_events
from domain.builder.emit import emit
from domain.errors import Conflict, CorruptEvent, NotFound
from domain.events import TAGS, encode, encode_json
from domain.fold.replay import project, replay
from domain.generation import TextDelta
from tests.integration import streams
from tests.unit.domain_helpers import SCENARIOS


async def write(store: SqlEventStore, appends: list[streams.Append]) -> str:
    rid = appends[0][1][0].response.id  # type: ignore[attr-defined]
    for expected, batch in appends:
        await store.append(rid, expected, batch)
    return rid


async def test_append_then_read_returns_every_event_in_order_with_its_exact_bytes(
    store: SqlEventStore,
) -> None:
    """Read gives back dense positions and, byte for byte, the encoded wire JSON."""
    appends = streams.script(deltas=4)
    rid = await write(store, appends)
    stored = await store.read(rid)
    events = streams.events_of(appends)
    assert [s.position for s in stored] == list(range(len(events)))
    assert [s.data for s in stored] == [encode(e).data for e in events]
    assert [s.facts for s in stored] == [encode(e).facts for e in events]
    assert [s.type for s in stored] == [encode(e).type for e in events]
    assert [s.event() for s in stored] == events


async def test_control_characters_and_a_raw_separator_round_trip_byte_for_byte(
    store: SqlEventStore,
) -> None:
    """PostgreSQL's flush sends the events' text columns joined by chr(31), with chr(30)
    for NULL (adapters/store/postgres.py): text that holds them, escaped as JSON does or
    raw (a row made by hand), comes back as it went, and NULL facts stay NULL."""
    appends = streams.script(deltas=0, end="open")
    rid = await write(store, appends)
    events = streams.events_of(appends)
    escaped = emit(replay(events), TextDelta(text="\x1f\x1e|\x1e")).events
    await store.append(rid, len(events) - 1, escaped)
    events += escaped
    made = encode_append(rid, len(events) - 1, emit(replay(events), TextDelta(text="x")).events)
    rows = [(p, t, d.replace('"x"', '"\x1f\x1e"'), f, at) for p, t, d, f, at in made.rows]
    assert await store.commit([msgspec.structs.replace(made, rows=rows)]) == {}
    stored = await store.read(rid)
    assert [s.data for s in stored[len(events) - len(escaped) : len(events)]] == [
        encode(e).data for e in escaped
    ]
    assert [s.data.decode() for s in stored[len(events) :]] == [r[2] for r in rows]
    assert all(s.facts is None for s in stored[1:])


@pytest.mark.parametrize(
    "kinds",
    [(n, m, c) for n in (0, 1) for m in (0, 1) for c in (0, 1) if n or m or c],
    ids=lambda k: "+".join(n for n, on in zip(("new", "moved", "changed"), k, strict=True) if on),
)
async def test_a_flush_of_any_mix_of_new_moved_and_changed_streams_commits(
    store: SqlEventStore, kinds: tuple[int, int, int]
) -> None:
    """PostgreSQL's flush statement holds only the kinds of streams the flush has
    (adapters/store/postgres.py, `commit_one`): every mix commits every batch."""
    new, moved, changed = kinds
    whole = {
        kind: streams.script(deltas=2)
        for kind, on in (("new", new), ("moved", moved), ("changed", changed))
        if on
    }
    # A new stream's first append; a delta of an open one; an open one's terminal event.
    cut = {"new": 0, "moved": 2, "changed": 3}
    for kind, appends in whole.items():
        if cut[kind]:
            await write(store, appends[: cut[kind]])
    batches = [
        merge([encode_append(appends[0][1][0].response.id, *appends[cut[kind]])])  # type: ignore[attr-defined]
        for kind, appends in whole.items()
    ]
    assert await store.commit(batches) == {}
    for kind, appends in whole.items():
        rid = appends[0][1][0].response.id  # type: ignore[attr-defined]
        events = streams.events_of(appends[: cut[kind] + 1])
        assert await store.read_events(rid) == events
        row = await store.get(rid)
        assert row is not None and row.version == len(events) - 1
        assert row.status == ("completed" if kind == "changed" else "in_progress")


# The times of a stream's appends (new; then a background one's start, changed; a delta,
# moved; the end, changed), whose shortest texts are awkward: 17 significant digits, 16, a
# whole number (the flush sends a row's times as JSON text: adapters/store/postgres.py).
_TIMES = (1_796_591_523.395_535_7, 1_234_567_890.123_456_7, 1_700_000_000.0, 0.1 + 1e9)


@pytest.mark.parametrize(("background", "previous"), [(False, None), (True, "resp_before")])
async def test_a_flush_keeps_every_value_of_its_rows_exactly(
    store: SqlEventStore,
    background: bool,
    previous: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL's flush sends its claims' rows as JSON and the events' positions as an
    array literal, not as parameters of their own types (adapters/store/postgres.py):
    every value comes back as it went, floats to the last bit, for a new, a moved and a
    changed stream, and text that JSON must escape stays as it was. (The store's clock is
    set to each append's time, for its row's `updated_at`.)"""
    model = 'Model "Q" \\ ✓ \x1f\x1e'
    appends = streams.script(
        deltas=1, background=background, store=False, previous=previous, model=model
    )
    rid = appends[0][1][0].response.id  # type: ignore[attr-defined]
    times = iter(_TIMES[: len(appends)])
    for expected, events in appends:  # new, then moved (the delta), then changed (the end)
        at = next(times)
        monkeypatch.setattr("adapters.store.sql.time", SimpleNamespace(time=lambda at=at: at))
        assert await store.commit([encode_append(rid, expected, events, at)]) == {}
        row = await store.get(rid)
        assert row is not None and row.updated_at == at
    stored = await store.read(rid)
    wanted = [at for (_, ev), at in zip(appends, _TIMES[: len(appends)], strict=True) for _ in ev]
    assert [s.recorded_at for s in stored] == wanted
    assert [s.position for s in stored] == list(range(len(wanted)))
    assert (row.model, row.background, row.store) == (model, background, False)
    assert row.previous_response_id == previous
    created = appends[0][1][0].response.created_at  # type: ignore[attr-defined]
    assert (row.created_at, row.status) == (float(created), "completed")


async def test_read_after_and_limit_page_through_a_stream(store: SqlEventStore) -> None:
    """`after` is exclusive and `limit` caps the page."""
    rid = await write(store, streams.script(deltas=6))
    page = await store.read(rid, after=2, limit=3)
    assert [s.position for s in page] == [3, 4, 5]
    assert await store.read(rid, after=10_000) == []
    assert await store.read("resp_missing") == []


@pytest.mark.parametrize("offset", [-1, 1, 5])
async def test_a_wrong_expected_version_conflicts_and_writes_nothing(
    store: SqlEventStore, offset: int
) -> None:
    """Too low, too high (which would leave a hole) and far off are all `Conflict`s."""
    appends = streams.script(deltas=3, end="open")
    rid = await write(store, appends)
    state = replay(streams.events_of(appends))
    before_rows = await store.read(rid)
    before = await store.get(rid)
    wrong = state.version + offset
    batch = emit(state, TextDelta(text="x")).events
    shifted = [_renumber(e, wrong + 1 + i) for i, e in enumerate(batch)]
    with pytest.raises(Conflict):
        await store.append(rid, wrong, shifted)
    assert await store.read(rid) == before_rows
    assert await store.get(rid) == before


async def test_creating_an_existing_stream_conflicts(store: SqlEventStore) -> None:
    appends = streams.script(deltas=1)
    rid = await write(store, appends)
    with pytest.raises(Conflict):
        await store.append(rid, -1, appends[0][1])
    assert len(await store.read(rid)) == len(streams.events_of(appends))


async def test_two_concurrent_appenders_at_one_version_exactly_one_wins(
    store: SqlEventStore,
) -> None:
    """Same expected version, different events: one commits, the loser writes nothing."""
    for _ in range(5):
        appends = streams.script(deltas=2, end="open")
        rid = await write(store, appends)
        state = replay(streams.events_of(appends))
        a = emit(state, TextDelta(text="AAA")).events
        b = emit(state, TextDelta(text="BBB")).events
        results = await asyncio.gather(
            store.append(rid, state.version, a),
            store.append(rid, state.version, b),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in results) == ["Conflict", "NoneType"]
        winner = a if results[0] is None else b
        stored = await store.read(rid, after=state.version)
        assert [s.data for s in stored] == [encode(e).data for e in winner]
        row = await store.get(rid)
        assert row is not None
        assert row.version == state.version + len(winner)


async def test_two_concurrent_creators_of_one_stream_exactly_one_wins(
    store: SqlEventStore,
) -> None:
    rid = streams.new_id()
    one = streams.created(rid, owner="first").events
    two = streams.created(rid, owner="second").events
    results = await asyncio.gather(
        store.append(rid, -1, one), store.append(rid, -1, two), return_exceptions=True
    )
    assert sorted(type(r).__name__ for r in results) == ["Conflict", "NoneType"]
    row = await store.get(rid)
    assert row is not None
    assert row.owner == ("first" if results[0] is None else "second")
    assert len(await store.read(rid)) == 2


async def test_an_append_is_atomic_when_its_insert_fails_midway(store: SqlEventStore) -> None:
    """The guard passes but a later row collides: none of the batch nor the row change lands."""
    appends = streams.script(deltas=1, end="open")
    rid = await write(store, appends)
    state = replay(streams.events_of(appends))
    decision = emit(state, TextDelta(text="x"))
    batch = decision.events + emit(decision.state, TextDelta(text="y")).events
    stray = batch[1]
    await _insert_raw(store, rid, stray.sequence_number, encode(stray).type, "{}")
    before = await store.get(rid)
    with pytest.raises(Conflict):
        await store.append(rid, state.version, batch)
    assert [s.position for s in await store.read(rid)] == [
        *range(state.version + 1),
        stray.sequence_number,
    ]
    assert await store.get(rid) == before


@pytest.mark.parametrize("end", ["completed", "incomplete", "failed", "cancelled"])
async def test_the_read_model_row_says_what_the_events_say(store: SqlEventStore, end: str) -> None:
    """Row at each step; after a lifecycle event, `snapshot` is the projection of the fold."""
    appends = streams.script(deltas=3, end=end, background=True, owner="o_rm", model="m-rm")  # type: ignore[arg-type]
    rid = appends[0][1][0].response.id  # type: ignore[attr-defined]
    done: list[object] = []
    for expected, batch in appends:
        await store.append(rid, expected, batch)
        done.extend(batch)
        row = await store.get(rid)
        state = replay(done)  # type: ignore[arg-type]
        assert row is not None
        assert row.version == state.version
        last_life = max(e.sequence_number for e in done if hasattr(e, "response"))  # type: ignore[attr-defined]
        assert row.snapshot_version == last_life
        assert row.status == done[last_life].response.status  # type: ignore[attr-defined]
        assert row.snapshot == encode_json(done[last_life].response)  # type: ignore[attr-defined]
    assert row.status == end
    assert row.snapshot == encode_json(project(state))
    first = appends[0][1][0].response  # type: ignore[attr-defined]
    assert (row.owner, row.model, row.background, row.store) == ("o_rm", "m-rm", True, True)
    assert row.created_at == float(first.created_at)
    assert row.previous_response_id is None
    assert (row.cancel_requested, row.deleted) == (False, False)


async def test_the_row_keeps_previous_response_id_and_store_flag(store: SqlEventStore) -> None:
    prev = await write(store, streams.script(deltas=1))
    rid = await write(store, streams.script(deltas=1, previous=prev, store=False))
    row = await store.get(rid)
    assert row is not None
    assert row.previous_response_id == prev
    assert row.store is False
    assert await store.get("resp_nope") is None


async def test_a_tail_from_any_position_yields_the_rest_then_ends(store: SqlEventStore) -> None:
    appends = streams.script(deltas=4)
    rid = await write(store, appends)
    everything = await store.read(rid)
    for after in range(-1, len(everything)):
        got = [e async for e in store.subscribe(rid, after)]
        assert got == everything[after + 1 :]


async def test_a_tail_past_the_terminal_event_ends_at_once(store: SqlEventStore) -> None:
    rid = await write(store, streams.script(deltas=1))
    assert [e async for e in store.subscribe(rid, after=500)] == []


async def test_a_tail_started_before_the_stream_follows_it_past_the_terminal_event(
    store: SqlEventStore,
) -> None:
    appends = streams.script(deltas=5)
    rid = appends[0][1][0].response.id  # type: ignore[attr-defined]

    async def tail() -> list[int]:
        return [e.position async for e in store.subscribe(rid)]

    task = asyncio.create_task(tail())
    await asyncio.sleep(0.05)
    for expected, batch in appends:
        await store.append(rid, expected, batch)
        await asyncio.sleep(0.01)
    async with asyncio.timeout(20):
        positions = await task
    assert positions == list(range(len(streams.events_of(appends))))
    assert store.hub.subscribers(rid) == 0


async def test_a_tail_of_an_open_stream_waits_for_new_events(store: SqlEventStore) -> None:
    appends = streams.script(deltas=2)
    rid = appends[0][1][0].response.id  # type: ignore[attr-defined]
    for expected, batch in appends[:-1]:
        await store.append(rid, expected, batch)
    tail = store.subscribe(rid, after=1)
    first = await anext(tail)
    assert first.position == 2
    rest = asyncio.create_task(_collect(tail))
    await asyncio.sleep(0.05)
    assert not rest.done()
    await store.append(rid, appends[-1][0], appends[-1][1])
    async with asyncio.timeout(20):
        got = await rest
    assert got[-1].terminal
    assert [e.position for e in got] == list(range(3, got[-1].position + 1))


async def _collect(tail: object) -> list[object]:
    return [e async for e in tail]  # type: ignore[attr-defined]


async def test_every_event_tag_round_trips_through_the_store(store: SqlEventStore) -> None:
    scripts = [streams.every_tag_script()] + [
        streams.script(deltas=1, end=end, background=True)  # type: ignore[arg-type]
        for end in ("completed", "failed", "incomplete", "cancelled")
    ]
    # The tool loop's own events (domain/mcp.py, domain/builtins.py: the built-ins' hidden
    # tool facts too), as one append each: the runner records them between generations.
    loops = ("mcp_loop", "mcp_list_failed_then_taken_over", "builtin_loop")
    for n, name in enumerate((*loops, "builtin_retried_then_lost")):
        log = SCENARIOS[name]().events
        # The scenarios share a response id; each stream here needs its own.
        own = [
            msgspec.structs.replace(
                e, response=msgspec.structs.replace(e.response, id=f"resp_mcp{n}")
            )
            if hasattr(e, "response")
            else e
            for e in log
        ]
        scripts.append([(-1, own)])
    seen: set[str] = set()
    for appends in scripts:
        rid = await write(store, appends)
        events = streams.events_of(appends)
        stored = await store.read(rid)
        assert await store.read_events(rid) == events
        assert [s.data for s in stored] == [encode(e).data for e in events]
        seen.update(s.type for s in stored)
    # `response.cancelled` is only read (logs written before); a cancellation is written as
    # `response.incomplete` with status `cancelled`. The Open Responses reasoning names are
    # written only under `--reasoning-events open-responses` (tests/e2e/test_conformance.py).
    schema_only = {"response.reasoning.delta", "response.reasoning.done"}
    assert seen == set(TAGS) - {"response.cancelled"} - schema_only


async def test_a_corrupt_row_raises_naming_its_stream_and_position(store: SqlEventStore) -> None:
    """Garbage, a wrong sequence number and an unknown tag each raise; nothing is skipped."""
    for data in ('{"type": "response.output_text.delta", "seq', '{"type":"nope"}'):
        rid = await write(store, streams.script(deltas=1, end="open"))
        row = await store.get(rid)
        assert row is not None
        position = row.version + 1
        await _insert_raw(store, rid, position, "response.output_text.delta", data)
        with pytest.raises(CorruptEvent) as info:
            await store.read_events(rid)
        assert (info.value.stream_id, info.value.position) == (rid, position)
        assert rid in str(info.value)
        assert f"position {position}" in str(info.value)
        tail = store.subscribe(rid, after=position - 1)
        raw = await anext(tail)
        await tail.aclose()  # type: ignore[attr-defined]
        with pytest.raises(CorruptEvent):
            raw.event()


async def test_a_row_whose_sequence_number_is_not_its_position_is_corrupt(
    store: SqlEventStore,
) -> None:
    appends = streams.script(deltas=1, end="open")
    rid = await write(store, appends)
    state = replay(streams.events_of(appends))
    event = emit(state, TextDelta(text="x")).events[0]
    data = encode(event).data.decode()
    await _insert_raw(store, rid, state.version + 7, "response.output_text.delta", data)
    with pytest.raises(CorruptEvent, match=f"position {state.version + 7}"):
        await store.read_events(rid)


async def test_a_tail_over_a_hole_in_the_log_raises_naming_the_missing_position(
    store: SqlEventStore,
) -> None:
    appends = streams.script(deltas=1, end="open")
    rid = await write(store, appends)
    state = replay(streams.events_of(appends))
    event = emit(state, TextDelta(text="x")).events[0]
    stray = _renumber(event, state.version + 3)
    await _insert_raw(
        store, rid, state.version + 3, encode(stray).type, encode(stray).data.decode()
    )  # type: ignore[arg-type]
    tail = store.subscribe(rid, after=state.version)
    with pytest.raises(CorruptEvent) as info:
        await anext(tail)  # type: ignore[arg-type]
    assert (info.value.stream_id, info.value.position) == (rid, state.version + 1)


async def test_list_filters_by_owner_status_model_and_time(store: SqlEventStore) -> None:
    owner = f"lister_{secrets.token_hex(4)}"
    ids = {}
    for i, (end, model) in enumerate(
        [("completed", "m1"), ("failed", "m1"), ("completed", "m2"), ("open", "m2")]
    ):
        appends = streams.script(deltas=1, end=end, owner=owner, model=model, created_at=1000 + i)  # type: ignore[arg-type]
        ids[i] = await write(store, appends)
    await write(store, streams.script(deltas=1, owner="someone_else", created_at=1001))

    async def listed(**filters: object) -> list[str]:
        page = await store.list(owner=owner, limit=50, **filters)  # type: ignore[arg-type]
        return [r.id for r in page.rows]

    assert await listed() == [ids[3], ids[2], ids[1], ids[0]]
    assert await listed(status="completed") == [ids[2], ids[0]]
    assert await listed(status=["failed", "in_progress"]) == [ids[3], ids[1]]
    assert await listed(model="m1") == [ids[1], ids[0]]
    assert await listed(since=1001, until=1003) == [ids[2], ids[1]]
    everyone = await store.list(since=1001, until=1002, limit=50)
    assert {r.owner for r in everyone.rows} >= {owner, "someone_else"}


async def test_list_paginates_newest_first_with_a_keyset_cursor(store: SqlEventStore) -> None:
    """Ties on created_at are broken by id, so paging never repeats nor drops a row."""
    owner = f"pager_{secrets.token_hex(4)}"
    for i in range(7):
        await write(store, streams.script(deltas=0, owner=owner, created_at=2000 + i // 2))
    seen: list[str] = []
    after = None
    while True:
        page = await store.list(owner=owner, limit=3, after=after)
        seen.extend(r.id for r in page.rows)
        if not page.has_more:
            break
        after = page.rows[-1].id
    rows = (await store.list(owner=owner, limit=100)).rows
    assert seen == [r.id for r in rows]
    assert len(set(seen)) == 7
    assert [(r.created_at, r.id) for r in rows] == sorted(
        ((r.created_at, r.id) for r in rows), reverse=True
    )
    with pytest.raises(NotFound):
        await store.list(owner=owner, after="resp_unknown")


async def test_mark_deleted_hides_a_response_from_list_but_keeps_its_log(
    store: SqlEventStore,
) -> None:
    owner = f"deleter_{secrets.token_hex(4)}"
    appends = streams.script(deltas=1, owner=owner)
    rid = await write(store, appends)
    assert await store.mark_deleted(rid) is True
    assert await store.mark_deleted(rid) is False
    assert await store.mark_deleted("resp_unknown") is False
    row = await store.get(rid)
    assert row is not None
    assert row.deleted
    assert (await store.list(owner=owner)).rows == []
    assert [r.id for r in (await store.list(owner=owner, include_deleted=True)).rows] == [rid]
    assert await store.read_events(rid) == streams.events_of(appends)


async def test_request_cancel_flags_the_row_once(store: SqlEventStore) -> None:
    rid = await write(store, streams.script(deltas=1, end="open"))
    assert await store.request_cancel(rid) is True
    assert await store.request_cancel(rid) is True
    row = await store.get(rid)
    assert row is not None
    assert row.cancel_requested
    assert await store.request_cancel("resp_unknown") is False
    await store.mark_deleted(rid)
    assert await store.request_cancel(rid) is False


async def test_ping_answers(store: SqlEventStore) -> None:
    assert await store.ping() is True


# --- helpers ----------------------------------------------------------------------------------


def _renumber(event: object, position: int) -> object:
    import msgspec

    return msgspec.structs.replace(event, sequence_number=position)  # type: ignore[type-var]


async def _insert_raw(
    store: SqlEventStore, stream_id: str, position: int, type_: str, data: str
) -> None:
    """Write a row behind the store's back (as a buggy tool or a bad restore would)."""
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.insert(t_events).values(
                stream_id=stream_id, position=position, type=type_, data=data, recorded_at=0.0
            )
        )


async def test_chain_walks_the_ancestors_newest_first_in_one_query(store: SqlEventStore) -> None:
    owner = f"chain_{secrets.token_hex(4)}"
    a = await write(store, streams.script(deltas=1, owner=owner))
    b = await write(store, streams.script(deltas=1, owner=owner, previous=a))
    c = await write(store, streams.script(deltas=0, owner=owner, previous=b))
    links = await store.chain(c, owner, 10)
    assert [link.response_id for link in links] == [c, b, a]
    assert [link.previous_response_id for link in links] == [b, a, None]
    for link in links:
        row = await store.get(link.response_id)
        assert row is not None and link.snapshot == row.snapshot and link.status == row.status
        first = (await store.read(link.response_id, after=-1, limit=1))[0]
        assert link.request_facts == first.facts
    assert [link.response_id for link in await store.chain(c, owner, 2)] == [c, b]


async def test_chain_stops_before_what_the_owner_cannot_see(store: SqlEventStore) -> None:
    owner = f"chain_{secrets.token_hex(4)}"
    a = await write(store, streams.script(deltas=0, owner=owner))
    b = await write(store, streams.script(deltas=0, owner=owner, previous=a))
    c = await write(store, streams.script(deltas=0, owner=owner, previous=b))
    assert await store.chain(c, "someone_else", 10) == []
    assert await store.chain("resp_nope", owner, 10) == []
    assert await store.mark_deleted(a)
    assert [(x.response_id, x.previous_response_id) for x in await store.chain(c, owner, 10)] == [
        (c, b),
        (b, a),
    ]
    unstored = await write(store, streams.script(deltas=0, owner=owner, store=False))
    after = await write(store, streams.script(deltas=0, owner=owner, previous=unstored))
    assert [x.response_id for x in await store.chain(after, owner, 10)] == [after]


async def test_chain_tip_is_the_chains_first_link_with_a_count_every_delete_raises(
    store: SqlEventStore,
) -> None:
    owner = f"chain_{secrets.token_hex(4)}"
    a = await write(store, streams.script(deltas=1, owner=owner))
    b = await write(store, streams.script(deltas=1, owner=owner, previous=a))
    tip = await store.chain_tip(b, owner)
    assert tip.link == (await store.chain(b, owner, 1))[0]
    assert tip.breaks is not None
    assert (await store.chain_tip(b, "someone_else")).link is None
    assert (await store.chain_tip("resp_nope", owner)).link is None
    assert (await store.chain_tip(a, owner)).breaks == tip.breaks  # nothing broke since
    assert await store.mark_deleted(a)
    after = await store.chain_tip(b, owner)
    assert after.breaks is not None and after.breaks > tip.breaks
    assert not await store.mark_deleted(a)  # already: no break
    assert (await store.chain_tip(b, owner)).breaks == after.breaks
