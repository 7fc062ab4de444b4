"""Images and files stored once (adapters/store/blobs.py), end to end on both stores: the
same image in three turns is one row of `blobs`; every read gives back the bytes sent;
`verify` catches a blob that was altered; `export`/`import` carry the blobs; `gc` drops the
blobs no event refers to and keeps the others."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest

from tests.e2e.conftest import RESPLOG, Server

# Stream obfuscation off (adapters/http/sse.py `OBFUSCATED`), so that live and replay are the
# log's bytes as they are: each delivery would pad its delta events anew.
UNPADDED = {"stream_options": {"include_obfuscation": False}}
REPLAY = {"stream": "true", "include_obfuscation": "false"}


def _image() -> str:
    """A data URL of 24 KiB of fresh bytes: unique to the test, over the inline threshold."""
    return "data:image/png;base64," + base64.b64encode(os.urandom(24 * 1024)).decode()


def _sql(server: Server, statement: str, *args: Any) -> list[Any]:
    """Run one statement on the server's database (`?` parameters); the rows it returns."""
    return _sql_at(server.kind, server.database_url, statement, *args)


def _sql_at(kind: str, url: str, statement: str, *args: Any) -> list[Any]:
    if kind == "sqlite":
        with sqlite3.connect(url.split("///", 1)[1]) as db:
            return list(db.execute(statement, args).fetchall())

    async def pg() -> list[Any]:
        n = iter(range(1, 100))
        text = "".join(f"${next(n)}" if c == "?" else c for c in statement)
        conn = await asyncpg.connect(url.replace("+asyncpg", ""))
        try:
            return [tuple(r) for r in await conn.fetch(text, *args)]
        finally:
            await conn.close()

    return asyncio.run(pg())


def _digest_count(server: Server, url: str) -> int:
    import hashlib

    digest = hashlib.sha256(url.encode()).hexdigest()
    return int(_sql(server, "SELECT count(*) FROM blobs WHERE sha256 = ?", digest)[0][0])


def _resplog(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RESPLOG, *args, "--database-url", url], capture_output=True, text=True, timeout=120
    )


def _ask(image: str, text: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "input_text", "text": text},
            {"type": "input_image", "image_url": image, "detail": "auto"},
        ],
    }


def test_the_same_image_in_three_turns_is_stored_once_and_read_back_as_sent(
    client: openai.OpenAI, server: Server
) -> None:
    image = _image()
    blobs_before = server.count_rows("blobs")
    history: list[Any] = []
    ids: list[str] = []
    for turn in range(3):  # a store: false client resends its whole history each turn
        history.append(_ask(image, f"turn {turn}"))
        r = client.responses.create(model="scripted", input=history, store=False)
        assert "image (image/png, 24576 bytes)" in r.output_text
        history += [o.model_dump(exclude_none=True) for o in r.output]
        ids.append(r.id)
    assert server.count_rows("blobs") == blobs_before + 1
    assert _digest_count(server, image) == 1
    # The facts keep the reference, not the bytes.
    facts = _sql(server, "SELECT facts FROM events WHERE stream_id = ? AND position = 0", ids[2])
    assert image not in facts[0][0] and "blob:sha256:" in facts[0][0]

    # A stored chain through previous_response_id: the continuation reads the first turn's
    # image back from its blob.
    first = client.responses.create(model="scripted", input=[_ask(image, "one")])
    second = client.responses.create(
        model="scripted", input=[_ask(image, "two")], previous_response_id=first.id
    )
    assert server.count_rows("blobs") == blobs_before + 1
    items = client.responses.input_items.list(second.id, order="asc").data
    images = [
        p.image_url  # type: ignore[union-attr]
        for i in items
        for p in getattr(i, "content", None) or []
        if p.type == "input_image"
    ]
    assert images == [image]
    assert "image (image/png, 24576 bytes)" in second.output_text


def test_input_items_and_the_replayed_log_are_byte_identical_to_what_was_sent(
    server: Server,
) -> None:
    image = _image()
    body = {"model": "scripted", "input": [_ask(image, "look")], "stream": True, **UNPADDED}
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        live = http.post("/v1/responses", json=body).text
        rid = json.loads(live.split("data: ", 2)[1].split("\n", 1)[0])["response"]["id"]
        replay = http.get(f"/v1/responses/{rid}", params=REPLAY).text
        items = http.get(f"/v1/responses/{rid}/input_items").json()
    assert replay == live
    assert items["data"][0]["content"][1]["image_url"] == image
    events = _resplog("events", rid, "--json", url=server.database_url)
    assert events.returncode == 0, events.stderr
    assert image in events.stdout and "blob:sha256:" not in events.stdout


def test_verify_names_an_altered_or_missing_blob(client: openai.OpenAI, server: Server) -> None:
    import hashlib

    image = _image()
    r = client.responses.create(model="scripted", input=[_ask(image, "keep it")])
    digest = hashlib.sha256(image.encode()).hexdigest()
    assert _resplog("verify", r.id, url=server.database_url).returncode == 0
    tampered = image[:-8] + "AAAAAAA="
    _sql(server, "UPDATE blobs SET data = ? WHERE sha256 = ?", tampered, digest)
    try:
        result = _resplog("verify", r.id, url=server.database_url)
        assert result.returncode == 1
        assert f"blob: blob sha256:{digest} is missing or its content does not match" in (
            result.stdout
        )
        # A read never hands out the altered bytes.
        with pytest.raises(openai.InternalServerError):
            client.responses.input_items.list(r.id)
    finally:
        _sql(server, "UPDATE blobs SET data = ? WHERE sha256 = ?", image, digest)
    assert _resplog("verify", r.id, url=server.database_url).returncode == 0


