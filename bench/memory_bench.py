"""Memory soak: does a server's RSS stay flat under a steady load, or grow with every response?

Starts `resplog serve` (scripted engine, no delay) on a fresh PostgreSQL database (or
SQLite), keeps `--clients` streaming creates of `--tokens` tokens each in flight for
`--responses` responses, and reads the server's RSS (from /proc/<pid>/status) every
`--every` responses. It prints each checkpoint's RSS beside the baseline taken at the end
of the warm-up (`--warmup` responses), and the growth per 100,000 responses since then. The
target: under 1 MiB per 100,000 responses once warm. Exits 1 past `--max-growth-mib` (when
given). With `--url` and `--pid` it loads a server already running instead. Not a test.

`--heap` says what holds the memory: the server runs with a `sitecustomize` the bench writes
to a temporary directory, whose SIGUSR2 handler collects garbage and writes down Python's
allocated blocks, pymalloc's arenas and the bytes in use in them, and glibc's heap in use
and free. The bench signals it at the warm-up's end and at each checkpoint after, and
prints each figure's growth per 100,000 responses: blocks that grow are objects kept;
arenas or malloc's free bytes that grow while the blocks do not are the allocators' own.
`--cycles` (with or without `--heap`) also counts, by type, the objects that only the
cyclic collector freed (reference counts could not) between checkpoints, per response:
garbage that waits for a full collection, which runs rarely (adapters/cli/memory.py).
`--tracemalloc FRAMES` also starts `tracemalloc` (FRAMES frames an allocation) at the first
signal, dumps a snapshot at each, and at the end prints the allocation sites that grew most
from the first checkpoint after the warm-up to the last (what a response in flight holds is
in both; what the responses done between them kept is not). The server's own code has no
such hook; tracing slows it several times, so compare RSS only between runs without it.

    .venv/bin/python bench/memory_bench.py --clients 30 --tokens 200 --responses 60000
    .venv/bin/python bench/memory_bench.py --sqlite --clients 8 --tokens 20 \\
        --responses 3000 --warmup 1000 --every 500                            # seconds
    .venv/bin/python bench/memory_bench.py --clients 30 --tokens 20 --responses 60000 --heap
    .venv/bin/python bench/memory_bench.py --clients 30 --tokens 20 --responses 5000 \\
        --warmup 2000 --every 1000 --cycles
    .venv/bin/python bench/memory_bench.py --clients 30 --tokens 20 --responses 40000 \\
        --tracemalloc 10                                   # what the growth is made of
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, database_arguments, parser, serving

# The server's `sitecustomize` under `--heap` (and `--tracemalloc`): on SIGUSR2, a full
# collection, then what the heap holds written as the next number in
# $RESPLOG_BENCH_HEAP (`N.json`): Python's allocated blocks, pymalloc's arenas and the bytes
# of its blocks in use (from `sys._debugmallocstats`, which writes to descriptor 2), and
# glibc's heap (`mallinfo2`). Under `--tracemalloc` the first signal starts tracing (what the
# warm-up allocated is not traced, and the start is not slowed) and each dumps a snapshot
# too (`N.snap`). Each file is written under another name and renamed, so that a file the
# bench sees is whole, the JSON last.
SITECUSTOMIZE = """
import ctypes, gc, json, os, signal, sys, tempfile, tracemalloc

class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

try:  # once: each CDLL made is a few objects in reference cycles
    _MALLINFO2 = ctypes.CDLL(None).mallinfo2
    _MALLINFO2.restype = _Mallinfo2
except (OSError, AttributeError):  # not glibc, or older than 2.33
    _MALLINFO2 = None

def _malloc():
    if _MALLINFO2 is None:
        return {}
    m = _MALLINFO2()
    return {"malloc_heap": m.arena, "malloc_mmap": m.hblkhd, "malloc_used": m.uordblks,
            "malloc_free": m.fordblks}

_PYMALLOC = {"# arenas allocated current": "arenas", "# bytes in allocated blocks": "pymalloc_used"}

def _pymalloc():
    with tempfile.TemporaryFile() as out:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() in _PYMALLOC:
            found[_PYMALLOC[name.strip()]] = int(value.strip().replace(",", ""))
    return found

def _write(path, write):
    write(path + ".part")
    os.rename(path + ".part", path)

