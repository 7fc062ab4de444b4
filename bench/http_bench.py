"""End-to-end SSE throughput and time-to-first-event through a real `resplog serve`.

Starts a server (scripted engine, zero delay) on PostgreSQL or SQLite, then for 1, 16 and
128 concurrent streaming clients measures SSE events/s and answer tokens/s delivered, and
compares the time to the first content delta over HTTP with the time to the first delta of
the engine called directly in-process. Prints medians over the rounds; not a test.

Tokens/s is the throughput to compare between loads. The runner merges the deltas that
queue up while an append is in flight into one event (`service/work/batching.py`), so how many
events carry an answer depends on how the server's load paces its appends, and, for the
scripted engine, which runs in the server's own event loop, on how often that loop gives
the engine a turn: the same answers go out in more or fewer events, and events/s is not a
fixed unit of work. Every answer is `--tokens` tokens, read to its end, so tokens/s is
answers * tokens over the seconds taken.

Beside each load, the cores it kept busy (from `/proc`): the whole machine's, the server's
(its `--processes` children included) and PostgreSQL's, if it runs on the same machine; a
server process near 1.0 is what one process can give.

    .venv/bin/python bench/http_bench.py --database postgres --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.engines.scripted import ScriptedEngine
from bench.burst_bench import cpu_seconds
from bench.databases import PG, drop_postgres, fresh_postgres
from bench.store_bench import cpu_busy, postgres_cpu
from domain.generation import Prompt
from domain.objects import InputMessage, InputText, ReasoningConfig, TextConfig
from tests.e2e.conftest import start_server, stop_server


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


async def direct_first_delta(rounds: int, tokens: int, delay_ms: float) -> list[float]:
    engine = ScriptedEngine(delay_s=delay_ms / 1000, tokens=tokens)
    out = []
    for i in range(rounds):
        prompt = Prompt(
            response_id=f"resp_bench{i}",
            model="scripted",
            instructions=None,
            history=[],
            input=[InputMessage(id="m", role="user", content=[InputText(text="bench")])],
            tools=[],
            tool_choice="auto",
            parallel_tool_calls=True,
            max_output_tokens=None,
            temperature=None,
            top_p=None,
            reasoning=ReasoningConfig(),
            text=TextConfig(),
        )
        t0 = time.perf_counter()
        gen = engine.generate(prompt)
        await gen.__anext__()
        out.append(time.perf_counter() - t0)
        await gen.aclose()  # type: ignore[attr-defined]
    return out


async def one_stream(
    client: httpx.AsyncClient, tokens: int, delay_ms: float = 0.0
) -> tuple[int, float, float]:
    body = {
        "model": "scripted",
        "input": "bench",
        "stream": True,
        "metadata": {"scripted_tokens": str(tokens), "scripted_delay_ms": str(delay_ms)},
    }
    t0 = time.perf_counter()
    first_event = first_delta = 0.0
    events = 0
    async with client.stream("POST", "/v1/responses", json=body) as r:
        async for chunk in r.aiter_bytes():
            if not first_event:
                first_event = time.perf_counter() - t0
            # the first content delta of any kind, as the direct figure counts the engine's
            # first delta (the scripted engine starts with reasoning)
            if not first_delta and b'.delta"' in chunk:
                first_delta = time.perf_counter() - t0
            events += chunk.count(b"\nevent: ") + chunk.startswith(b"event: ")
    return events, first_event, first_delta


async def load(
    base: str, clients: int, seconds: float, tokens: int, raw: bool = False, delay_ms: float = 0.0
) -> Any:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
        deadline = time.perf_counter() + seconds
        total = 0
        ttfe: list[float] = []
        ttfd: list[float] = []

        async def worker() -> None:
            nonlocal total
            while time.perf_counter() < deadline:
                n, fe, fd = await one_stream(client, tokens, delay_ms)
                total += n
                ttfe.append(fe)
                ttfd.append(fd)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - start
    if raw:
        return {"events": total, "elapsed": elapsed, "ttfe": ttfe, "ttfd": ttfd}
    return {
        "events_per_s": total / elapsed,
        "tokens_per_s": len(ttfe) * tokens / elapsed,
        "responses": len(ttfe),
        "ttfe_p50_ms": pct(ttfe, 50) * 1e3,
        "ttfe_p99_ms": pct(ttfe, 99) * 1e3,
        "ttfd_p50_ms": pct(ttfd, 50) * 1e3,
        "ttfd_p99_ms": pct(ttfd, 99) * 1e3,
    }


_start: Any = None  # a client process's barrier (set by `_init`)


def _init(barrier: Any) -> None:
    global _start
    _start = barrier


def _load_proc(args: tuple[str, int, float, int, float]) -> dict[str, Any]:
    base, clients, seconds, tokens, delay_ms = args
    _start.wait()  # every client process started and its imports done
    return asyncio.run(load(base, clients, seconds, tokens, raw=True, delay_ms=delay_ms))


def load_in_processes(
    base: str,
    clients: int,
    seconds: float,
    tokens: int,
    procs: int,
    delay_ms: float,
    on_start: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """The same load spread over `procs` client processes (one Python client process
    saturates long before the server does). `on_start` runs once every client process has
    started, as they begin their load, so that what it measures leaves their start out."""
    procs = max(1, min(procs, clients))
    shares = [clients // procs + (i < clients % procs) for i in range(procs)]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(procs + 1)
    with context.Pool(procs, initializer=_init, initargs=(barrier,)) as pool:
        # One task per process: each waits at the barrier, so none can take a second.
        pending = pool.map_async(
            _load_proc, [(base, n, seconds, tokens, delay_ms) for n in shares], chunksize=1
        )
        barrier.wait(timeout=120)
        on_start()
        parts = pending.get()
    ttfe = [v for p in parts for v in p["ttfe"]]
    ttfd = [v for p in parts for v in p["ttfd"]]
    return {
        "events_per_s": sum(p["events"] / p["elapsed"] for p in parts),
        "tokens_per_s": sum(len(p["ttfe"]) * tokens / p["elapsed"] for p in parts),
        "responses": len(ttfe),
        "ttfe_p50_ms": pct(ttfe, 50) * 1e3,
        "ttfe_p99_ms": pct(ttfe, 99) * 1e3,
        "ttfd_p50_ms": pct(ttfd, 50) * 1e3,
        "ttfd_p99_ms": pct(ttfd, 99) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=200, help="answer tokens per response")
    parser.add_argument("--clients", default="1,16,128")
    parser.add_argument(
        "--delay-ms", type=float, default=0.0, help="scripted pace per delta (0: flat out)"
    )
    parser.add_argument(
        "--procs", type=int, default=1, help="client processes to spread the load over"
    )
    parser.add_argument(
        "--server-processes",
        default="1",
        help="`serve --processes` values to compare, e.g. 1,2 (PostgreSQL only)",
    )
    args = parser.parse_args()
    for n in (int(x) for x in args.server_processes.split(",")):
        run(args, n)


def run(args: argparse.Namespace, processes: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="resplog-bench-"))
    name = ""
    if args.database == "postgres":
        url, name = asyncio.run(fresh_postgres())
    else:
        url = f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
    extra = ("--processes", str(processes)) if processes > 1 else ()
    server = start_server(url, args.database, tmp / "server.log", *extra)
    try:
        direct = asyncio.run(direct_first_delta(50, args.tokens, args.delay_ms))
        d50, d99 = pct(direct, 50) * 1e3, pct(direct, 99) * 1e3
        print(
            f"database={args.database} tokens/response={args.tokens} seconds={args.seconds} "
            f"delay/delta={args.delay_ms} ms client processes={args.procs} "
            f"server processes={processes}"
        )
        print(f"direct engine first delta: p50 {d50:.3f} ms  p99 {d99:.3f} ms")
        for clients in (int(c) for c in args.clients.split(",")):
            start: list[float] = []

            # The load's start, its client processes' start left out.
            def mark(into: list[float] = start) -> None:
                busy, total = cpu_busy()
                server_s, pg_s = cpu_seconds(server.process.pid), sum(postgres_cpu().values())
                into.extend((busy, total, server_s, pg_s, time.perf_counter()))

            r = load_in_processes(
                server.base_url,
                clients,
                args.seconds,
                args.tokens,
                args.procs,
                args.delay_ms,
                on_start=mark,
            )
            busy0, total0, server0, pg0, t0 = start
            wall = time.perf_counter() - t0
            busy1, total1 = cpu_busy()
            server_cores = (cpu_seconds(server.process.pid) - server0) / wall
            pg_cores = (sum(postgres_cpu().values()) - pg0) / wall
            machine = (busy1 - busy0) / (total1 - total0) * (os.cpu_count() or 1)
            print(
                f"clients={clients:4d} events/s={r['events_per_s']:9.0f} "
                f"tokens/s={r['tokens_per_s']:9.0f} "
                f"responses={r['responses']:6.0f} "
                f"first-event p50/p99={r['ttfe_p50_ms']:.1f}/{r['ttfe_p99_ms']:.1f} ms "
                f"first-delta p50/p99={r['ttfd_p50_ms']:.1f}/{r['ttfd_p99_ms']:.1f} ms "
                f"added p50={r['ttfd_p50_ms'] - d50:.1f} ms"
            )
            print(
                f"  cores busy: machine {machine:.1f} of {os.cpu_count()}, server "
                f"{server_cores:.2f}, postgres {pg_cores:.2f} (over the load)"
            )
    finally:
        stop_server(server)
        if name:
            asyncio.run(drop_postgres(PG, name))
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
