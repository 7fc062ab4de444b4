"""Several processes under kill -9: replicas and workers lose, double and strand nothing.

2 API replicas and 2 workers on one PostgreSQL database; N concurrent background + stream
responses from a loopback load generator for a fixed time, with random client drops and
resumes (on a random replica) and random cancels (on a random replica, while a worker
generates). Reports responses/s, events/s, resume and cancel latency (p50/p99), and the
lost / duplicated / stuck counts, which must all be 0; then fold-checks every log and runs
`resplog verify --all`. Exits 1 if any check fails; `tests/e2e/test_soak.py` (marker
`soak`) runs it with chaos.

    .venv/bin/python bench/soak_bench.py --clients 32 --seconds 30
    .venv/bin/python bench/soak_bench.py --chaos-every 3 --lease-ttl-s 2
    .venv/bin/python bench/soak_bench.py --clients 4 --seconds 5

With `--chaos-every S`, every S seconds a random process (an API replica or a worker) is
killed with SIGKILL and a new one started in its place; clients that lose their stream
resume on another replica. The accounting then holds: every response id handed to a client
is a row (rows beyond them are creates whose answer died with their replica), none is left
unfinished once the leases have run out, every client's resumed segments join without a
gap or a duplicate and match the log byte for byte, and `verify --all` is clean.

Cancel latency is the round trip of `POST /v1/responses/{id}/cancel`, which answers only
once the log ends with the cancellation (the worker aborted the engine first), so it bounds
the time from the cancel to the engine's abort. Resume latency is from sending
`GET ?stream=true&starting_after=N` to receiving its first event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import PG, database, parser, pct, workdir
from tests.e2e.cluster import Worker, fold_check, start_worker, stop
from tests.e2e.conftest import RESPLOG, Server, start_server, stop_server

TERMINAL = {"completed", "failed", "cancelled", "incomplete"}


@dataclass
class Seen:
    """What the clients received for one response, over its drops and resumes."""

    frames: dict[int, bytes] = field(default_factory=dict)
    duplicates: int = 0
    cancel_answer: str | None = None


@dataclass
class Run:
    replicas: list[str]
    delay_ms: float
    tokens: int
    drop_p: float
    cancel_p: float
    deadline: float
    seen: dict[str, Seen] = field(default_factory=dict)
    resume_s: list[float] = field(default_factory=list)
    cancel_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    http: dict[str, httpx.AsyncClient] = field(default_factory=dict)
    interrupted: int = 0  # streams cut by a killed replica (then resumed elsewhere)
    unanswered: int = 0  # creates whose replica died before the response id reached us
    kills: list[str] = field(default_factory=list)
    chaos: bool = False


async def read(
    response: httpx.Response,
    seen: Seen,
    stop_after: int | None,
    on_event: Callable[[str | None, int], None] | None = None,
) -> tuple[str | None, int, bool]:
    """Read SSE frames into `seen`; (response id, last position, reached the terminal)."""
    buffer = b""
    rid: str | None = None
    last, count = -1, 0
    async for chunk in response.aiter_bytes():
        buffer += chunk
        *frames, buffer = buffer.split(b"\n\n")
        for frame in frames:
            if not frame.startswith(b"event: "):
                continue
            data = frame.split(b"\ndata: ", 1)[1]
            event = json.loads(data)
            position = event["sequence_number"]
            if position in seen.frames:
                seen.duplicates += 1
            seen.frames[position] = data
            last, count = position, count + 1
            if event["type"] == "response.created":
                rid = event["response"]["id"]
            if on_event is not None:
                on_event(rid, count)
            if event["type"].removeprefix("response.") in TERMINAL:
                return rid, last, True
            if stop_after is not None and count >= stop_after:
                return rid, last, False
    return rid, last, False


async def cancel(run: Run, http: dict[str, httpx.AsyncClient], rid: str, seen: Seen) -> None:
    replica = random.choice(run.replicas)
    t0 = time.perf_counter()
    try:
        answer = await http[replica].post(f"/v1/responses/{rid}/cancel")
    except httpx.TransportError:
        if not run.chaos:
            raise
        seen.cancel_answer = "its replica was killed"
        return
    run.cancel_s.append(time.perf_counter() - t0)
    seen.cancel_answer = answer.json().get("status") if answer.status_code == 200 else "error"


async def one_response(run: Run, http: dict[str, httpx.AsyncClient], rng: random.Random) -> None:
    body = {
        "model": "scripted",
        "input": "soak",
        "background": True,
        "stream": True,
        "metadata": {"scripted_delay_ms": str(run.delay_ms), "scripted_tokens": str(run.tokens)},
    }
    seen = Seen()
    drop_at = rng.randint(3, 30) if rng.random() < run.drop_p else None
    cancel_at = rng.randint(5, 40) if rng.random() < run.cancel_p else None
    tasks: list[asyncio.Task[None]] = []

    def maybe_cancel(rid: str | None, _count: int) -> None:
        if rid is not None and not tasks and len(seen.frames) == cancel_at:
            tasks.append(asyncio.create_task(cancel(run, http, rid, seen)))

    replica = rng.choice(run.replicas)
    rid: str | None = None
    try:
        async with http[replica].stream("POST", "/v1/responses", json=body) as r:
            if r.status_code != 200:
                run.errors.append(f"create: {r.status_code}")
                return
            rid, last, done = await read(r, seen, drop_at, maybe_cancel)
    except httpx.TransportError:
        if not run.chaos or rid is not None:
            raise
        run.unanswered += 1  # its replica was killed before the id reached us
        return
    if rid is None:
        run.errors.append("a stream without response.created")
        return
    run.seen[rid] = seen
    give_up = time.perf_counter() + 120
    while not done:  # dropped: resume elsewhere, a little later
        if time.perf_counter() > give_up:
            run.errors.append(f"{rid}: no terminal event after 120 s of resumes")
            break
        await asyncio.sleep(rng.uniform(0.02, 0.2))
        try:
            got, done = await resume(
                run, http[rng.choice(run.replicas)], rid, last, seen, maybe_cancel
            )
        except httpx.TransportError:
            if not run.chaos:
                raise
            run.interrupted += 1
            got = max(seen.frames, default=-1)
        last = max(last, got)
    await asyncio.gather(*tasks)


async def resume(
    run: Run,
    http: httpx.AsyncClient,
    rid: str,
    last: int,
    seen: Seen,
    on_event: Callable[[str | None, int], None],
) -> tuple[int, bool]:
    """Resume a dropped stream after `last`; (last position read, reached the terminal)."""
    t0 = time.perf_counter()
    timed = False

    def first(_rid: str | None, count: int) -> None:
        nonlocal timed
        if not timed:
            run.resume_s.append(time.perf_counter() - t0)
            timed = True
        on_event(rid, count)

    params = {"stream": "true", "starting_after": str(last)}
    async with http.stream("GET", f"/v1/responses/{rid}", params=params) as r:
        _, got, done = await read(r, seen, None, first)
    return got, done


async def user(run: Run, http: dict[str, httpx.AsyncClient], seed: int) -> None:
    rng = random.Random(seed)
    while time.perf_counter() < run.deadline:
        try:
            await one_response(run, http, rng)
        except httpx.HTTPError as exc:
            run.errors.append(f"{type(exc).__name__}: {exc}")


def _client(base: str, clients: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=4 * clients, max_keepalive_connections=4 * clients)
    return httpx.AsyncClient(base_url=base, timeout=120, limits=limits)


async def load(run: Run, clients: int, chaos: Callable[[], Awaitable[None]] | None) -> float:
    run.http.update({base: _client(base, clients) for base in run.replicas})
    start = time.perf_counter()
    try:
        users = asyncio.gather(*(user(run, run.http, seed) for seed in range(clients)))
        if chaos is None:
            await users
        else:
            await asyncio.gather(users, chaos())
    finally:
        for client in run.http.values():
            await client.aclose()
    return time.perf_counter() - start


@dataclass
class Fleet:
    """The processes under test; `kill_one` replaces one of them, killed with SIGKILL."""

    url: str
    tmp: Path
    lease_ttl_s: float
    worker_slots: int
    servers: list[Server] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    started: int = 0

    def start_server(self) -> Server:
        self.started += 1
        api = ("--workers", "0", "--lease-ttl-s", str(self.lease_ttl_s))
        server = start_server(self.url, "postgres", self.tmp / f"api{self.started}.log", *api)
        self.servers.append(server)
        return server

    def start_worker(self) -> Worker:
        self.started += 1
        flags = ("--workers", str(self.worker_slots), "--lease-ttl-s", str(self.lease_ttl_s))
        worker = start_worker(self.url, self.tmp / f"worker{self.started}.log", *flags)
        self.workers.append(worker)
        return worker

    def stop_all(self) -> None:
        for w in self.workers:
            stop(w.process, w.log_file)
        for s in self.servers:
            stop_server(s)


async def chaos_loop(run: Run, fleet: Fleet, every: float, clients: int, seed: int) -> None:
    """Until the deadline, every `every` seconds: SIGKILL a random replica or worker and
    start another in its place (a replica on a new port, which the clients then use)."""
    rng = random.Random(seed)
    while time.perf_counter() + every < run.deadline:
        await asyncio.sleep(every)
        if rng.random() < 0.5:
            victim = rng.choice(fleet.servers)
            run.replicas.remove(victim.base_url)
            victim.process.kill()
            fleet.servers.remove(victim)
            stop_server(victim)
            fresh = await asyncio.to_thread(fleet.start_server)
            run.http[fresh.base_url] = _client(fresh.base_url, clients)
            run.replicas.append(fresh.base_url)
            run.kills.append("replica")
        else:
            worker = rng.choice(fleet.workers)
            fleet.workers.remove(worker)
            stop(worker.process, worker.log_file, kill=True)
            await asyncio.to_thread(fleet.start_worker)
            run.kills.append("worker")


async def logs(dsn: str, ids: list[str]) -> tuple[dict[str, list[bytes]], dict[str, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT stream_id, position, data FROM events WHERE stream_id = ANY($1) "
            "ORDER BY stream_id, position",
            ids,
        )
        statuses = await conn.fetch("SELECT id, status FROM responses")
    finally:
        await conn.close()
    out: dict[str, list[bytes]] = {}
    for row in rows:
        out.setdefault(row["stream_id"], []).append(row["data"].encode())
    return out, {r["id"]: r["status"] for r in statuses}


async def settle(dsn: str, wait_s: float) -> dict[str, str]:
    """The statuses once no response is left unfinished, or after `wait_s` (leases of
    killed processes must run out before the sweepers end their responses)."""
    deadline = time.perf_counter() + wait_s
    while True:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT id, status FROM responses")
        finally:
            await conn.close()
        status = {r["id"]: r["status"] for r in rows}
        if all(s in TERMINAL for s in status.values()) or time.perf_counter() > deadline:
            return status
        await asyncio.sleep(0.5)


def account(run: Run, status: dict[str, str]) -> int:
    """The chaos accounting; the number of broken promises."""
    missing = [rid for rid in run.seen if rid not in status]
    extra = len(status) - (len(run.seen) - len(missing))
    print(
        f"kills: {len(run.kills)} ({run.kills.count('replica')} replicas, "
        f"{run.kills.count('worker')} workers); ids handed out={len(run.seen)} rows={len(status)} "
        f"(rows without a handed-out id={extra}, creates unanswered={run.unanswered}); "
        f"streams cut and resumed={run.interrupted}; ids without a row={len(missing)}"
    )
    return len(missing) + (extra > run.unanswered)


def report(run: Run, elapsed: float, stored: dict[str, list[bytes]], status: dict[str, str]) -> int:
    lost = sum(
        1
        for rid, seen in run.seen.items()
        if [seen.frames.get(i) for i in range(len(stored.get(rid, [])))] != stored.get(rid)
        or len(seen.frames) != len(stored.get(rid, []))
    )
    duplicated = sum(1 for seen in run.seen.values() if seen.duplicates)
    stuck = sum(1 for s in status.values() if s not in TERMINAL)
    events = sum(len(v) for v in stored.values())
    ends: dict[str, int] = {}
    for rid in run.seen:
        ends[status.get(rid, "missing")] = ends.get(status.get(rid, "missing"), 0) + 1
    cancels = [s.cancel_answer for s in run.seen.values() if s.cancel_answer]
    print(
        f"responses={len(run.seen)} in {elapsed:.1f} s: {len(run.seen) / elapsed:.1f} responses/s, "
        f"{events / elapsed:.0f} events/s (log events of those responses)"
    )
    print(
        f"ends: {ends}; cancels answered: "
        f"{ {a: cancels.count(a) for a in sorted(set(cancels), key=str)} }"
    )
    print(
        f"resume latency: n={len(run.resume_s)} p50 {pct(run.resume_s, 50) * 1e3:.1f} ms "
        f"p99 {pct(run.resume_s, 99) * 1e3:.1f} ms"
    )
    print(
        f"cancel latency: n={len(run.cancel_s)} p50 {pct(run.cancel_s, 50) * 1e3:.1f} ms "
        f"p99 {pct(run.cancel_s, 99) * 1e3:.1f} ms max {max(run.cancel_s, default=0) * 1e3:.1f} ms"
    )
    print(f"lost={lost} duplicated={duplicated} stuck={stuck} client errors={len(run.errors)}")
    for error in run.errors[:5]:
        print(f"  error: {error}")
    return lost + duplicated + stuck + len(run.errors)


def verify_all(url: str) -> int:
    """`resplog verify --all`: its exit status (its report is printed)."""
    done = subprocess.run(
        [RESPLOG, "verify", "--all", "--database-url", url], capture_output=True, text=True
    )
    print(f"verify --all: exit {done.returncode}: {(done.stdout + done.stderr).strip()[-300:]}")
    return done.returncode


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--database-url", default=PG, help="PostgreSQL server for the soak's database")
    p.add_argument("--clients", type=int, default=32, help="concurrent responses")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--delay-ms", type=float, default=10.0, help="scripted pace per delta")
    p.add_argument("--tokens", type=int, default=60, help="answer tokens per response")
    p.add_argument("--drop", type=float, default=0.3, help="share of clients that drop")
    p.add_argument("--cancel", type=float, default=0.2, help="share that get cancelled")
    p.add_argument("--workers", type=int, default=64, help="slots per worker process")
    p.add_argument("--chaos-every", type=float, default=0.0, help="SIGKILL period (0: off)")
    p.add_argument("--lease-ttl-s", type=float, default=15.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    sys.exit(soak(args))


def soak(args: argparse.Namespace) -> int:
    with workdir() as tmp, database(False, tmp, args.database_url) as url:
        return soak_on(url, tmp, args)


def soak_on(url: str, tmp: Path, args: argparse.Namespace) -> int:
    fleet = Fleet(url, tmp, args.lease_ttl_s, args.workers)
    failures = 1
    try:
        for _ in range(2):
            fleet.start_server()
            fleet.start_worker()
        run = Run(
            replicas=[s.base_url for s in fleet.servers],
            delay_ms=args.delay_ms,
            tokens=args.tokens,
            drop_p=args.drop,
            cancel_p=args.cancel,
            deadline=time.perf_counter() + args.seconds,
            chaos=args.chaos_every > 0,
        )
        print(
            f"2 replicas + 2 workers, clients={args.clients} seconds={args.seconds} "
            f"delay/delta={args.delay_ms} ms tokens={args.tokens} drop={args.drop} "
            f"cancel={args.cancel} chaos every {args.chaos_every or '-'} s "
            f"lease {args.lease_ttl_s} s; load {os.getloadavg()[0]:.2f}"
        )
        chaos = None
        if run.chaos:
            chaos = partial(chaos_loop, run, fleet, args.chaos_every, args.clients, args.seed)
        elapsed = asyncio.run(load(run, args.clients, chaos))
        dsn = url.replace("postgresql+asyncpg://", "postgresql://")
        status = asyncio.run(settle(dsn, 3 * args.lease_ttl_s + 10))
        stored, _ = asyncio.run(logs(dsn, list(run.seen)))
        failures = report(run, elapsed, stored, status)
        if run.chaos:
            failures += account(run, status)
        checked = fold_check(url)
        print(f"fold check: {len(checked.status)} logs replay and match the read model")
        failures += verify_all(url) != 0
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        fleet.stop_all()
    return 1 if failures else 0


if __name__ == "__main__":
    main()
