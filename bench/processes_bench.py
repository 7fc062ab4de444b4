"""Several processes: the tokens/s of `serve --processes N`, beside one process's.

Tokens/s delivered to concurrent streaming clients, and the cores each load keeps busy.

For each value of `--server-processes` in turn, a real `resplog serve` (scripted engine at
zero delay, `--tokens`-token answers) on a fresh PostgreSQL database, loaded by
`--clients` closed-loop streaming clients spread over `--procs` client processes for
`--seconds`. Prints tokens/s (answers times their tokens over the seconds taken: events/s
moves with how the runner batches), events/s, first delta p50/p99, and the cores the load
kept busy (the machine's, the server's with its children, PostgreSQL's on this machine),
each beside the first value's figures (1 process by default).

    .venv/bin/python bench/processes_bench.py --seconds 6 --clients 64 --procs 8 \\
        --server-processes 1,2,1,2
    .venv/bin/python bench/processes_bench.py --seconds 2 --clients 8 --procs 2 \\
        --server-processes 1,2
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import (
    Table,
    cpu_seconds,
    database_arguments,
    machine_busy,
    parser,
    pct,
    postgres_cpu,
    serving,
)


async def one_stream(client: httpx.AsyncClient, tokens: int) -> tuple[int, float]:
    """Events of one streaming create read to its end, and seconds to its first delta."""
    meta = {"scripted_tokens": str(tokens), "scripted_delay_ms": "0"}
    body = {"model": "scripted", "input": "bench", "stream": True, "metadata": meta}
    t0 = time.perf_counter()
    first, events = 0.0, 0
    async with client.stream("POST", "/v1/responses", json=body) as r:
        async for chunk in r.aiter_bytes():
            if not first and b'.delta"' in chunk:
                first = time.perf_counter() - t0
            events += chunk.count(b"\nevent: ") + chunk.startswith(b"event: ")
    return events, first


async def load(base: str, clients: int, seconds: float, tokens: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
        deadline = time.perf_counter() + seconds
        events, firsts = 0, []

        async def worker() -> None:
            nonlocal events
            while time.perf_counter() < deadline:
                n, first = await one_stream(client, tokens)
                events += n
                firsts.append(first)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return {"events": events, "elapsed": time.perf_counter() - start, "firsts": firsts}


_start: Any = None  # a client process's barrier (set by `_init`)


def _init(barrier: Any) -> None:
    global _start
    _start = barrier


def _load_proc(args: tuple[str, int, float, int]) -> dict[str, Any]:
    _start.wait()  # every client process started and its imports done
    return asyncio.run(load(*args))


def measure(
    base: str, pid: int, clients: int, seconds: float, tokens: int, procs: int
) -> dict[str, float]:
    """The load spread over `procs` client processes (one Python client saturates long
    before the server does); the cores are counted from the moment all have started."""
    procs = max(1, min(procs, clients))
    shares = [clients // procs + (i < clients % procs) for i in range(procs)]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(procs + 1)
    with context.Pool(procs, initializer=_init, initargs=(barrier,)) as pool:
        # One task per process: each waits at the barrier, so none can take a second.
        pending = pool.map_async(
            _load_proc, [(base, n, seconds, tokens) for n in shares], chunksize=1
        )
        barrier.wait(timeout=120)
        busy0, total0 = machine_busy()
        server0, pg0, t0 = cpu_seconds(pid), postgres_cpu(), time.perf_counter()
        parts = pending.get()
    wall = time.perf_counter() - t0
    busy1, total1 = machine_busy()
    firsts = [v for p in parts for v in p["firsts"]]
    return {
        "tokens/s": sum(len(p["firsts"]) * tokens / p["elapsed"] for p in parts),
        "events/s": sum(p["events"] / p["elapsed"] for p in parts),
        "first delta p50 ms": pct(firsts, 50) * 1e3,
        "first delta p99 ms": pct(firsts, 99) * 1e3,
        "cores busy: machine": (busy1 - busy0) / (total1 - total0) * (os.cpu_count() or 1),
        "cores busy: server": (cpu_seconds(pid) - server0) / wall,
        "cores busy: PostgreSQL": (postgres_cpu() - pg0) / wall,
    }


def main() -> None:
    p = parser(__doc__)
    database_arguments(p, sqlite=False)
    p.add_argument("--seconds", type=float, default=6.0, help="each load's length")
    p.add_argument("--tokens", type=int, default=200, help="answer tokens a response")
    p.add_argument("--clients", type=int, default=64, help="concurrent streaming clients")
    p.add_argument("--procs", type=int, default=8, help="client processes to spread them over")
    p.add_argument(
        "--server-processes", default="1,2,1,2", help="`serve --processes` values, in turn"
    )
    args = p.parse_args()
    print(f"{args.clients} clients, {args.tokens} tokens an answer, {os.cpu_count()} cores here")
    first: dict[str, float] = {}
    base_n = 0
    for n in (int(x) for x in args.server_processes.split(",")):
        with serving(admin_url=args.database_url, processes=n) as server:
            got = measure(
                server.base_url,
                server.process.pid,
                args.clients,
                args.seconds,
                args.tokens,
                args.procs,
            )
        if not first:
            first, base_n = got, n
        table = Table(f"{n} server process(es), beside {base_n}", "value")
        for figure, value in got.items():
            table.add(figure, value, f"{base_n} process(es)", first[figure])
        table.print()


if __name__ == "__main__":
    main()
