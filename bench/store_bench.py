"""Store throughput and append->visible latency, beside one commit an event.

Events/s through the group-commit writer and the time from an append to a tailer seeing
it.

In-process, on a fresh PostgreSQL database (or SQLite). Phases, each on the same database:
`paced` (S streams x R events/s, a tailer on every stream: sustained events/s and
append -> visible p50/p99), `max` (the same unpaced), `baseline` (one commit per event,
closed loop: what the group commit is measured against), `remote` (the paced load, its
tailers on a second store in this process, hearing only the doorbell), `process` (the
tailers in another process, as another replica: append -> visible there, resumes there),
`replay` (one long stream read back into typed events). Events are made by the real
aggregate before the clock starts; encoding them is part of the measured append.

    .venv/bin/python bench/store_bench.py --phases paced,process
    .venv/bin/python bench/store_bench.py --sqlite
    .venv/bin/python bench/store_bench.py --streams 20 --seconds 2 --baseline-seconds 1 \\
        --replay-events 2000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from adapters.store.factory import open_store
from adapters.store.migrate import upgrade_async
from adapters.store.sql import SqlEventStore
from adapters.store.writer import GroupCommitWriter
from bench.harness import Table, database_arguments, drop_postgres, fresh_postgres, parser, pct
from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import create
from domain.events import AnyEvent, RequestFacts
from domain.generation import Finished, TextDelta, TokenUsage
from domain.objects import InputMessage, InputText, ResponseObject
from service.responses.create import new_response_id

Plan = list[tuple[int, list[AnyEvent]]]  # (expected_version, events) per append
POOL = 16  # connections per store


# --- workload ---------------------------------------------------------------------------------


def plan_stream(rid: str, deltas: int) -> Plan:
    """created + in_progress, `deltas` text deltas (one append each), then completed."""
    response = ResponseObject(
        id=rid, created_at=int(time.time()), status="in_progress", model="bench-model"
    )
    question = InputMessage(id=f"msg_{rid}", role="user", content=[InputText(text="Hello")])
    decision = create(response, RequestFacts(owner="bench", input=[question]))
    plan: Plan = [(-1, decision.events)]
    state = decision.state
    for i in range(deltas):
        decision = emit(state, TextDelta(text=f" token{i}"))
        plan.append((state.version, decision.events))
        state = decision.state
    usage = TokenUsage(input_tokens=5, output_tokens=deltas)
    decision = finish(state, Finished(reason="stop", usage=usage), now=int(time.time()))
    plan.append((state.version, decision.events))
    return plan


def stream_id(ids: str = "time") -> str:
    """A new response id as the server makes it (`time`: service/ids.py, the second first),
    or as it made them before (`random`: 48 random hex digits), to compare the two."""
    if ids == "random":
        return f"resp_{secrets.token_hex(24)}"
    return new_response_id(time.time())


def plans(streams: int, deltas: int, ids: str = "time") -> list[tuple[str, Plan]]:
    out = []
    for _ in range(streams):
        rid = stream_id(ids)
        out.append((rid, plan_stream(rid, deltas)))
    # The pre-made workload is the harness's, not the store's: keep the cyclic garbage
    # collector from re-scanning its hundreds of thousands of objects during the run.
    gc.collect()
    gc.freeze()
    return out


# --- measurement helpers ----------------------------------------------------------------------


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def postgres_cpu() -> dict[str, float]:
    """CPU seconds used so far by each of the server's processes."""
    ticks = os.sysconf("SC_CLK_TCK")
    total: dict[str, float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name.startswith("postgres"):
            fields = rest.split()
            total[pid] = (int(fields[11]) + int(fields[12])) / ticks
    return total


class Meter:
    """Wall time, the machine's CPU busy share, and this process's own CPU, over a block."""

    def __enter__(self) -> Meter:
        self._t, self._c, self._p = time.perf_counter(), cpu_busy(), time.process_time()
        self._pg = postgres_cpu()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.seconds = time.perf_counter() - self._t
        busy, total = cpu_busy()
        self.cpu = (busy - self._c[0]) / max(total - self._c[1], 1.0)
        self.cpu_self = (time.process_time() - self._p) / self.seconds
        # Backends that exited during the block are missed: a lower bound.
        end = postgres_cpu()
        self.cpu_pg = sum(v - self._pg.get(k, 0.0) for k, v in end.items()) / self.seconds


@dataclass
class Run:
    name: str
    events: int
    meter: Meter
    latencies: list[float] = field(default_factory=list)
    # Steady state: events appended after the first and before the last second (all
    # streams start, and end with a big `response.completed`, at about the same time).
    steady: list[float] = field(default_factory=list)
    steady_rate: float = 0.0
    flushes: int = 0
    flush_ms: float = 0.0
    split: list[tuple[float, float]] = field(default_factory=list)  # (to commit, after it)
    reads: list[tuple[float, int]] = field(default_factory=list)  # shared reads: (s, rows)
    resumes: list[float] = field(default_factory=list)  # a new tail's first event, s
    gc: list[tuple[int, float]] = field(default_factory=list)  # (generation, s) there

    def line(self) -> str:
        m = self.meter
        rate = self.events / m.seconds
        text = f"{self.name:<9} {self.events:>8} events in {m.seconds:6.2f}s = {rate:>9,.0f} ev/s"
        if self.steady:
            q = statistics.quantiles(self.steady, n=100)
            text += f"  steady {self.steady_rate:,.0f} ev/s p50 {q[49] * 1e3:.1f} ms"
            text += f" p99 {q[98] * 1e3:.1f} ms;"
        if self.latencies:
            q = statistics.quantiles(self.latencies, n=100)
            text += f"  all: p50 {q[49] * 1e3:.1f} ms p99 {q[98] * 1e3:.1f} ms"
        text += (
            f"  cpu/event {m.cpu_self * m.seconds / max(self.events, 1) * 1e6:.1f} us,"
            f"  cores: bench {m.cpu_self:.2f}, postgres {m.cpu_pg:.2f},"
            f" machine {m.cpu * os.cpu_count():.2f}"  # type: ignore[operator]
        )
        if self.flushes:
            text += f"  ({self.events / self.flushes:.0f} ev/flush, {self.flush_ms:.1f} ms each)"
        if self.split:
            for i, what in enumerate(("append->commit", "commit->visible there")):
                q = statistics.quantiles([pair[i] for pair in self.split], n=100)
                text += f"; {what} p50 {q[49] * 1e3:.1f} ms p99 {q[98] * 1e3:.1f} ms"
        if len(self.reads) > 1:
            q = statistics.quantiles([r[0] for r in self.reads], n=100)
            rows = statistics.mean(r[1] for r in self.reads)
            text += (
                f"; {len(self.reads)} shared reads there, {rows:.0f} rows each,"
                f" p50 {q[49] * 1e3:.1f} ms p99 {q[98] * 1e3:.1f} ms"
            )
        if self.gc:
            # The other process's garbage collections (the whole run): a pause of its event
            # loop holds up every tail there at once.
            old = [took for generation, took in self.gc if generation == 2]
            text += (
                f"; GC there {len(self.gc)} times, {sum(t for _, t in self.gc) * 1e3:.0f} ms"
                f" in all, longest {max(t for _, t in self.gc) * 1e3:.1f} ms"
                f" ({len(old)} full, longest {max(old, default=0) * 1e3:.1f} ms)"
            )
        if self.resumes:
            text += (
                f"; {len(self.resumes)} resumes there, first event"
                f" p50 {statistics.median(self.resumes) * 1e3:.1f} ms"
                f" max {max(self.resumes) * 1e3:.1f} ms"
            )
        return text


def tail_process(
    url: str,
    rids: list[str],
    ready: Any,
    out: Any,
    catchup: tuple[int, int] | None = None,
    gc_freeze: bool = False,
) -> None:
    """Another replica: its own store (own pool, own LISTEN connection) tailing `rids`;
    sends back when each position became visible (CLOCK_MONOTONIC, which `perf_counter`
    is on Linux, so the writer's process can compare)."""

    async def main() -> tuple[
        dict[str, dict[int, float]], list[tuple[float, float, int]], list[float]
    ]:
        store = await open_store(url, pool_size=POOL, max_overflow=0)
        if catchup:  # (reads in flight at once, streams a read must have to be split)
            store.catchup._concurrency, store.catchup._split_at = catchup  # type: ignore[attr-defined]
        reads = time_catchup_reads(store)
        seen: dict[str, dict[int, float]] = {rid: {} for rid in rids}
        tasks = [asyncio.create_task(tail(store, rid, seen[rid])) for rid in rids]
        await asyncio.sleep(0.5)
        if gc_freeze:
            # What a server could do once started: its startup heap (modules, pools, the
            # tails' state) out of the collector's sight, so that a full collection does
            # not walk it while every tail waits.
            gc.collect()
            gc.freeze()
        ready.set()
        resumed = await resumes(store, rids, seen)
        await asyncio.gather(*tasks)
        await store.close()
        return seen, reads, resumed

    pauses: list[tuple[int, float]] = []  # the collector's: (generation, seconds)
    began = [0.0]

    def timed_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], time.perf_counter() - began[0]))

    gc.callbacks.append(timed_gc)
    seen, reads, resumed = asyncio.run(main())
    gc.callbacks.remove(timed_gc)
    out.put((seen, reads, resumed, pauses))


