"""A long chain: what a create costs as its `previous_response_id` chain grows, turn 1 beside
turn 500 and turn 1,000 (the longest chain a create may continue).

A chain of `--turns` plain creates through the service (scripted engine, no delay, 24 tokens
an answer) on a fresh PostgreSQL database (or SQLite); at each of `--at` the median of
`--samples` creates that continue the chain's last response (siblings, so the chain itself
grows by one a turn), and the history read alone (`load_history`), each beside turn 1's.
With `--profile TURN`: a cProfile (CPU time) of the creates at that turn, its top functions
by their own time and this repository's by their cumulative time. The target: turn 1,000
within 1.3x of turn 1. Prints milliseconds; not a test.

    .venv/bin/python bench/chain_bench.py                    # PostgreSQL (a fresh database)
    .venv/bin/python bench/chain_bench.py --sqlite
    .venv/bin/python bench/chain_bench.py --turns 1000 --profile 1000
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from adapters.store.migrate import upgrade_async
from adapters.wiring import open_bundle
from bench.harness import Table, database_arguments, drop_postgres, fresh_postgres, parser
from service.bundle import Bundle
from service.prompts.history import load_history
from service.responses.modes import create_and_wait
from service.settings import Settings
from service.wire.decode import parse_create_body
from service.wire.limits import Limits

OWNER = "bench"
HERE = str(Path(__file__).resolve().parents[1])


def body(previous: str | None) -> bytes:
    meta = '{"scripted_delay_ms": "0", "scripted_tokens": "24"}'
    prev = "" if previous is None else f', "previous_response_id": "{previous}"'
    return f'{{"model": "scripted", "input": "another turn", "metadata": {meta}{prev}}}'.encode()


async def create(svc: Bundle, previous: str | None) -> str:
    req = parse_create_body(body(previous), Limits())
    return (await create_and_wait(svc, req, OWNER)).id


async def median_ms(
    samples: int, call: Callable[[], Awaitable[object]], profile: cProfile.Profile | None = None
) -> float:
    times = []
    for _ in range(samples):
        if profile is not None:
            profile.enable()
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
        if profile is not None:
            profile.disable()
    return statistics.median(times)


async def run(url: str, args: argparse.Namespace) -> None:
    await upgrade_async(url)
    settings = Settings(database_url=url, scripted_delay_ms=0, workers=0)
    at = sorted({int(n) for n in args.at.split(",")})
    creates = Table(f"a create continuing turn N (median of {args.samples})", "ms")
    history = Table(f"the history read alone (median of {args.samples})", "ms")
    first: tuple[float, float] | None = None
    async with open_bundle(settings) as svc:
        last: str | None = None
        started = time.perf_counter()
        for turn in range(1, args.turns + 1):
            last = await create(svc, last)
            if turn not in at:
                continue
            profile = cProfile.Profile(time.process_time) if turn == args.profile else None
            made = await median_ms(args.samples, lambda parent=last: create(svc, parent), profile)
            read = await median_ms(
                args.samples, lambda parent=last: load_history(svc, parent, OWNER)
            )
            print(f"  turn {turn:,}: create {made:.2f} ms, history {read:.2f} ms", flush=True)
            if first is None:
                first = (made, read)
            creates.add(f"turn {turn:,}", made, f"turn {at[0]:,}", first[0])
            history.add(f"turn {turn:,}", read, f"turn {at[0]:,}", first[1])
            if profile is not None:
                stats = pstats.Stats(profile)
                stats.sort_stats("tottime").print_stats(25)
                stats.sort_stats("cumulative").print_stats(HERE, 40)  # this repository's
        print(f"  {args.turns:,} turns in {time.perf_counter() - started:.0f} s")
    creates.print()
    history.print()


async def main_async(args: argparse.Namespace) -> None:
    if args.sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            await run(f"sqlite+aiosqlite:///{tmp}/chain.db", args)
        return
    url, name = await fresh_postgres(args.database_url)
    try:
        await run(url, args)
    finally:
        await drop_postgres(args.database_url, name)


def main() -> None:
    p = parser(__doc__ or "")
    database_arguments(p)
    p.add_argument("--turns", type=int, default=1000, help="the chain's length")
    p.add_argument("--at", default="1,500,1000", help="the turns measured")
    p.add_argument("--samples", type=int, default=15, help="creates a measured turn")
    p.add_argument("--profile", type=int, help="profile the samples at this turn")
    args = p.parse_args()
    store = "sqlite" if args.sqlite else "postgresql"
    print(f"{store}, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores here")
    asyncio.run(main_async(args))
    print(f"\nload average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
