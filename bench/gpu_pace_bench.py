"""Server CPU per response at a GPU's pace: each tree's beside the first tree's.

What `resplog serve` spends on each streamed response while an engine writes its tokens at
a GPU's pace, with many streams open at once.

For each `--tree` (a checkout of resplog: its code runs from `PYTHONPATH=TREE`, under this
interpreter's virtual environment) the bench starts one `resplog serve` with the scripted
engine paced at `--rate` tokens a second per stream and `--tokens` answer tokens, on the
embedded SQLite store (a file in a temporary folder) and on PostgreSQL (a fresh database of
its own for each server on `--pg`'s server, dropped after). A round holds `--streams`
clients, each sending `--per-stream` streaming creates one after another and reading each
to its `response.completed` (their first creates spread over one answer's time, so that the
streams do not move in step); its figure is the server's CPU time over the round (its
children included, from /proc) divided by the responses completed. The rounds alternate
between the trees (A B B A A B ...), so that each meets the same load of a shared machine,
and the bench prints each tree's median beside the first tree's, and the median of their
ratios round by round. Each server first runs one short warm-up round, not counted.

The client is httpx, reading the raw SSE bytes (`--client openai`: the official SDK, which
parses every event into objects, at more of the client's CPU). The machine's load average is
printed beside each round: the figures are the server's CPU seconds, which another process's
load moves less than it moves times, but not to nothing.

    git worktree add /tmp/before HEAD~1
    .venv/bin/python bench/gpu_pace_bench.py --tree /tmp/before --tree . --rounds 4
    .venv/bin/python bench/gpu_pace_bench.py --tree . --store sqlite --rate 50
    .venv/bin/python bench/gpu_pace_bench.py --tree . --tree . --rounds 2 --streams 8 \\
        --per-stream 1 --tokens 20 --rate 400 --store sqlite                  # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import PG, Table, cpu_seconds, median, parser, scripted, serving
from tests.e2e.conftest import Server

DONE = b"response.completed"


@dataclass
class Tree:
    """One checkout, its server for the store in hand, and its figures by round."""

    path: Path
    label: str
    server: Server | None = None
    cpu: list[float] = field(default_factory=list)  # CPU seconds a response
    rates: list[float] = field(default_factory=list)  # responses a second


def _label(letter: str, tree: Path) -> str:
    got = subprocess.run(
        ["git", "-C", str(tree), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return f"{letter}: {tree} ({got.stdout.strip() if got.returncode == 0 else 'no git'})"


async def _one_httpx(client: httpx.AsyncClient, body: dict[str, object]) -> bool:
    """One streaming create, its SSE read as raw bytes: whether it completed."""
    seen, tail = False, b""
    async with client.stream("POST", "/v1/responses", json=body) as reply:
        if reply.status_code != 200:
            return False
        async for chunk in reply.aiter_raw():
            seen = seen or DONE in tail + chunk
            tail = chunk[-len(DONE) :]
    return seen


async def _one_sdk(client: Any, body: dict[str, object]) -> bool:
    last = None
    async for event in await client.responses.create(**body):
        last = event.type
    return last == "response.completed"


async def one_round(base: str, args: argparse.Namespace, per_stream: int) -> tuple[int, int]:
    """`args.streams` clients, `per_stream` creates each: (completed, failed)."""
    done, failed = 0, 0
    limits = httpx.Limits(max_connections=args.streams, max_keepalive_connections=args.streams)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as http:
        one, client = _one_httpx, http
        if args.client == "openai":  # its own connection pool (of up to 1,000 connections)
            import openai

            one, client = (
                _one_sdk,
                openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="-", max_retries=0),
            )

        async def stream(i: int) -> None:
            nonlocal done, failed
            await asyncio.sleep(args.tokens / args.rate * i / args.streams)
            for k in range(per_stream):
                body: dict[str, object] = {"model": "scripted", "input": f"s{i} r{k}"}
                try:
                    ok = await one(client, {**body, "stream": True})
                except (httpx.HTTPError, OSError) as exc:
                    print(f"  stream {i}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    ok = False
                done, failed = done + ok, failed + (not ok)

        await asyncio.gather(*(stream(i) for i in range(args.streams)))
        if client is not http:
            await client.close()
    return done, failed


async def measure(tree: Tree, args: argparse.Namespace, n: int) -> None:
    assert tree.server is not None
    pid, load = tree.server.process.pid, os.getloadavg()[0]
    began_cpu, began, mine = cpu_seconds(pid), time.monotonic(), time.process_time()
    done, failed = await one_round(tree.server.base_url, args, args.per_stream)
    wall, spent = time.monotonic() - began, cpu_seconds(pid) - began_cpu
    per, client = spent / max(done, 1), (time.process_time() - mine) / max(done, 1)
    tree.cpu.append(per)
    tree.rates.append(done / wall)
    print(
        f"  round {n} {tree.label}: {done} responses ({failed} failed) in {wall:.1f} s, "
        f"server {spent:.2f} CPU s = {per * 1e3:.2f} ms a response "
        f"(client {client * 1e3:.2f} ms); load {load:.2f}",
        flush=True,
    )


async def rounds(trees: list[Tree], args: argparse.Namespace) -> None:
    for tree in trees:
        assert tree.server is not None
        await one_round(tree.server.base_url, args, 1)  # warm-up
    for n in range(args.rounds):
        for tree in trees if n % 2 == 0 else trees[::-1]:
            await measure(tree, args, n + 1)


def bench_store(store: str, args: argparse.Namespace) -> None:
    print(
        f"\n## {store}: {args.streams} streams, {args.tokens} tokens at {args.rate:g}/s, "
        f"{args.per_stream} responses a stream a round",
        flush=True,
    )
    trees = [Tree(path, _label(chr(65 + i), path)) for i, path in enumerate(args.tree)]
    engine = (*scripted(1000 / args.rate), "--scripted-tokens", str(args.tokens))
    with contextlib.ExitStack() as stack:
        for tree in trees:
            tree.server = stack.enter_context(
                serving(
                    *args.serve_arg,
                    sqlite=store == "sqlite",
                    admin_url=args.pg,
                    engine=engine,
                    tree=tree.path,
                )
            )
        asyncio.run(rounds(trees, args))
    a = trees[0]
    cpu = Table(f"{store}: server CPU a response, median of {args.rounds} rounds", "ms")
    rate = Table(f"{store}: responses a second, median of {args.rounds} rounds", "responses/s")
    for tree in trees:
        base = ("A", median(a.cpu) * 1e3) if tree is not a else ()
        cpu.add(tree.label, median(tree.cpu) * 1e3, *base)
        rate.add(tree.label, median(tree.rates), *(("A", median(a.rates)) if base else ()))
    cpu.print()
    for tree in trees[1:]:  # each round's runs ran next to each other
        paired = median([b / x for x, b in zip(a.cpu, tree.cpu, strict=True)])
        print(f"\n{tree.label[0]} / A round by round, median: {paired:.3f}")
    rate.print()


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="a resplog checkout to serve (repeat to compare; default: this one)",
    )
    p.add_argument(
        "--store",
        choices=["sqlite", "postgres"],
        action="append",
        help="store(s) to bench (repeatable; default: both)",
    )
    p.add_argument(
        "--pg",
        default=PG,
        help="PostgreSQL server (a database on it) to make each server's database "
        "on (default: $RESPLOG_TEST_PG_URL, else the test suite's)",
    )
    p.add_argument("--rate", type=float, default=100.0, help="tokens a second per stream")
    p.add_argument("--tokens", type=int, default=200, help="answer tokens a response")
    p.add_argument("--streams", type=int, default=64, help="concurrent streams")
    p.add_argument("--per-stream", type=int, default=10, help="responses a stream a round")
    p.add_argument("--rounds", type=int, default=4, help="measured rounds per tree and store")
    p.add_argument("--client", choices=["httpx", "openai"], default="httpx")
    p.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        help="one more argument for `resplog serve` (repeatable)",
    )
    args = p.parse_args()
    args.tree = [t.resolve() for t in (args.tree or [Path(__file__).resolve().parents[1]])]
    print(f"cores: {os.cpu_count()}, load average at start: {os.getloadavg()}")
    for store in args.store or ["sqlite", "postgres"]:
        bench_store(store, args)


if __name__ == "__main__":
    main()