# The objects only the cyclic collector freed since the last signal, by type (it keeps them
# in gc.garbage under DEBUG_SAVEALL, set at the first signal).
def _cycles():
    if not gc.get_debug() & gc.DEBUG_SAVEALL:
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        return {}
    gc.collect()
    found, sites = {}, {}
    for thing in gc.garbage:
        name = type(thing).__module__ + "." + type(thing).__qualname__
        found[name] = found.get(name, 0) + 1
        where = tracemalloc.get_object_traceback(thing)
        if where is not None:  # under --tracemalloc: the frames of the project's own code
            mine = [f for f in where if "/site-packages/" not in f.filename
                    and "/lib/python3" not in f.filename] or list(where)
            site = " < ".join(f"{f.filename}:{f.lineno}" for f in reversed(mine[-3:]))
            sites[site] = sites.get(site, 0) + 1
    gc.garbage.clear()
    return {"cycles": sum(found.values()), "cycle_types": found, "cycle_sites": sites}

def _dump(signum, frame):
    frames = int(os.environ.get("RESPLOG_BENCH_TRACE_FRAMES") or 0)
    if frames and not tracemalloc.is_tracing():
        tracemalloc.start(frames)
    where = os.environ["RESPLOG_BENCH_HEAP"]
    n = sum(name.endswith(".json") for name in os.listdir(where))
    cycles = _cycles() if os.environ.get("RESPLOG_BENCH_CYCLES") else {}
    gc.collect()
    heap = {"blocks": sys.getallocatedblocks(), **_pymalloc(), **_malloc(), **cycles}
    if tracemalloc.is_tracing():
        _write(os.path.join(where, f"{n}.snap"), tracemalloc.take_snapshot().dump)
    def write(path):
        with open(path, "w") as f:
            json.dump(heap, f)
    _write(os.path.join(where, f"{n}.json"), write)

if os.environ.get("RESPLOG_BENCH_HEAP"):
    signal.signal(signal.SIGUSR2, _dump)
"""
# Allocations of the tracing itself and of imports, left out of the comparison.
UNTRACED = [
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
]
# What `--heap` prints of each reading, and how: (key, label, bytes or a count).
HEAP_FIGURES = [
    ("blocks", "Python blocks", False),
    ("cycles", "in cycles", False),
    ("arenas", "pymalloc arenas", False),
    ("pymalloc_used", "pymalloc in use", True),
    ("malloc_used", "malloc in use", True),
    ("malloc_free", "malloc free", True),
]


class Heap:
    """What a server started under `heap_reported` says its heap holds when signalled."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.taken = 0

    async def take(self, pid: int) -> tuple[dict[str, Any], tracemalloc.Snapshot | None]:
        """The heap's figures, and the allocations traced (under `--tracemalloc`)."""
        path = self.where / f"{self.taken}.json"
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 600
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server wrote no {path.name}")
            await asyncio.sleep(0.1)
        self.taken += 1
        figures: dict[str, Any] = json.loads(path.read_text())
        snap = path.with_suffix(".snap")
        if not snap.exists():
            return figures, None
        return figures, tracemalloc.Snapshot.load(str(snap)).filter_traces(UNTRACED)


@contextlib.contextmanager
def heap_reported(frames: int, cycles: bool = False) -> Iterator[Heap]:
    """The environment the server then starts with: the `sitecustomize` that reports its heap
    when signalled, and traces `frames` frames an allocation (0: none) once signalled, and
    with `cycles` counts what only the cyclic collector freed (in a temporary directory,
    removed after)."""
    with tempfile.TemporaryDirectory(prefix="resplog-heap-") as tmp:
        site, where = Path(tmp, "site"), Path(tmp, "heap")
        site.mkdir()
        where.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        saved = dict(os.environ)
        path = os.environ.get("PYTHONPATH", "")
        os.environ.update(
            RESPLOG_BENCH_TRACE_FRAMES=str(frames),
            PYTHONPATH=os.pathsep.join(p for p in (str(site), path) if p),
            RESPLOG_BENCH_HEAP=str(where),
            RESPLOG_BENCH_CYCLES="1" if cycles else "",
        )
        try:
            yield Heap(where)
        finally:
            os.environ.clear()
            os.environ.update(saved)