async def resumes(
    store: SqlEventStore, rids: list[str], seen: dict[str, dict[int, float]], count: int = 20
) -> list[float]:
    """Resumes on this replica while the load runs (`GET ...?stream=true&starting_after=N`
    after a reconnect): every 100 ms from the load's second second, a new tail of a live
    stream from 20 events behind what has been seen of it (so that its next event has
    committed): seconds from `subscribe` to its first event."""
    took: list[float] = []
    await asyncio.sleep(1.5)
    for rid in rids[:count]:
        if not seen[rid]:
            await asyncio.sleep(0.1)
            continue
        after = max(max(seen[rid]) - 20, -1)
        start = time.perf_counter()
        resumed = store.subscribe(rid, after)
        try:
            async for _event in resumed:
                took.append(time.perf_counter() - start)
                break
        finally:
            await resumed.aclose()
        await asyncio.sleep(0.1)
    return took


def time_catchup_reads(store: SqlEventStore) -> list[tuple[float, float, int]]:
    """(start, seconds, rows) of each shared catch-up read the store makes for its tails."""
    reads: list[tuple[float, float, int]] = []
    fetch = store.catchup._fetch  # type: ignore[attr-defined]

    async def timed(points: Any, limit: int) -> Any:
        start = time.perf_counter()
        rows = await fetch(points, limit)
        reads.append((start, time.perf_counter() - start, len(rows)))
        return rows

    store.catchup._fetch = timed  # type: ignore[attr-defined]
    return reads