def test_export_then_import_carries_the_blobs(
    client: openai.OpenAI,
    server: Server,
    fresh_pg: Callable[[], str],
    tmp_path: Path,
) -> None:
    image = _image()
    since = time.time() - 1
    ids = [
        client.responses.create(model="scripted", input=[_ask(image, f"n{n}")]).id for n in (1, 2)
    ]
    exported = subprocess.run(
        [RESPLOG, "export", "--database-url", server.database_url, "--since", str(since)],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    assert image.encode() in exported and b"blob:sha256:" not in exported
    path = tmp_path / "log.jsonl"
    path.write_bytes(exported)
    target = fresh_pg() if server.kind == "postgres" else f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    assert _resplog("migrate", url=target).returncode == 0
    result = _resplog("import", str(path), url=target)
    assert result.returncode == 0, result.stderr
    assert _resplog("verify", "--all", url=target).returncode == 0
    assert _sql_at(server.kind, target, "SELECT count(*) FROM blobs")[0][0] == 1
    # What comes back out of the copy is what went in.
    again = subprocess.run(
        [RESPLOG, "export", "--database-url", target], capture_output=True, check=True
    ).stdout
    lines = lambda raw: [ln for ln in raw.splitlines() if b'"kind":"event"' in ln]  # noqa: E731
    assert lines(again) == [ln for ln in lines(exported) if any(i.encode() in ln for i in ids)]


def test_gc_drops_the_blobs_no_event_refers_to_and_keeps_the_others(
    client: openai.OpenAI, server: Server
) -> None:
    import hashlib

    kept, dropped = _image(), _image()
    stored = client.responses.create(model="scripted", input=[_ask(kept, "stored")])
    client.responses.create(model="scripted", input=[_ask(dropped, "gone")], store=False)
    # Both blobs are past the grace period a create in flight is given.
    _sql(
        server,
        "UPDATE blobs SET used_at = 0 WHERE sha256 IN (?, ?)",
        *(hashlib.sha256(i.encode()).hexdigest() for i in (kept, dropped)),
    )
    result = _resplog("gc", url=server.database_url)
    assert result.returncode == 0, result.stderr
    assert _digest_count(server, kept) == 1
    assert _digest_count(server, dropped) == 0
    items = client.responses.input_items.list(stored.id).data
    assert items[0].content[1].image_url == kept  # type: ignore[union-attr]


def test_a_large_json_schema_is_stored_once_across_the_lifecycle_events(
    server: Server,
) -> None:
    import hashlib

    import msgspec

    props = {f"f{i:04d}_{os.urandom(4).hex()}": {"type": "string"} for i in range(900)}
    schema = {"type": "object", "properties": props}
    encoded = msgspec.json.encode(schema)
    assert 16384 < len(encoded) < 65536
    fmt = {"type": "json_schema", "name": "big", "schema": schema}
    body = {
        "model": "scripted",
        "input": "fill it",
        "text": {"format": fmt},
        "stream": True,
        **UNPADDED,
    }
    blobs_before = server.count_rows("blobs")
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        live = http.post("/v1/responses", json=body).text
        rid = json.loads(live.split("data: ", 2)[1].split("\n", 1)[0])["response"]["id"]
        replay = http.get(f"/v1/responses/{rid}", params=REPLAY).text
        events = http.get(f"/v1/responses/{rid}/events").text
        got = http.get(f"/v1/responses/{rid}").json()
    assert replay == live and live.count(encoded.decode()) == 3  # created, in_progress, done
    assert events.count(encoded.decode()) == 3
    assert got["text"]["format"]["schema"] == schema
    digest = hashlib.sha256(encoded).hexdigest()
    assert server.count_rows("blobs") == blobs_before + 1
    rows = _sql(server, "SELECT data FROM events WHERE stream_id = ?", rid)
    assert sum(encoded.decode() in r[0] for r in rows) == 0
    assert sum(f'"schema":blob:sha256:{digest}' in r[0] for r in rows) == 3
    assert _resplog("verify", rid, url=server.database_url).returncode == 0


def test_a_conversation_keeps_its_images_as_references_and_lists_them_as_sent(
    client: openai.OpenAI, server: Server
) -> None:
    image = _image()
    blobs_before = server.count_rows("blobs")
    conv = client.conversations.create(items=[_ask(image, "first")])  # type: ignore[list-item]
    r = client.responses.create(model="scripted", conversation=conv.id, input=[_ask(image, "b")])
    assert "image (image/png, 24576 bytes)" in r.output_text
    assert server.count_rows("blobs") == blobs_before + 1
    items = client.conversations.items.list(conv.id, order="asc").data
    images = [
        p.image_url  # type: ignore[union-attr]
        for i in items
        for p in getattr(i, "content", None) or []
        if p.type == "input_image"
    ]
    assert images == [image, image]
    rows = _sql(server, "SELECT data FROM conversation_items WHERE conversation_id = ?", conv.id)
    logged = _sql(server, "SELECT data FROM events WHERE stream_id = ?", conv.id)
    assert not any(image in row[0] for row in [*rows, *logged])
    result = _resplog("conversations", "show", conv.id, "--json", url=server.database_url)
    assert result.returncode == 0 and image in result.stdout, result.stderr
    # An image only a conversation refers to (no response) outlives gc.
    import hashlib

    alone = _image()
    client.conversations.create(items=[_ask(alone, "only here")])  # type: ignore[list-item]
    digest = hashlib.sha256(alone.encode()).hexdigest()
    _sql(server, "UPDATE blobs SET used_at = 0 WHERE sha256 = ?", digest)
    assert _resplog("gc", url=server.database_url).returncode == 0
    assert _digest_count(server, alone) == 1
