"""A long chain: what a create costs as its `previous_response_id` chain grows, turn 1 beside
turn 500 and turn 1,000 (the longest chain a create may continue).

A chain of `--turns` plain creates through the service (scripted engine, no delay, 24 tokens
an answer) on a fresh PostgreSQL database (or SQLite); at each of `--at` the median of
`--samples` creates that continue the chain's last response (siblings, so the chain itself
grows by one a turn), wall and CPU time, and the history read alone (`load_history`), each
beside turn 1's.
With `--cold`: the process's cache of histories (service/prompts/chains.py) is emptied before
each measured create and read, as for a create whose chain another process continued until
then (the whole chain walked). With `--profile TURN`: a cProfile (CPU time) of the creates at
that turn, its top functions by their own time and this repository's by their cumulative
time. The target: turn 1,000 within 1.3x of turn 1. Prints milliseconds; not a test.

    .venv/bin/python bench/chain_bench.py                    # PostgreSQL (a fresh database)
    .venv/bin/python bench/chain_bench.py --sqlite
    .venv/bin/python bench/chain_bench.py --turns 1000 --profile 1000
    .venv/bin/python bench/chain_bench.py --turns 500 --at 1,500 --cold   # the walk
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
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


async def create(svc: Bundle, previous: str | None, cold: bool = False) -> str:
    if cold:
        svc.chains.clear()
    req = parse_create_body(body(previous), Limits())
    return (await create_and_wait(svc, req, OWNER)).id


async def read_history(svc: Bundle, previous: str, cold: bool) -> object:
    if cold:
        svc.chains.clear()
    return await load_history(svc, previous, OWNER)


async def median_ms(
    samples: int, call: Callable[[], Awaitable[object]], profile: cProfile.Profile | None = None
) -> tuple[float, float]:
    """The median wall time of `call` and the median CPU time of this process meanwhile
    (ms): on a shared machine the CPU is the steadier figure."""
    times, cpu = [], []
    for _ in range(samples):
        if profile is not None:
            profile.enable()
        start, on_cpu = time.perf_counter(), time.process_time()
        await call()
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - on_cpu) * 1000)
        if profile is not None:
            profile.disable()
    return statistics.median(times), statistics.median(cpu)


async def run(url: str, args: argparse.Namespace) -> None:
    await upgrade_async(url)
    settings = Settings(database_url=url, scripted_delay_ms=0, workers=0)
    at = sorted({int(n) for n in args.at.split(",")})
    creates = Table(f"a create continuing turn N (median of {args.samples})", "ms")
    cpu = Table(f"the CPU of a create continuing turn N (median of {args.samples})", "ms")
    history = Table(f"the history read alone (median of {args.samples})", "ms")
    first: tuple[float, float, float] | None = None
    async with open_bundle(settings) as svc:
        last: str | None = None
        started = time.perf_counter()
        for turn in range(1, args.turns + 1):
            last = await create(svc, last)
            if turn not in at:
                continue
            assert last is not None
            made, on_cpu = await median_ms(
                args.samples, functools.partial(create, svc, last, args.cold)
            )
            reading = functools.partial(read_history, svc, last, args.cold)
            read, _ = await median_ms(args.samples, reading)
            print(
                f"  turn {turn:,}: create {made:.2f} ms ({on_cpu:.2f} ms CPU), "
                f"history {read:.2f} ms",
                flush=True,
            )
            if first is None:
                first = (made, on_cpu, read)
            creates.add(f"turn {turn:,}", made, f"turn {at[0]:,}", first[0])
            cpu.add(f"turn {turn:,}", on_cpu, f"turn {at[0]:,}", first[1])
            history.add(f"turn {turn:,}", read, f"turn {at[0]:,}", first[2])
            if turn == args.profile:  # more samples, apart: the profiler's cost is its own
                profile = cProfile.Profile(time.process_time)
                call = functools.partial(create, svc, last, args.cold)
                await median_ms(args.samples, call, profile)
                stats = pstats.Stats(profile)
                stats.sort_stats("tottime").print_stats(25)
                stats.sort_stats("cumulative").print_stats(HERE, 40)  # this repository's
        print(f"  {args.turns:,} turns in {time.perf_counter() - started:.0f} s")
    creates.print()
    cpu.print()
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
    p.add_argument("--cold", action="store_true", help="no history cached: the chain walked")
    args = p.parse_args()
    store = "sqlite" if args.sqlite else "postgresql"
    print(f"{store}, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores here")
    asyncio.run(main_async(args))
    print(f"\nload average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