async def process_phase(url: str, work: list[tuple[str, Plan]], **opts: Any) -> Run:
    """The paced load with its tailers in another process."""
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    args = (url, [r for r, _ in work], ready, out, opts.get("catchup"), opts.get("gc_freeze"))
    proc = ctx.Process(target=tail_process, args=args)
    proc.start()
    await asyncio.get_running_loop().run_in_executor(None, ready.wait, 60)
    store = await open_store(url, pool_size=POOL, max_overflow=0, listen=False)
    committed = record_commits(store)
    streams = [Stream(rid, plan) for rid, plan in work]
    writer = GroupCommitWriter(store, flush_interval=opts["interval"])
    await writer.start()
    rate = opts["rate"]
    step = 1 / rate
    per_task = opts["per_task"]
    groups = [streams[i : i + per_task] for i in range(0, len(streams), per_task)]
    with Meter() as meter:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(produce(writer, g, t0 + i * step / len(groups), step) for i, g in enumerate(groups))
        )
        seen, reads, resumed, pauses = await asyncio.get_running_loop().run_in_executor(
            None, out.get, True, 120
        )
    proc.join(30)
    await writer.close()
    await store.close()
    for s in streams:
        s.seen = seen[s.rid]
    lat = [s.seen[p] - t for s in streams for p, t in s.sent.items()]
    run = Run("process", len(lat), meter, lat, flushes=writer.flushes)
    lo = t0 + 1.0
    hi = max(t for s in streams for t in s.sent.values()) - 1.0
    run.steady = [s.seen[p] - t for s in streams for p, t in s.sent.items() if lo <= t <= hi]
    run.steady_rate = sum(1 for s in streams for t in s.seen.values() if lo <= t <= hi) / (hi - lo)
    # Where the delay is: before the commit (the writer's queue and flush) or after it (the
    # doorbell, the other process's shared catch-up read, the hand-out to its tails).
    run.reads = [(took, rows) for start, took, rows in reads if lo <= start <= hi]
    run.resumes = resumed
    run.gc = pauses
    run.split = [
        (committed[(s.rid, p)] - t, s.seen[p] - committed[(s.rid, p)])
        for s in streams
        for p, t in s.sent.items()
        if lo <= t <= hi
    ]
    return run


