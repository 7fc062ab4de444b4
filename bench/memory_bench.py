"""Memory soak: does a server's RSS stay flat under a steady load, or grow with every response?

Starts `resplog serve` (scripted engine, no delay) on a fresh PostgreSQL database (or
SQLite), keeps `--clients` streaming creates of `--tokens` tokens each in flight for
`--responses` responses, and reads the server's RSS (from /proc/<pid>/status) every
`--every` responses. It prints each checkpoint's RSS beside the baseline taken at the end
of the warm-up (`--warmup` responses), and the growth per 100,000 responses since then. The
target: under 1 MiB per 100,000 responses once warm. Exits 1 past `--max-growth-mib` (when
given). With `--url` and `--pid` it loads a server already running instead. Not a test.

`--tracemalloc FRAMES` says what is kept: the server runs with a `sitecustomize` the bench
writes to a temporary directory, whose SIGUSR2 handler starts `tracemalloc` (keeping FRAMES
frames of each allocation) the first time, and each time collects garbage and dumps a
snapshot. The bench signals it at the warm-up's end and at each checkpoint after, prints
what Python holds that it allocated since the warm-up (beside the RSS), and at the end the
allocation sites that grew most from the first checkpoint after the warm-up to the last
(what a response in flight holds is in both, so what is left is what the responses done
between them kept). The server's own code has no such hook; tracing slows it (several
times with many frames), so compare RSS figures only between runs without it.

    .venv/bin/python bench/memory_bench.py --clients 30 --tokens 200 --responses 60000
    .venv/bin/python bench/memory_bench.py --sqlite --clients 8 --tokens 20 \\
        --responses 3000 --warmup 1000 --every 500                            # seconds
    .venv/bin/python bench/memory_bench.py --clients 30 --tokens 20 --responses 50000 \\
        --tracemalloc 12                                   # what the growth is made of
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, database_arguments, parser, serving

# The server's `sitecustomize` under `--tracemalloc`: on SIGUSR2, tracing started (the first
# time: what the warm-up allocated is not traced, and the start is not slowed), a full
# collection, then a snapshot dumped as the next number in $RESPLOG_BENCH_SNAPSHOTS
# (written under another name and renamed, so that a file the bench sees is whole).
SITECUSTOMIZE = """
import gc, os, signal, tracemalloc

def _dump(signum, frame):
    if not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ["RESPLOG_BENCH_TRACE_FRAMES"]))
    where = os.environ["RESPLOG_BENCH_SNAPSHOTS"]
    n = sum(name.endswith(".snap") for name in os.listdir(where))
    gc.collect()
    part = os.path.join(where, f"{n}.part")
    tracemalloc.take_snapshot().dump(part)
    os.rename(part, os.path.join(where, f"{n}.snap"))

if os.environ.get("RESPLOG_BENCH_SNAPSHOTS"):
    signal.signal(signal.SIGUSR2, _dump)
"""
# Allocations of the tracing itself and of imports, left out of the comparison.
UNTRACED = [
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
]


class Snapshots:
    """The snapshots a server under `--tracemalloc` dumped into `where` when signalled."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.paths: list[Path] = []

    async def take(self, pid: int) -> tracemalloc.Snapshot:
        path = self.where / f"{len(self.paths)}.snap"
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 600
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server dumped no {path.name} (does it trace?)")
            await asyncio.sleep(0.1)
        self.paths.append(path)
        return tracemalloc.Snapshot.load(str(path)).filter_traces(UNTRACED)


@contextlib.contextmanager
def traced(frames: int) -> Iterator[Snapshots]:
    """The environment the server then starts with: the `sitecustomize` that traces `frames`
    frames an allocation once signalled and dumps snapshots (into a temporary directory,
    removed after)."""
    with tempfile.TemporaryDirectory(prefix="resplog-tracemalloc-") as tmp:
        site, where = Path(tmp, "site"), Path(tmp, "snapshots")
        site.mkdir()
        where.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        saved = dict(os.environ)
        path = os.environ.get("PYTHONPATH", "")
        os.environ.update(
            RESPLOG_BENCH_TRACE_FRAMES=str(frames),
            PYTHONPATH=os.pathsep.join(p for p in (str(site), path) if p),
            RESPLOG_BENCH_SNAPSHOTS=str(where),
        )
        try:
            yield Snapshots(where)
        finally:
            os.environ.clear()
            os.environ.update(saved)


def traced_mib(snapshot: tracemalloc.Snapshot) -> float:
    return sum(s.size for s in snapshot.statistics("filename")) / 2**20


def grown(first: tracemalloc.Snapshot, last: tracemalloc.Snapshot, responses: int) -> None:
    """The allocation sites (the line, then the whole traceback) that grew most from `first`
    to `last`, `responses` apart."""
    print(f"\nwhat grew over {responses:,} responses (alive at the last snapshot, not the first)")
    for key, top in (("lineno", 15), ("traceback", 8)):
        print(f"\nby {key}:\n")
        for stat in last.compare_to(first, key)[:top]:
            per = stat.size_diff / responses if responses else float("nan")
            print(
                f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+8,} blocks "
                f"({per:+.1f} B a response)  now {stat.size / 1024:.1f} KiB"
            )
            frames = stat.traceback.format(most_recent_first=True)
            for line in frames if key == "traceback" else frames[:1]:
                print(f"      {line.strip()}")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def load(
    url: str, pid: int, args: argparse.Namespace, snapshots: Snapshots | None = None
) -> list[tuple[int, float]]:
    """`args.clients` loops streaming one create after another until `args.responses` are
    done: the (responses, RSS MiB) checkpoints, the warm-up's end and the last included.
    With `snapshots`, one is taken at the warm-up's end and at each checkpoint after."""
    done = errors = 0
    traces: list[tuple[int, tracemalloc.Snapshot]] = []
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
                n = done
                marks.append((n, rss_mib(pid)))
                rate = n / (time.monotonic() - started)
                python = ""
                if snapshots is not None and n >= args.warmup:
                    traces.append((n, await snapshots.take(pid)))
                    python = f", Python {traced_mib(traces[-1][1]):6.2f} MiB"
                print(
                    f"  {n:>8,} responses: RSS {marks[-1][1]:7.1f} MiB{python} "
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
    if len(traces) > 2:  # the first is taken as tracing starts: nothing in it
        grown(traces[1][1], traces[-1][1], traces[-1][0] - traces[1][0])
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
    p.add_argument(
        "--tracemalloc",
        type=int,
        metavar="FRAMES",
        help="trace the server's allocations (FRAMES frames each) and say what grew",
    )
    args = p.parse_args()
    if args.url:
        if args.pid is None:
            p.error("--url needs --pid")
        if args.tracemalloc:
            p.error("--tracemalloc starts the server itself: not with --url")
        marks = asyncio.run(load(args.url, args.pid, args))
    else:
        with contextlib.ExitStack() as stack:
            snapshots = stack.enter_context(traced(args.tracemalloc)) if args.tracemalloc else None
            server = stack.enter_context(
                serving(*args.serve_arg, sqlite=args.sqlite, admin_url=args.database_url)
            )
            store = "sqlite" if args.sqlite else "postgres"
            print(f"server {server.base_url} (pid {server.process.pid}) on {store}", flush=True)
            marks = asyncio.run(load(server.base_url, server.process.pid, args, snapshots))
    growth = report(marks, args)
    return 1 if args.max_growth_mib is not None and not growth <= args.max_growth_mib else 0


if __name__ == "__main__":
    sys.exit(main())
