"""What a create costs as its `previous_response_id` chain grows: a chain of `--turns`
plain creates through the service (scripted engine, no delay), and at turns 1, 100 and
500 the median of `--samples` creates continuing that turn. Beside it, in the same run,
the history load alone: the one-query walk the service uses (`ResponseIndex.chain`)
against the old walk (two queries per earlier turn, the whole snapshot decoded).
Prints milliseconds; not a test.

    .venv/bin/python bench/chain_bench.py            # PostgreSQL (a fresh database)
    .venv/bin/python bench/chain_bench.py --sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.store.migrate import upgrade_async
from adapters.wiring import open_bundle
from bench.databases import database_arguments, drop_postgres, fresh_postgres
from domain.generation import Turn
from service.bundle import Bundle
from service.prompts.history import load_history
from service.responses import modes as responses
from service.responses.reads import request_of, snapshot, visible_row
from service.settings import Settings
from service.wire import Limits, parse_create_body

OWNER = "bench"
CHECKPOINTS = (1, 100, 500)


async def old_history(svc: Bundle, previous_id: str | None, owner: str) -> list[Turn]:
    """The walk before `ResponseIndex.chain`: per turn, its row, then its first event."""
    turns: list[Turn] = []
    while previous_id is not None:
        row = await visible_row(svc, previous_id, owner)
        created = await request_of(svc, previous_id)
        final = snapshot(row)
        assert created.facts is not None
        turns.append(
            Turn(
                response_id=previous_id,
                instructions=final.instructions,
                input=created.facts.input,
                output=final.output,
            )
        )
        previous_id = final.previous_response_id
    turns.reverse()
    return turns


def body(previous: str | None) -> bytes:
    meta = '{"scripted_delay_ms": "0", "scripted_tokens": "24"}'
    prev = "" if previous is None else f', "previous_response_id": "{previous}"'
    return f'{{"model": "scripted", "input": "another turn", "metadata": {meta}{prev}}}'.encode()


async def create(svc: Bundle, previous: str | None) -> str:
    req = parse_create_body(body(previous), Limits())
    return (await responses.create_and_wait(svc, req, OWNER)).id


async def median_ms(samples: int, call: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def run(url: str, turns: int, samples: int) -> None:
    await upgrade_async(url)
    settings = Settings(database_url=url, scripted_delay_ms=0, workers=0)
    async with open_bundle(settings) as svc:
        chain: list[str] = []
        print(f"{'turn':>5} {'create':>10} {'history: one query':>20} {'old walk':>10}  (ms)")
        for turn in range(1, turns + 1):
            chain.append(await create(svc, chain[-1] if chain else None))
            if turn in CHECKPOINTS:
                last = chain[-1]
                made = await median_ms(samples, lambda last=last: create(svc, last))
                new = await median_ms(samples, lambda last=last: load_history(svc, last, OWNER))
                old = await median_ms(samples, lambda last=last: old_history(svc, last, OWNER))
                print(f"{turn:>5} {made:>10.2f} {new:>20.2f} {old:>10.2f}")


async def main_async(args: argparse.Namespace) -> None:
    if args.sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            await run(f"sqlite+aiosqlite:///{tmp}/chain.db", args.turns, args.samples)
        return
    url, name = await fresh_postgres(args.database_url)
    try:
        await run(url, args.turns, args.samples)
    finally:
        await drop_postgres(args.database_url, name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    database_arguments(p)
    p.add_argument("--turns", type=int, default=500)
    p.add_argument("--samples", type=int, default=15)
    args = p.parse_args()
    print(f"{'sqlite' if args.sqlite else 'postgresql'}, median of {args.samples} per figure")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