def record_commits(store: SqlEventStore) -> dict[tuple[str, int], float]:
    """When each event was committed: the store hands every committed flush to its hub."""
    committed: dict[tuple[str, int], float] = {}
    publish = store.hub.publish

    def publish_and_note(flush: Any) -> None:
        now = time.perf_counter()
        for sid, events in flush.items():
            for e in events:
                committed[(sid, e.position)] = now
        publish(flush)

    store.hub.publish = publish_and_note  # type: ignore[method-assign]
    return committed


async def tail(store: SqlEventStore, rid: str, seen: dict[int, float]) -> None:
    clock = time.perf_counter
    async for event in store.subscribe(rid):
        seen[event.position] = clock()


# --- phases -----------------------------------------------------------------------------------


class Stream:
    """One simulated generation: its plan, and when each position was handed to append."""

    def __init__(self, rid: str, plan: Plan) -> None:
        self.rid, self.plan = rid, plan
        self.sent: dict[int, float] = {}
        self.seen: dict[int, float] = {}


async def produce(
    writer: GroupCommitWriter, group: list[Stream], start: float, step: float
) -> None:
    """Drive a few streams: at tick k (every `step` s; 0: unpaced) each appends its k-th
    batch. Each stream still makes its own appends; grouping only saves the simulation one
    timer per stream per token, which would otherwise dominate the measured CPU."""
    clock = time.perf_counter
    for k in range(max(len(s.plan) for s in group)):
        if step:
            delay = start + k * step - clock()
            if delay > 0:
                await asyncio.sleep(delay)
        for s in group:
            if k < len(s.plan):
                expected, events = s.plan[k]
                now = clock()
                for e in events:
                    s.sent[e.sequence_number] = now
                last = k == len(s.plan) - 1
                await writer.append(s.rid, expected, events, durable=last)


