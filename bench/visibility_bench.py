"""What "not yours" costs next to "no such id" when the other owner's snapshot is large:
the lookup the API makes (`visible`, owner in the WHERE clause) against the old one (`get`
by id, then the owner checked on the fetched row), on a fresh PostgreSQL database.
Prints the median milliseconds of each; not a test.

    .venv/bin/python bench/visibility_bench.py --snapshot-mib 4 --lookups 200
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.store.factory import open_store
from adapters.store.migrate import upgrade_async
from adapters.store.tables import responses, values_of
from bench.databases import PG, drop_postgres, fresh_postgres
from service.ports import ResponseRow


def big_row(rid: str, mib: float) -> ResponseRow:
    text = "x" * int(mib * 2**20)
    snapshot = f'{{"id":"{rid}","object":"response","instructions":"{text}"}}'.encode()
    now = time.time()
    return ResponseRow(
        id=rid, owner="alice", status="completed", model="m", background=False, store=True,
        previous_response_id=None, created_at=now, updated_at=now, version=1,
        snapshot_version=1, snapshot=snapshot,
    )  # fmt: skip


async def median_ms(lookups: int, lookup: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(lookups):
        start = time.perf_counter()
        await lookup()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def run(mib: float, lookups: int) -> None:
    url, name = await fresh_postgres(PG)
    try:
        await upgrade_async(url)
        store = await open_store(url)
        rid, missing = "resp_" + "b" * 48, "resp_" + "0" * 48
        async with store.engine.begin() as conn:
            await conn.execute(sa.insert(responses).values(values_of(big_row(rid, mib))))

        async def old_way(response_id: str) -> bool:
            row = await store.get(response_id)
            return row is not None and row.owner == "bob"

        cases = {
            "get, then owner check: no such id": lambda: old_way(missing),
            "get, then owner check: not yours": lambda: old_way(rid),
            "visible: no such id": lambda: store.visible(missing, "bob"),
            "visible: not yours": lambda: store.visible(rid, "bob"),
        }
        print(f"snapshot {mib} MiB, median of {lookups} lookups")
        for label, lookup in cases.items():
            print(f"  {label:36} {await median_ms(lookups, lookup):7.2f} ms")
        await store.close()
    finally:
        await drop_postgres(PG, name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--snapshot-mib", type=float, default=4.0)
    p.add_argument("--lookups", type=int, default=200)
    args = p.parse_args()
    asyncio.run(run(args.snapshot_mib, args.lookups))


if __name__ == "__main__":
    main()
