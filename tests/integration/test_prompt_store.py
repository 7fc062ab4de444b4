"""Prompt templates on PostgreSQL and SQLite, through the `Prompts` port: versions as a
stream of the log, the read-model row, owners, and concurrent versions."""

from __future__ import annotations

import asyncio
import secrets

import msgspec
import sqlalchemy as sa

from adapters.store.prompts import SqlPrompts
from adapters.store.sql import SqlEventStore
from adapters.store.tables import events
from domain.objects import InputImage, InputMessage, InputText
from domain.templates import PromptTemplate, VersionAdded

PNG = "data:image/png;base64," + "A" * 8000  # large enough to be stored as a blob


def _id() -> str:
    return f"pmpt_{secrets.token_hex(8)}"


async def test_versions_are_a_stream_of_the_log_and_the_row_follows_the_latest(
    store: SqlEventStore,
) -> None:
    prompts = SqlPrompts(store)
    pid = _id()
    first = PromptTemplate(instructions="v1 {{x}}")
    image = InputMessage(
        id="", role="user", content=[InputText(text="a"), InputImage(image_url=PNG)]
    )
    second = PromptTemplate(input=[image])
    assert await prompts.add(pid, "alice", first, 10.0) == 1
    assert await prompts.add(pid, "alice", second, 20.0) == 2
    row = await prompts.get(pid)
    assert row is not None and (row.owner, row.version, row.created_at, row.updated_at) == (
        "alice",
        2,
        10.0,
        20.0,
    )
    one, two = await prompts.version(pid, 1), await prompts.version(pid, 2)
    assert one is not None and one.template == first and one.created_at == 10.0
    assert two is not None and two.template == second  # its image put back whole
    assert await prompts.version(pid, 3) is None and await prompts.version(pid, 0) is None
    logged = await store.read(pid)
    assert [(e.position, e.type) for e in logged] == [
        (0, "prompt.version.added"),
        (1, "prompt.version.added"),
    ]
    async with store.engine.connect() as conn:
        data = (
            await conn.execute(sa.select(events.c.data).where(events.c.stream_id == pid))
        ).scalars()
        assert all(PNG not in d for d in data)  # the image is a blob, stored once
    decoded = [msgspec.json.decode(e.data, type=VersionAdded) for e in logged]
    assert [(d.version, d.owner) for d in decoded] == [(1, "alice"), (2, "alice")]


async def test_another_owner_cannot_add_a_version_and_nothing_is_written(
    store: SqlEventStore,
) -> None:
    prompts = SqlPrompts(store)
    pid = _id()
    await prompts.add(pid, "alice", PromptTemplate(instructions="mine"), 1.0)
    assert await prompts.add(pid, "mallory", PromptTemplate(instructions="theirs"), 2.0) is None
    row = await prompts.get(pid)
    assert row is not None and (row.owner, row.version, row.updated_at) == ("alice", 1, 1.0)
    assert len(await store.read(pid)) == 1


async def test_concurrent_versions_each_get_one_and_none_is_lost(store: SqlEventStore) -> None:
    prompts = SqlPrompts(store)
    pid = _id()
    texts = [f"v{n}" for n in range(6)]
    got = await asyncio.gather(
        *(prompts.add(pid, "alice", PromptTemplate(instructions=t), 1.0) for t in texts)
    )
    assert sorted(v for v in got if v is not None) == list(range(1, 7))
    kept = [await prompts.version(pid, n) for n in range(1, 7)]
    assert sorted(k.template.instructions or "" for k in kept if k is not None) == texts


async def test_summaries_are_newest_first_and_by_owner(store: SqlEventStore) -> None:
    prompts = SqlPrompts(store)
    owner = f"o-{secrets.token_hex(4)}"
    old, new = _id(), _id()
    await prompts.add(old, owner, PromptTemplate(instructions="a"), 100.0)
    await prompts.add(new, owner, PromptTemplate(instructions="b"), 200.0)
    await prompts.add(old, owner, PromptTemplate(instructions="c"), 300.0)
    listed = await prompts.summaries(owner, 10)
    assert [(p.id, p.version) for p in listed] == [(old, 2), (new, 1)]
    assert [p.id for p in await prompts.summaries(owner, 1)] == [old]
    assert await prompts.summaries("nobody-" + owner, 10) == []