async def group_phase(
    store: SqlEventStore,
    name: str,
    work: list[tuple[str, Plan]],
    *,
    rate: float,
    interval: float,
    per_task: int,
    tails: SqlEventStore | None = None,
) -> Run:
    """The group-commit writer on `store`; tailers on `tails` (default: the same store, so
    they are handed events in-process; another store only hears the doorbell)."""
    streams = [Stream(rid, plan) for rid, plan in work]
    tails = tails or store
    tailers = [asyncio.create_task(tail(tails, s.rid, s.seen)) for s in streams]
    await asyncio.sleep(0.2)
    writer = GroupCommitWriter(store, flush_interval=interval)
    await writer.start()
    step = 1 / rate if rate else 0.0
    groups = [streams[i : i + per_task] for i in range(0, len(streams), per_task)]
    with Meter() as meter:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(produce(writer, g, t0 + i * step / len(groups), step) for i, g in enumerate(groups))
        )
        await asyncio.gather(*tailers)
    await writer.close()
    lat = [s.seen[p] - t for s in streams for p, t in s.sent.items()]
    per_flush = writer.flush_seconds / max(writer.flushes, 1) * 1e3
    total = sum(len(s.seen) for s in streams)
    run = Run(name, total, meter, lat, flushes=writer.flushes, flush_ms=per_flush)
    if rate:
        lo = t0 + 1.0
        hi = max(t for s in streams for t in s.sent.values()) - 1.0
        run.steady = [s.seen[p] - t for s in streams for p, t in s.sent.items() if lo <= t <= hi]
        visible = sum(1 for s in streams for t in s.seen.values() if lo <= t <= hi)
        run.steady_rate = visible / (hi - lo)
    return run


async def baseline_phase(
    store: SqlEventStore, work: list[tuple[str, Plan]], seconds: float, connections: int
) -> Run:
    """One transaction per event append, every stream appending as fast as it commits, at
    most `connections` at a time (the pool: more would only measure waiting for it)."""
    done: list[float] = []
    deadline = time.perf_counter() + seconds
    gate = asyncio.Semaphore(connections)

    async def one(rid: str, plan: Plan) -> None:
        for expected, events in plan:
            if time.perf_counter() > deadline:
                return
            begin = time.perf_counter()
            async with gate:
                await store.append(rid, expected, events)
            done.extend([time.perf_counter() - begin] * len(events))

    with Meter() as meter:
        await asyncio.gather(*(one(rid, plan) for rid, plan in work))
    return Run("baseline", len(done), meter, done)


async def replay_phase(store: SqlEventStore, length: int, repeats: int) -> list[Run]:
    rid = stream_id()
    plan = plan_stream(rid, length)
    async with GroupCommitWriter(store, max_pending_per_stream=10 * length) as writer:
        for expected, events in plan:
            await writer.append(rid, expected, events, durable=False)
    runs = []
    for _ in range(repeats):
        with Meter() as meter:
            typed = await store.read_events(rid)
        runs.append(Run("replay", len(typed), meter))
    return runs


def background_load(seconds: float = 2.0) -> float:
    """Cores busy on this machine before we start (other people's work skews the figures)."""
    busy0, total0 = cpu_busy()
    time.sleep(seconds)
    busy1, total1 = cpu_busy()
    return (busy1 - busy0) / (total1 - total0) * (os.cpu_count() or 1)


# --- databases --------------------------------------------------------------------------------


def wait_for_quiet(limit: float, cores: float = 0.4) -> float:
    """Wait up to `limit` seconds for the machine to have at most `cores` busy; the load."""
    deadline = time.monotonic() + limit
    load = background_load(1.0)
    while load > cores and time.monotonic() < deadline:
        load = background_load(1.0)
    return load


