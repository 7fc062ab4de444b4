"""Stalled readers: how long `/health` takes once a burst of SSE clients that never read
asks for a large response's replay.

A real `resplog serve` (scripted engine, zero delay) on a fresh PostgreSQL database (or
SQLite), once fresh and once right after a load of `--load` streaming creates. On each: one
large response (`--instructions-mib` of instructions, which each lifecycle event carries),
then `--probes` `/health` requests one after another (each on a new connection, as a
liveness probe makes them) with no other client: the baseline. Then `--readers` raw
connections ask for that response's replay (`GET /v1/responses/{id}/events`) with a tiny
receive buffer and never read a byte, and, as soon as they have all sent their requests,
the same probes again. Prints the first probe, and the p50, p99 and longest of all of
them, and the server's CPU meanwhile (its readers' work included), beside the baseline's.

    .venv/bin/python bench/stalled_bench.py --readers 256 --load 300
    .venv/bin/python bench/stalled_bench.py --readers 32 --load 50 --probes 50 --sqlite
    git worktree add /tmp/before HEAD~1
    .venv/bin/python bench/stalled_bench.py --tree /tmp/before --tree .

With `--tree` (repeatable): the same cases on each checkout's code, one after another.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import (
    Table,
    database_arguments,
    median,
    parser,
    pct,
    serving,
)


async def load(base: str, creates: int, concurrency: int = 32) -> None:
    """`creates` streaming creates of 200 tokens, `concurrency` at a time, each read to its
    end."""
    body = {"model": "scripted", "input": "load", "stream": True}
    body["metadata"] = {"scripted_tokens": "200"}
    left = iter(range(creates))
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:

        async def worker() -> None:
            for _ in left:
                async with client.stream("POST", "/v1/responses", json=body) as r:
                    async for _chunk in r.aiter_bytes():
                        pass

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def process_cpu(pid: int) -> float:
    """CPU seconds so far of process `pid`, its exited threads included (a SQLite store's
    connection threads come and go), in the kernel's 10 ms ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def big_response(base: str, instructions_mib: float) -> tuple[str, int]:
    """A finished response whose events carry `instructions_mib` of instructions each: its
    id and the bytes of its replay."""
    body = {
        "model": "scripted",
        "instructions": "x" * int(instructions_mib * 2**20),
        "input": "hi",
        "metadata": {"scripted_tokens": "200"},
    }
    with httpx.Client(base_url=base, timeout=120) as client:
        r = client.post("/v1/responses", json=body)
        r.raise_for_status()
        rid = r.json()["id"]
        return rid, len(client.get(f"/v1/responses/{rid}/events").content)


def probes(base: str, n: int) -> list[float]:
    """`n` `/health` round trips one after another, each on a connection of its own, as a
    liveness probe makes them (ms). Raw sockets: an HTTP client's own setup would be most
    of the figure."""
    url = urlparse(base)
    ask = f"GET /health HTTP/1.1\r\nHost: {url.netloc}\r\nConnection: close\r\n\r\n"
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with socket.create_connection((url.hostname, url.port), timeout=120) as sock:
            sock.sendall(ask.encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        out.append((time.perf_counter() - t0) * 1e3)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
    return out


def never_reading(base: str, path: str) -> socket.socket:
    """A connection that asks for `path` and then reads nothing (a tiny receive window, so
    the server's writes back up at once)."""
    url = urlparse(base)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((url.hostname, url.port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode())
    return sock


def run(
    base: str, pid: int, creates: int, readers: int, n: int, instructions_mib: float, label: str
) -> Table:
    if creates:
        t0 = time.perf_counter()
        asyncio.run(load(base, creates))
        print(f"  load: {creates} streaming creates in {time.perf_counter() - t0:.1f} s")
    rid, size = big_response(base, instructions_mib)
    print(f"  one response of {size / 2**20:.1f} MiB replayed")
    cpu = process_cpu(pid)
    idle = probes(base, n)
    idle_cpu, cpu = process_cpu(pid) - cpu, process_cpu(pid)
    sockets = [never_reading(base, f"/v1/responses/{rid}/events") for _ in range(readers)]
    try:
        stalled = probes(base, n)
        stalled_cpu = process_cpu(pid) - cpu
    finally:
        for sock in sockets:
            sock.close()
    title = f"`/health` (ms), {label}{readers} stalled readers, " + (
        f"after {creates} creates" if creates else "a fresh server"
    )
    table = Table(title, "ms")
    base_name = "no readers"
    table.add("first probe", stalled[0], base_name, idle[0])
    table.add("p50", median(stalled), base_name, median(idle))
    table.add("p99", pct(stalled, 99), base_name, pct(idle, 99))
    table.add("max", max(stalled), base_name, max(idle))
    table.add("server CPU meanwhile", stalled_cpu * 1e3, base_name, idle_cpu * 1e3)
    return table


def main() -> None:
    p = parser(__doc__)
    database_arguments(p)
    p.add_argument("--readers", type=int, default=256, help="never-reading SSE clients")
    p.add_argument("--load", type=int, default=300, help="streaming creates before the readers")
    p.add_argument("--probes", type=int, default=200, help="`/health` requests a measurement")
    p.add_argument("--instructions-mib", type=float, default=1.5, help="the response's size / 3")
    p.add_argument(
        "--cases", default="fresh,loaded", help="fresh: no load first; loaded: `--load` first"
    )
    p.add_argument(
        "--tree",
        action="append",
        type=Path,
        help="a checkout whose code the server runs (repeatable; default: this one)",
    )
    args = p.parse_args()
    chars = str(int(args.instructions_mib * 2**20) + 1024)
    # No send deadline: the readers stay stalled for the whole measurement.
    extra = ("--max-text-chars", chars, "--send-timeout-s", "0")
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores here")
    for tree in args.tree or [None]:
        label = f"{tree}: " if tree else ""
        for case in args.cases.split(","):
            creates = args.load if case == "loaded" else 0
            with serving(
                *extra, sqlite=args.sqlite, admin_url=args.database_url, tree=tree
            ) as server:
                table = run(
                    server.base_url,
                    server.process.pid,
                    creates,
                    args.readers,
                    args.probes,
                    args.instructions_mib,
                    label,
                )
            table.print()
    print(f"\nload average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
