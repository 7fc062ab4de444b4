"""What the hash chain costs: the store's appends, a streaming create and `verify --all`,
each with the chain beside the code without it, in one run.

`appends` and `create` run the same workload on this tree and on a baseline tree (by
default the commit this branch grew from: the code with no digests), alternately,
`--rounds` times each, on a fresh PostgreSQL database each: `appends` in a process of its
own (S streams through the group-commit writer, paced at R events/s each, then flat out:
CPU per 1,000 events, append -> durable p50/p99, events/s); `create` through `resplog
serve` (scripted engine, streaming creates one after another: wall time per create and the
server's CPU per create). `verify` builds one log of E events on this tree, checkpoints it,
and times `resplog verify --all` beside `resplog verify --all --checkpoint` on it.

    .venv/bin/python bench/digest_bench.py
    .venv/bin/python bench/digest_bench.py --phases verify --verify-events 1000000
    .venv/bin/python bench/digest_bench.py --streams 20 --seconds 3 --creates 50 --rounds 2
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

import httpx

from bench.harness import (
    PG,
    Table,
    cpu_seconds,
    database,
    drop_postgres,
    fresh_postgres,
    parser,
    serving,
    workdir,
)

HERE = Path(__file__).resolve().parents[1]

# The appends, as code both trees run (the store's and the aggregate's APIs they share):
# argv url, streams, rate, seconds, burst; prints one JSON object.
_APPENDS = r"""
import asyncio, json, statistics, sys, time
from adapters.store.factory import open_store
from adapters.store.migrate import upgrade_async
from adapters.store.writer import GroupCommitWriter
from domain.builder.emit import emit
from domain.commands import create
from domain.events import RequestFacts
from domain.generation import TextDelta
from domain.objects import InputMessage, InputText, ResponseObject

url, streams, burst = sys.argv[1], int(sys.argv[2]), int(sys.argv[5])
rate, seconds = float(sys.argv[3]), float(sys.argv[4])

def plan(i, n):
    rid = f"resp_bench{i:05d}{int(time.time()*1e6) % 10**9:09d}"
    r = ResponseObject(id=rid, created_at=int(time.time()), status="in_progress", model="m")
    q = InputMessage(id=f"msg_{rid}", role="user", content=[InputText(text="hello " * 20)])
    d = create(r, RequestFacts(owner="bench", input=[q]))
    out, state = [(-1, d.events)], d.state
    for k in range(n):
        d = emit(state, TextDelta(text=f"token{k} "))
        out.append((state.version, d.events))
        state = d.state
    return rid, out

async def run(writer, plans, pace):
    lat, events = [], 0
    async def one(rid, appends):
        nonlocal events
        start = time.perf_counter()
        for k, (v, evs) in enumerate(appends):
            if pace:
                delay = start + k / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            t = time.perf_counter()
            await writer.append(rid, v, evs)
            lat.append(time.perf_counter() - t)
            events += len(evs)
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(rid, a) for rid, a in plans))
    return events, time.process_time() - cpu, time.perf_counter() - wall, sorted(lat)

