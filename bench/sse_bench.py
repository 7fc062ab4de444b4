"""What the SSE path of one streaming create costs, in-process: the hub's subscription of
a new stream, its tail (`follow`, handed what the process commits), a wrapper generator
as the create's (`tail_new`), and `frames` with its keep-alive timer, read to the end,
on uvloop as `serve` runs. Each stream is 16 events, handed over in three deliveries (2,
3 and 11 events, a turn of the loop apart), as a create in a burst meets them; µs of CPU a
stream, over `--number` streams a round, the median and the least of `--rounds`.

    .venv/bin/python bench/sse_bench.py

With `--against TREE` (a checkout of another commit, e.g. `git worktree add /tmp/before
HEAD~1`), each round also times TREE's code in a child process (`PYTHONPATH=TREE`, same
venv), the two in turn, and prints the ratio this tree / that tree. (This box's timings
move by a tenth from minute to minute: compare the two trees within a run.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[1]))

import uvloop

from adapters.http.sse import frames
from adapters.store.hub import Hub
from adapters.store.tail import follow
from service.ports import StoredEvent

DELIVERIES = (2, 3, 11)


def stored(rid: str, position: int, last: bool) -> StoredEvent:
    kind = "response.completed" if last else "response.output_text.delta"
    data = b'{"type":"%s","sequence_number":%d,"delta":"tok"}' % (kind.encode(), position)
    return StoredEvent(rid, position, kind, data, None, 0.0)


async def _read(_stream: str, _after: int, _limit: int) -> tuple[list[StoredEvent], bool]:
    raise AssertionError("a new stream's tail is handed its events; it reads nothing")


async def _ended(_stream: str, _after: int) -> bool:
    raise AssertionError("a new stream's tail is handed its events; it reads nothing")


async def wrapped(tail: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
    """As `service.responses.create.tail_new` wraps a create's tail: what the tail yields, a batch
    of events (or, in a tree before the tail gave batches, an event) at a time."""
    try:
        async for item in tail:
            yield item
    finally:
        await tail.aclose()


async def one_stream(hub: Hub, rid: str) -> int:
    sub = hub.open(rid)
    sub.position = -1
    tail = follow(
        rid, -1, hub=hub, read=_read, ended=_ended, poll_interval=5.0, page=100, opened=sub
    )
    body = frames(wrapped(tail), keepalive_s=15.0)
    count = sum(DELIVERIES)
    events = [stored(rid, p, p == count - 1) for p in range(count)]

    async def commit() -> None:
        at = 0
        for n in DELIVERIES:
            await asyncio.sleep(0)
            hub.publish({rid: events[at : at + n]})
            at += n

    committing = asyncio.ensure_future(commit())
    written = 0
    async for write in body:
        written += len(write)
    await committing
    return written


def measure(number: int) -> float:
    """µs of CPU a stream, over `number` streams."""

    async def run() -> float:
        hub = Hub()
        for i in range(min(number, 200)):  # warm up
            await one_stream(hub, f"resp_warm{i}")
        began = time.process_time()
        for i in range(number):
            await one_stream(hub, f"resp_{i}")
        return (time.process_time() - began) / number * 1e6

    return uvloop.run(run())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--number", type=int, default=1000, help="streams a round")
    p.add_argument("--against", type=Path, metavar="TREE", help="time TREE's code beside")
    # One round, printed as JSON: what --against runs on the other tree.
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.number < 1 or args.rounds < 1:
        p.error("--number and --rounds must be at least 1")
    if args.json:
        print(json.dumps(measure(args.number)))
        return
    here: list[float] = []
    there: list[float] = []
    for _ in range(args.rounds):
        here.append(measure(args.number))
        if args.against is not None:
            env = {**os.environ, "PYTHONPATH": str(args.against.resolve())}
            child = [sys.executable, __file__, "--json", "--number", str(args.number)]
            out = subprocess.run(child, env=env, check=True, capture_output=True, text=True)
            there.append(json.loads(out.stdout))
    print(
        f"the SSE path of one create's stream ({sum(DELIVERIES)} events in "
        f"{len(DELIVERIES)} deliveries), µs of CPU a stream, {args.rounds} rounds of "
        f"{args.number}:"
    )
    if args.against is None:
        print("| | median | least |\n|---|---|---|")
        print(f"| this tree | {statistics.median(here):.1f} | {min(here):.1f} |")
        return
    print(f"| | this tree | {args.against} | ratio |\n|---|---|---|---|")
    for name, pick in (("median", statistics.median), ("least", min)):
        ours, theirs = pick(here), pick(there)
        print(f"| {name} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")


if __name__ == "__main__":
    main()
