"""Conversations at size: the latency of listing items, of retrieving one, of adding one, and
of a turn, as a conversation grows to N items (a real `resplog serve`, scripted engine at
zero delay, PostgreSQL or SQLite). Prints medians beside the figures at the smallest size
of the same run.

    .venv/bin/python bench/conversation_bench.py --items 10000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.databases import PG, drop_postgres, fresh_postgres
from tests.e2e.conftest import start_server, stop_server


def timed(fn: object, rounds: int) -> float:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


ONE_ITEM = {"items": [{"role": "user", "content": "one more"}]}


def run(base: str, total: int, rounds: int) -> None:
    with httpx.Client(base_url=base, timeout=120) as http:
        cid = http.post("/v1/conversations", json={}).json()["id"]
        marks = sorted({10, total // 10, total // 2, total})
        have = 0
        print(
            f"{'items':>7} {'list first page ms':>19} {'list after mid ms':>18}"
            f" {'retrieve one ms':>16} {'add one ms':>11} {'turn ms':>8}"
        )
        for mark in marks:
            while have < mark:
                n = min(20, mark - have)
                items = [{"role": "user", "content": f"item {have + k}"} for k in range(n)]
                r = http.post(f"/v1/conversations/{cid}/items", json={"items": items})
                r.raise_for_status()
                have += n
            page = http.get(f"/v1/conversations/{cid}/items", params={"order": "asc", "limit": 100})
            mid = page.json()["data"][min(50, len(page.json()["data"]) - 1)]["id"]
            first = timed(lambda: http.get(f"/v1/conversations/{cid}/items"), rounds)
            after = timed(
                lambda mid=mid: http.get(f"/v1/conversations/{cid}/items", params={"after": mid}),
                rounds,
            )
            one = timed(
                lambda mid=mid: http.get(f"/v1/conversations/{cid}/items/{mid}").raise_for_status(),
                rounds,
            )
            add = timed(
                lambda: http.post(
                    f"/v1/conversations/{cid}/items", json=ONE_ITEM
                ).raise_for_status(),
                rounds,
            )
            have += rounds
            body = {"model": "scripted", "conversation": cid, "input": "x"}
            turn = timed(
                lambda body=body: http.post("/v1/responses", json=body).raise_for_status(), rounds
            )
            have += 3 * rounds  # each turn added its input, reasoning and answer
            print(f"{have:7d} {first:19.1f} {after:18.1f} {one:16.1f} {add:11.1f} {turn:8.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--sqlite", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        name = None
        if args.sqlite:
            url = f"sqlite+aiosqlite:///{tmp}/c.db"
        else:
            url, name = asyncio.run(fresh_postgres(PG))
        server = start_server(url, "sqlite" if args.sqlite else "postgres", Path(tmp) / "s.log")
        try:
            print(f"database={'sqlite' if args.sqlite else 'postgres'} rounds={args.rounds}")
            run(server.base_url, args.items, args.rounds)
        finally:
            stop_server(server)
            if name:
                asyncio.run(drop_postgres(PG, name))


if __name__ == "__main__":
    main()