async def main():
    await upgrade_async(url)
    store = await open_store(url)
    try:
        async with GroupCommitWriter(store) as writer:
            paced = [plan(i, int(rate * seconds)) for i in range(streams)]
            flat = [plan(streams + i, burst) for i in range(streams)]
            ev, cpu, wall, lat = await run(writer, paced, True)
            ev2, cpu2, wall2, _ = await run(writer, flat, False)
    finally:
        await store.close()
    print(json.dumps({
        "cpu_ms_per_1k": 1e6 * cpu / ev, "p50_ms": 1e3 * lat[len(lat) // 2],
        "p99_ms": 1e3 * lat[int(len(lat) * 0.99)], "max_events_s": ev2 / wall2,
    }))

asyncio.run(main())
"""


@contextmanager
def baseline_tree(rev: str) -> Iterator[Path]:
    """A clean copy of `rev`'s files (`git archive`; the repository is only read)."""
    with workdir() as tmp:
        archive = tmp / "tree.tar"
        with archive.open("wb") as out:
            subprocess.run(["git", "-C", str(HERE), "archive", rev], stdout=out, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp / "tree", filter="data")
        yield tmp / "tree"


def _appends(tree: Path, streams: int, rate: float, seconds: float, burst: int) -> dict[str, float]:
    with workdir() as tmp, database(False, tmp) as url:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        args = [str(streams), str(rate), str(seconds), str(burst)]
        done = subprocess.run(
            [sys.executable, "-c", _APPENDS, url, *args],
            env=env,
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
        )
        result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


def _creates(tree: Path, creates: int, tokens: int) -> dict[str, float]:
    with serving(tree=tree) as server:
        body = {
            "model": "m",
            "input": "hello",
            "stream": True,
            "metadata": {"scripted_tokens": str(tokens)},
        }
        walls: list[float] = []
        with httpx.Client(base_url=server.base_url, timeout=60) as http:
            for _ in range(3):  # warm up
                with http.stream("POST", "/v1/responses", json=body) as r:
                    r.read()
            cpu = cpu_seconds(server.process.pid)
            for _ in range(creates):
                t = time.perf_counter()
                with http.stream("POST", "/v1/responses", json=body) as r:
                    r.read()
                walls.append(time.perf_counter() - t)
            cpu = cpu_seconds(server.process.pid) - cpu
    return {"wall_ms": 1e3 * statistics.median(walls), "cpu_ms": 1e3 * cpu / creates}


def _verify(events: int) -> tuple[float, float, int]:
    """Seconds of `verify --all` and of `verify --all --checkpoint` on a log of `events`."""
    url, name = asyncio.run(fresh_postgres(PG))
    try:
        streams = max(1, events // 200)
        per = events // streams
        subprocess.run(
            [sys.executable, "-c", _APPENDS, url, str(streams), "1e9", str(per / 1e9), "0"],
            env={**os.environ, "PYTHONPATH": str(HERE)},
            cwd=HERE,
            check=True,
            capture_output=True,
        )
        with tempfile.TemporaryDirectory() as tmp:
            key, pub, cp = (Path(tmp) / n for n in ("k.pem", "p.pem", "cp.json"))
            subprocess.run(
                ["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)], check=True
            )
            subprocess.run(
                ["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)], check=True
            )
            _resplog(
                "checkpoint", "--signing-key", str(key), "--out", str(cp), "--database-url", url
            )
            t = time.perf_counter()
            _resplog("verify", "--all", "--no-progress", "--database-url", url)
            plain = time.perf_counter() - t
            t = time.perf_counter()
            _resplog(
                "verify", "--all", "--no-progress", "--checkpoint", str(cp),
                "--public-key", str(pub), "--database-url", url,
            )  # fmt: skip
            chained = time.perf_counter() - t
        return plain, chained, streams * (per + 4)
    finally:
        asyncio.run(drop_postgres(PG, name))


def _resplog(*args: str) -> None:
    code = "from adapters.cli import main; main()"
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    subprocess.run([sys.executable, "-c", code, *args], env=env, check=True, capture_output=True)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--phases", default="appends,create,verify")
    p.add_argument("--baseline", default="", help="the revision without the chain")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--streams", type=int, default=50)
    p.add_argument("--rate", type=float, default=50, help="events/s per stream (paced)")
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--burst", type=int, default=400, help="appends per stream, flat out")
    p.add_argument("--creates", type=int, default=100)
    p.add_argument("--tokens", type=int, default=200, help="deltas per streaming create")
    p.add_argument("--verify-events", type=int, default=200_000)
    a = p.parse_args()
    phases = a.phases.split(",")
    rev = (
        a.baseline
        or subprocess.run(
            ["git", "-C", str(HERE), "merge-base", "HEAD", "main"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    print(f"baseline: {rev[:10]} (no digests); this tree: {HERE}")
    tables: list[Table] = []
    with baseline_tree(rev) as base:
        if "appends" in phases:
            runs: dict[str, list[dict[str, float]]] = {"chain": [], "base": []}
            for _ in range(a.rounds):
                for kind, tree in (("base", base), ("chain", HERE)):
                    runs[kind].append(_appends(tree, a.streams, a.rate, a.seconds, a.burst))
            t = Table(
                f"appends: {a.streams} streams x {a.rate:g} events/s for {a.seconds:g} s, "
                f"then {a.burst} appends each flat out (median of {a.rounds})",
                "value",
            )
            for key, label in (
                ("cpu_ms_per_1k", "CPU ms per 1,000 events (paced)"),
                ("p50_ms", "append -> durable p50, ms"),
                ("p99_ms", "append -> durable p99, ms"),
                ("max_events_s", "events/s flat out"),
            ):
                mine = statistics.median(r[key] for r in runs["chain"])
                theirs = statistics.median(r[key] for r in runs["base"])
                t.add(f"{label}, digests on", mine, "digests off", theirs)
            tables.append(t)
        if "create" in phases:
            made: dict[str, list[dict[str, float]]] = {"chain": [], "base": []}
            for _ in range(a.rounds):
                for kind, tree in (("base", base), ("chain", HERE)):
                    made[kind].append(_creates(tree, a.creates, a.tokens))
            t = Table(
                f"streaming creates of {a.tokens} deltas, one after another (median of "
                f"{a.rounds} rounds of {a.creates})",
                "ms",
            )
            for key, label in (("wall_ms", "wall per create"), ("cpu_ms", "server CPU per create")):
                mine = statistics.median(r[key] for r in made["chain"])
                theirs = statistics.median(r[key] for r in made["base"])
                t.add(f"{label}, digests on", mine, "digests off", theirs)
            tables.append(t)
    if "verify" in phases:
        plain, chained, n = _verify(a.verify_events)
        t = Table(f"verify --all on a log of {n:,} events", "s")
        t.add("verify --all --checkpoint", chained, "verify --all", plain)
        tables.append(t)
    for t in tables:
        t.print()


if __name__ == "__main__":
    main()
