"""What encoding events for the log costs, in-process: `encode` (an event's wire bytes and,
apart, its facts) and `encode_append` (a batch's rows and its `responses` row's snapshot),
over the events of the domain's scenario catalogue (tests/unit/domain_helpers.py: every
event tag and every ending; each scenario one stream, appended whole), in µs an event, the
median of `--rounds` timings.

    .venv/bin/python bench/codec_bench.py

With `--against TREE` (a checkout of another commit, e.g. `git worktree add /tmp/before
HEAD~1`), each round also times TREE's code in a child process (`PYTHONPATH=TREE`, same
venv), the two in turn, and prints the ratio this tree / that tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

sys.path.insert(0, os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[1]))

from adapters.store.rows import encode_append
from domain.events import encode
from tests.unit.domain_helpers import RESPONSE_ID, SCENARIOS


def measure(number: int) -> dict[str, float]:
    """µs an event for each function, over the whole catalogue `number` times."""
    streams = [make().events for make in SCENARIOS.values()]
    events = [e for stream in streams for e in stream]

    def encode_all() -> None:
        for event in events:
            encode(event)

    def append_all() -> None:
        for stream in streams:
            encode_append(RESPONSE_ID, -1, stream, 1.0)

    per_event = 1e6 / (number * len(events))
    return {
        "encode": timeit.timeit(encode_all, number=number) * per_event,
        "encode_append": timeit.timeit(append_all, number=number) * per_event,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--number", type=int, default=300, help="passes over the catalogue a round")
    p.add_argument("--against", type=Path, metavar="TREE", help="time TREE's code beside")
    # One round, printed as JSON: what --against runs on the other tree.
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.json:
        print(json.dumps(measure(args.number)))
        return
    here: list[dict[str, float]] = []
    there: list[dict[str, float]] = []
    for _ in range(args.rounds):
        here.append(measure(args.number))
        if args.against is not None:
            env = {**os.environ, "PYTHONPATH": str(args.against.resolve())}
            child = [sys.executable, __file__, "--json", "--number", str(args.number)]
            out = subprocess.run(child, env=env, check=True, capture_output=True, text=True)
            there.append(json.loads(out.stdout))
    events = sum(len(make().events) for make in SCENARIOS.values())
    print(f"{len(SCENARIOS)} streams, {events} events; µs an event, median of {args.rounds}:")
    if args.against is None:
        print("| function | µs an event |\n|---|---|")
        for name in here[0]:
            print(f"| `{name}` | {statistics.median(r[name] for r in here):.2f} |")
        return
    print(f"| function | this tree | {args.against} | ratio |\n|---|---|---|---|")
    for name in here[0]:
        ours = statistics.median(r[name] for r in here)
        theirs = statistics.median(r[name] for r in there)
        print(f"| `{name}` | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} |")


if __name__ == "__main__":
    main()
