"""Stalled readers: what N SSE clients that never read pin in the server, and whether
liveness waits behind them.

Starts `resplog serve` (scripted engine) on a fresh PostgreSQL database (or SQLite), makes
one large response (big instructions, so each lifecycle event carries them), then opens N
raw connections that ask for its replay (`GET /v1/responses/{id}/events`) and never read a
byte. Prints, beside the same run's idle baseline: `/health` latency while the readers
start and while they sit stalled, the server's RSS with the readers attached, and its RSS
after they close. Not a test.

    .venv/bin/python bench/stalled_bench.py --readers 256 --instructions-mib 1.5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.databases import PG, drop_postgres, fresh_postgres
from tests.e2e.conftest import Server, start_server, stop_server


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def health_latencies(base: str, seconds: float) -> list[float]:
    """`/health` round trips, one after another, for `seconds` (ms each)."""
    out: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            r = await c.get("/health")
            assert r.status_code == 200
            out.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.05)
    return out


async def stalled_reader(host: str, port: int, path: str) -> asyncio.StreamWriter:
    """A connection that asks for the replay and never reads (a tiny receive buffer, so
    the server's writes back up at once)."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    _, writer = await asyncio.open_connection(sock=sock)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    return writer


def summary(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"p50 {statistics.median(values):.1f} ms, max {max(values):.1f} ms (n={len(values)})"


async def run(server: Server, readers: int, instructions_mib: float) -> None:
    pid = server.process.pid
    big = "x" * int(instructions_mib * 1024 * 1024)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as c:
        r = await c.post(
            "/v1/responses",
            json={
                "model": "scripted",
                "instructions": big,
                "input": "hi",
                "metadata": {"scripted_tokens": "200"},
            },
        )
        r.raise_for_status()
        rid = r.json()["id"]
        replay = await c.get(f"/v1/responses/{rid}/events")
    print(f"one response: {len(replay.content) / 2**20:.1f} MiB replayed")
    idle = await health_latencies(server.base_url, 2)
    base_rss = rss_mib(pid)
    print(f"baseline: /health {summary(idle)}; server RSS {base_rss:.0f} MiB")

    host, port = "127.0.0.1", int(server.base_url.rsplit(":", 1)[1])
    path = f"/v1/responses/{rid}/events"
    probe = asyncio.create_task(health_latencies(server.base_url, 6))
    writers = await asyncio.gather(*(stalled_reader(host, port, path) for _ in range(readers)))
    starting = await probe
    print(f"{readers} readers starting: /health {summary(starting)}")
    await asyncio.sleep(3)
    held = rss_mib(pid)
    stalled = await health_latencies(server.base_url, 2)
    print(
        f"{readers} readers stalled: /health {summary(stalled)}; server RSS {held:.0f} MiB "
        f"(+{held - base_rss:.0f} MiB, {(held - base_rss) / readers:.2f} MiB per reader)"
    )
    for w in writers:
        w.close()
    await asyncio.sleep(4)
    after = rss_mib(pid)
    print(
        f"after they closed: server RSS {after:.0f} MiB (+{after - base_rss:.0f} MiB over baseline)"
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--readers", type=int, default=256)
    p.add_argument("--instructions-mib", type=float, default=1.5)
    p.add_argument("--sqlite", action="store_true")
    args = p.parse_args()
    chars = str(int(args.instructions_mib * 1024 * 1024) + 1024)
    extra = ("--max-text-chars", chars, "--send-timeout-s", "0")
    with tempfile.TemporaryDirectory() as tmp:
        if args.sqlite:
            url, name = f"sqlite+aiosqlite:///{tmp}/bench.db", None
        else:
            url, name = asyncio.run(fresh_postgres(PG))
        server = start_server(
            url, "sqlite" if args.sqlite else "postgres", Path(tmp) / "server.log", *extra
        )
        try:
            asyncio.run(run(server, args.readers, args.instructions_mib))
        finally:
            stop_server(server)
            if name:
                asyncio.run(drop_postgres(PG, name))


if __name__ == "__main__":
    main()