async def run(args: argparse.Namespace) -> None:
    if args.wait_quiet:
        wait_for_quiet(args.wait_quiet)
    tmp = tempfile.TemporaryDirectory()
    if args.sqlite:
        url, name = f"sqlite+aiosqlite:///{tmp.name}/bench.db", ""
    else:
        url, name = await fresh_postgres(args.database_url)
    try:
        await upgrade_async(url)
        store = await open_store(url, pool_size=POOL, max_overflow=0, pg_insert=args.pg_insert)
        print(
            f"# {store.dialect}, {args.streams} streams x {args.rate:g} ev/s, flush every"
            f" {args.flush_ms:g} ms; {os.cpu_count()} cores, {background_load():.2f} busy before"
        )
        deltas = int(args.rate * args.seconds)
        opts: dict[str, Any] = {"interval": args.flush_ms / 1e3, "per_task": args.streams_per_task}
        # The other process's (the `process` phase only).
        other: dict[str, Any] = {"gc_freeze": args.gc_freeze}
        if args.catchup:
            other["catchup"] = tuple(int(v) for v in args.catchup.split(","))
        runs: dict[str, Run] = {}
        for phase in args.phases.split(","):
            if phase == "paced":
                work = plans(args.streams, deltas)
                runs[phase] = await group_phase(store, "paced", work, rate=args.rate, **opts)
            elif phase == "remote" and not args.sqlite:
                remote = await open_store(url, pool_size=POOL, max_overflow=0)
                work = plans(args.streams, deltas // 2)
                runs[phase] = await group_phase(
                    store, "remote", work, rate=args.rate, tails=remote, **opts
                )
                await remote.close()
            elif phase == "process" and not args.sqlite:
                work = plans(args.streams, deltas // 2)
                runs[phase] = await process_phase(url, work, rate=args.rate, **opts, **other)
            elif phase == "max":
                work = plans(args.streams, deltas // 2)
                runs[phase] = await group_phase(store, "max", work, rate=0, **opts)
            elif phase == "baseline":
                work = plans(args.streams, deltas // 4)
                runs[phase] = await baseline_phase(store, work, args.baseline_seconds, POOL)
            elif phase == "replay":
                for r in await replay_phase(store, args.replay_events, 3):
                    print(r.line())
            if phase in runs:
                print(runs[phase].line())
        summary(runs)
        await store.close()
    finally:
        if name:
            await drop_postgres(args.database_url, name)
        tmp.cleanup()


def summary(runs: dict[str, Run]) -> None:
    """Each phase's events/s beside the one-commit-an-event baseline's, and its append ->
    visible latency beside the paced phase's (its tailers in this process)."""
    base = runs.get("baseline")
    paced = runs.get("paced")
    rates = Table("events/s", "events/s")
    latency = Table("append -> visible, steady state", "ms")
    for name, run in runs.items():
        if name == "baseline":
            continue
        rate = run.steady_rate or run.events / run.meter.seconds
        if base is None:
            rates.add(name, rate)
        else:
            rates.add(name, rate, "one commit an event", base.events / base.meter.seconds)
        against = paced.steady if paced is not None and name != "paced" else []
        for q in (50, 99):
            if not run.steady:
                continue
            if against:
                theirs = pct(against, q) * 1e3
                latency.add(f"{name}, p{q}", pct(run.steady, q) * 1e3, f"paced, p{q}", theirs)
            else:
                latency.add(f"{name}, p{q}", pct(run.steady, q) * 1e3)
    rates.print()
    latency.print()


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    database_arguments(p)
    p.add_argument("--streams", type=int, default=300)
    p.add_argument("--rate", type=float, default=100, help="events/s per stream (paced)")
    p.add_argument("--seconds", type=float, default=10, help="length of the paced phase")
    p.add_argument("--flush-ms", type=float, default=5, help="group-commit flush interval")
    p.add_argument(
        "--streams-per-task", type=int, default=10, help="simulated streams per producer task"
    )
    p.add_argument("--baseline-seconds", type=float, default=5)
    p.add_argument("--replay-events", type=int, default=50_000)
    p.add_argument("--pg-insert", choices=["unnest", "executemany"], default="unnest")
    p.add_argument("--phases", default="paced,remote,max,baseline,replay")
    p.add_argument(
        "--gc-freeze",
        action="store_true",
        help="process phase: the other process freezes its heap (gc.freeze) once started",
    )
    p.add_argument(
        "--catchup",
        metavar="READS,SPLIT",
        help="process phase: the other process's shared reads in flight at once, and the"
        " streams a read must have to be split among them (default: the store's)",
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        metavar="SECONDS",
        help="first wait (up to this long) for other work on the machine to finish",
    )
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
