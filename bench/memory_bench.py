"""Memory soak: does a server's RSS stay flat under a steady load, or grow with every response?

Starts `resplog serve` (scripted engine, no delay) on a fresh PostgreSQL database (or
SQLite), keeps `--clients` streaming creates of `--tokens` tokens each in flight for
`--responses` responses, and reads the server's RSS (from /proc/<pid>/status) every
`--every` responses. It prints each checkpoint's RSS beside the baseline taken at the end
of the warm-up (`--warmup` responses), and the growth per 100,000 responses since then. The
target: under 1 MiB per 100,000 responses once warm. Exits 1 past `--max-growth-mib` (when
given). With `--url` and `--pid` it loads a server already running instead. Not a test.

    .venv/bin/python bench/memory_bench.py --clients 30 --tokens 200 --responses 60000
    .venv/bin/python bench/memory_bench.py --sqlite --clients 8 --tokens 20 \\
        --responses 3000 --warmup 1000 --every 500                            # seconds
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, database_arguments, parser, serving


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def load(url: str, pid: int, args: argparse.Namespace) -> list[tuple[int, float]]:
    """`args.clients` loops streaming one create after another until `args.responses` are
    done: the (responses, RSS MiB) checkpoints, the warm-up's end and the last included."""
    done = errors = 0
    first_error = ""
    marks: list[tuple[int, float]] = []
    started = time.monotonic()
    body = {
        "model": "scripted",
        "input": "How does the log keep a response?",
        "stream": True,
        "metadata": {"scripted_tokens": str(args.tokens), "scripted_delay_ms": "0"},
    }

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal done, errors, first_error
        while done + errors < args.responses:
            try:
                async with http.stream("POST", "/v1/responses", json=body) as answer:
                    async for _ in answer.aiter_raw():
                        pass
                    error = "" if answer.status_code == 200 else f"HTTP {answer.status_code}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            if error:
                errors += 1
                first_error = first_error or error
                continue
            done += 1
            if done == args.warmup or done % args.every == 0:
                marks.append((done, rss_mib(pid)))
                rate = done / (time.monotonic() - started)
                print(
                    f"  {done:>8,} responses: RSS {marks[-1][1]:7.1f} MiB "
                    f"({rate:.0f}/s, {errors} errors)",
                    flush=True,
                )

    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(args.clients)))
    if not marks or marks[-1][0] != done:
        marks.append((done, rss_mib(pid)))
    if first_error:
        print(f"{errors} errors, the first: {first_error}")
    return marks


def report(marks: list[tuple[int, float]], args: argparse.Namespace) -> float:
    """Prints each checkpoint beside the warm-up's baseline (in KiB: the harness's tables
    keep three digits, too few for a MiB's tenths) and the growth per 100,000 after it."""
    warm = next(((n, rss) for n, rss in marks if n >= args.warmup), None)
    rss = Table(f"server RSS, {args.clients} clients, {args.tokens} tokens", "KiB")
    baseline = f"after warm-up ({warm[0]:,})" if warm else ""
    for n, mib in marks:
        rss.add(f"at {n:,} responses", mib * 1024, *((baseline, warm[1] * 1024) if warm else ()))
    rss.print()
    growth = float("nan")
    if warm and marks[-1][0] > warm[0]:
        growth = (marks[-1][1] - warm[1]) / (marks[-1][0] - warm[0]) * 100_000
        per = Table("growth after the warm-up (target: under 1)", "MiB per 100,000 responses")
        per.add(f"{warm[0]:,} to {marks[-1][0]:,} responses", growth)
        per.print()
    return growth


def main() -> int:
    p = parser(__doc__ or "")
    database_arguments(p)
    p.add_argument("--clients", type=int, default=30, help="streaming clients at once")
    p.add_argument("--tokens", type=int, default=200, help="tokens of each response")
    p.add_argument("--responses", type=int, default=60_000, help="responses in all")
    p.add_argument("--warmup", type=int, default=10_000, help="responses before the baseline")
    p.add_argument("--every", type=int, default=10_000, help="read the RSS every N responses")
    p.add_argument("--max-growth-mib", type=float, help="exit 1 past this per 100,000")
    p.add_argument("--url", help="load this running server instead of starting one")
    p.add_argument("--pid", type=int, help="the running server's process id (with --url)")
    p.add_argument("--serve-arg", action="append", default=[], help="one more `serve` flag")
    args = p.parse_args()
    if args.url:
        if args.pid is None:
            p.error("--url needs --pid")
        marks = asyncio.run(load(args.url, args.pid, args))
    else:
        with serving(*args.serve_arg, sqlite=args.sqlite, admin_url=args.database_url) as server:
            store = "sqlite" if args.sqlite else "postgres"
            print(f"server {server.base_url} (pid {server.process.pid}) on {store}", flush=True)
            marks = asyncio.run(load(server.base_url, server.process.pid, args))
    growth = report(marks, args)
    return 1 if args.max_growth_mib is not None and not growth <= args.max_growth_mib else 0


if __name__ == "__main__":
    sys.exit(main())
