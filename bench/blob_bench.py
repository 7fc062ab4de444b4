"""Bytes the log stores per response for large request parts (issue 20 item 6), from one
run: what the rows hold now (events' `data` and `facts`, the read model's snapshot, the
`blobs` table) against what they would hold with every blob inline (the same events as
every read hands them out, blobs put back). Two requests through the service (scripted
engine): a ~1 MiB `text.format` json_schema, and a `store: false` client sending a 1 MiB
image three times (each turn resends its history). Prints bytes; not a test.

    .venv/bin/python bench/blob_bench.py            # PostgreSQL (a fresh database)
    .venv/bin/python bench/blob_bench.py --sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import tempfile
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.store.migrate import upgrade_async
from adapters.wiring import open_bundle
from bench.databases import database_arguments, drop_postgres, fresh_postgres
from service.bundle import Bundle
from service.responses import modes as responses
from service.settings import Settings
from service.wire import Limits, parse_create_body

OWNER = "bench"
LIMITS = Limits(max_tool_schema_bytes=4 << 20, max_file_bytes=4 << 20)
MIB = 1 << 20


def big_schema() -> dict[str, object]:
    """A json_schema of about 1 MiB: many optional string properties."""
    props = {f"field_{i:05d}": {"type": "string", "description": "d" * 80} for i in range(9500)}
    return {"type": "object", "properties": {"answer": {"type": "string"}, **props}}


async def create(svc: Bundle, body: dict[str, object]) -> tuple[str, list[object]]:
    req = parse_create_body(json.dumps(body).encode(), LIMITS)
    r = await responses.create_and_wait(svc, req, OWNER)
    return r.id, [msgspec_builtins(o) for o in r.output]


def msgspec_builtins(value: object) -> object:
    import msgspec

    return msgspec.to_builtins(value)


async def stored(url: str, ids: list[str]) -> tuple[int, int, int]:
    """(events' data + facts, snapshots, blobs) bytes as the rows hold them."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            marks = ", ".join(f"'{i}'" for i in ids)
            rows = (
                await conn.execute(
                    sa.text(
                        "SELECT coalesce(sum(length(data) + coalesce(length(facts), 0)), 0) "
                        f"FROM events WHERE stream_id IN ({marks})"
                    )
                )
            ).scalar_one()
            snaps = (
                await conn.execute(
                    sa.text(f"SELECT sum(length(snapshot)) FROM responses WHERE id IN ({marks})")
                )
            ).scalar_one()
            blobs = (
                await conn.execute(sa.text("SELECT coalesce(sum(length(data)), 0) FROM blobs"))
            ).scalar_one()
        return int(rows), int(snaps), int(blobs)
    finally:
        await engine.dispose()


async def inline(svc: Bundle, ids: list[str]) -> int:
    """Events' data + facts as every read hands them out (blobs put back)."""
    total = 0
    for rid in ids:
        for e in await svc.store.read(rid):
            total += len(e.data) + (0 if e.facts is None else len(e.facts))
    return total


def line(name: str, before: int, after: int) -> None:
    print(f"{name:<44} {before / MIB:>9.2f} {after / MIB:>9.2f}")


async def run(url: str) -> None:
    await upgrade_async(url)
    settings = Settings(database_url=url, scripted_delay_ms=0, workers=0)
    async with open_bundle(settings) as svc:
        print(f"{'MiB stored':<44} {'inline':>9} {'now':>9}")
        schema = big_schema()
        size = len(json.dumps(schema, separators=(",", ":")))
        fmt = {"type": "json_schema", "name": "big", "schema": schema}
        rid, _ = await create(
            svc, {"model": "scripted", "input": "fill it", "text": {"format": fmt}}
        )
        rows, snaps, blobs0 = await stored(url, [rid])
        schema_inline = await inline(svc, [rid])
        line(f"json_schema of {size / MIB:.2f} MiB: events + blobs", schema_inline, rows + blobs0)
        line("  + its snapshot (read model)", snaps, snaps)
        image = "data:image/png;base64," + base64.b64encode(os.urandom(768 * 1024)).decode()
        part = {"type": "input_image", "image_url": image, "detail": "auto"}
        history: list[object] = []
        ids: list[str] = []
        for turn in range(3):
            history.append(
                {"role": "user", "content": [{"type": "input_text", "text": f"t{turn}"}, part]}
            )
            rid, output = await create(svc, {"model": "scripted", "input": history, "store": False})
            history += output
            ids.append(rid)
        rows, snaps, blobs = await stored(url, ids)
        line(
            f"image of {len(image) / MIB:.2f} MiB, 3 store:false turns",
            await inline(svc, ids),
            rows + blobs - blobs0,
        )


async def main_async(args: argparse.Namespace) -> None:
    if args.sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            await run(f"sqlite+aiosqlite:///{tmp}/blob.db")
        return
    url, name = await fresh_postgres(args.database_url)
    try:
        await run(url)
    finally:
        await drop_postgres(args.database_url, name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    database_arguments(p)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