def heap_line(figures: dict[str, Any]) -> str:
    return ", ".join(
        f"{label} {figures[key] / 2**20:.2f} MiB" if size else f"{label} {figures[key]:,}"
        for key, label, size in HEAP_FIGURES
        if key in figures
    )


def cycled(readings: list[tuple[int, dict[str, Any]]]) -> None:
    """The types the cyclic collector alone freed after the first reading, per response."""
    types: dict[str, int] = {}
    for _, figures in readings[1:]:
        for name, count in figures.get("cycle_types", {}).items():
            types[name] = types.get(name, 0) + count
    if not types:
        return
    responses = readings[-1][0] - readings[0][0]
    print(f"\nfreed only by the cyclic collector, {responses:,} responses (per response)\n")
    for name, count in sorted(types.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {count / responses:8.2f}  {name}")
    sites: dict[str, int] = {}
    for _, figures in readings[1:]:
        for name, count in figures.get("cycle_sites", {}).items():
            sites[name] = sites.get(name, 0) + count
    if sites:
        print("\nallocated at (--tracemalloc; the most recent of the project's frames first)\n")
        for name, count in sorted(sites.items(), key=lambda kv: -kv[1])[:25]:
            print(f"  {count / responses:8.3f}  {name}")


def heap_report(readings: list[tuple[int, dict[str, Any]]]) -> None:
    """Each heap figure's growth per 100,000 responses from the first reading to the last."""
    (n0, first), (n1, last) = readings[0], readings[-1]
    if n1 <= n0:
        return
    grew = Table(f"the heap from {n0:,} to {n1:,} responses", "per 100,000 responses")
    for key, label, size in HEAP_FIGURES:
        if key in first and key in last:
            change = (last[key] - first[key]) / (n1 - n0) * 100_000
            grew.add(f"{label}{' (MiB)' if size else ''}", change / 2**20 if size else change)
    grew.print()


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
    url: str, pid: int, args: argparse.Namespace, heap: Heap | None = None
) -> list[tuple[int, float]]:
    """`args.clients` loops streaming one create after another until `args.responses` are
    done: the (responses, RSS MiB) checkpoints, the warm-up's end and the last included.
    With `heap`, it is read at the warm-up's end and at each checkpoint after."""
    done = errors = 0
    readings: list[tuple[int, dict[str, Any]]] = []
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
                held = ""
                if heap is not None and n >= args.warmup:
                    figures, snapshot = await heap.take(pid)
                    readings.append((n, figures))
                    held = f"; {heap_line(figures)}"
                    if snapshot is not None:
                        traces.append((n, snapshot))
                        held += f", traced {traced_mib(snapshot):.2f} MiB"
                print(
                    f"  {n:>8,} responses: RSS {marks[-1][1]:7.1f} MiB "
                    f"({rate:.0f}/s, {errors} errors){held}",
                    flush=True,
                )

    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(args.clients)))
    if not marks or marks[-1][0] != done:
        marks.append((done, rss_mib(pid)))
    if first_error:
        print(f"{errors} errors, the first: {first_error}")
    if len(readings) > 1:
        heap_report(readings)
        cycled(readings)
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
        "--heap",
        action="store_true",
        help="say at each checkpoint what the server's heap holds (pymalloc, malloc)",
    )
    p.add_argument(
        "--cycles",
        action="store_true",
        help="with --heap: count what only the cyclic collector frees, by type",
    )
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
        if args.tracemalloc or args.heap or args.cycles:
            p.error("--heap and --tracemalloc start the server themselves: not with --url")
        marks = asyncio.run(load(args.url, args.pid, args))
    else:
        with contextlib.ExitStack() as stack:
            heap = None
            if args.heap or args.tracemalloc or args.cycles:
                heap = stack.enter_context(heap_reported(args.tracemalloc or 0, args.cycles))
            server = stack.enter_context(
                serving(*args.serve_arg, sqlite=args.sqlite, admin_url=args.database_url)
            )
            store = "sqlite" if args.sqlite else "postgres"
            print(f"server {server.base_url} (pid {server.process.pid}) on {store}", flush=True)
            marks = asyncio.run(load(server.base_url, server.process.pid, args, heap))
    growth = report(marks, args)
    return 1 if args.max_growth_mib is not None and not growth <= args.max_growth_mib else 0


if __name__ == "__main__":
    sys.exit(main())
