"""Server CPU per response at GPU pace: what `resplog serve` spends on each streamed
response while an engine writes its tokens at a GPU's pace, with many streams open at once.

For each `--tree` (a checkout of resplog: its code runs from `PYTHONPATH=TREE`, under this
interpreter's virtual environment) the bench starts one `resplog serve` with the scripted
engine paced at `--rate` tokens a second per stream and `--tokens` answer tokens, on the
embedded SQLite store (a file in a temporary folder) and on PostgreSQL (a fresh database of
its own for each server on `--pg`'s server, dropped after). A round holds `--streams`
clients, each sending `--per-stream` streaming creates one after another and reading each
to its `response.completed` (their first creates spread over one answer's time, so that the
streams do not move in step); its figure is the server process's CPU time over the round
(`/proc/PID/stat` utime + stime, its children included) divided by the responses completed.
The rounds alternate between the trees (A B B A A B ...), so that each meets the same load
of a shared machine, and the bench prints each tree's median and its ratio to the first
tree's: of the medians, and the median of the ratios round by round. Each server first
runs one short warm-up round, not counted.

The client is httpx, reading the raw SSE bytes (`--client openai`: the official SDK,
which parses every event into objects, at more of the client's CPU). The machine's load average
is printed beside each round: the figures are the server's CPU seconds, which another
process's load moves less than it moves times, but not to nothing.

    git worktree add /tmp/before HEAD~1
    .venv/bin/python bench/gpu_pace_bench.py --tree /tmp/before --tree . --rounds 4
    .venv/bin/python bench/gpu_pace_bench.py --tree . --store sqlite --rate 50
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

TICKS = os.sysconf("SC_CLK_TCK")
PG = os.environ.get("RESPLOG_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
RESPLOG = str(Path(sys.executable).with_name("resplog"))
DONE = b"response.completed"
Popen = subprocess.Popen[bytes]


@dataclass
class Server:
    """One tree's running `resplog serve`."""

    tree: Path
    label: str
    base: str
    process: Popen
    log: Path
    cpu: list[float] = field(default_factory=list)  # CPU seconds a response, by round
    rates: list[float] = field(default_factory=list)  # responses a second, by round


def _stat(pid: str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` and its live descendants, all threads, in seconds."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                parents[int(entry.name)] = int(_stat(entry.name)[1])
    tree, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in tree} - tree
        grew = bool(more)
        tree |= more
    ticks = 0
    for member in tree:
        with contextlib.suppress(OSError, IndexError):
            fields = _stat(str(member))
            ticks += int(fields[11]) + int(fields[12])
    return ticks / TICKS


def _label(tree: Path) -> str:
    got = subprocess.run(
        ["git", "-C", str(tree), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    commit = got.stdout.strip() if got.returncode == 0 else "no git"
    return f"{tree} ({commit})"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def _spawn(tree: Path, url: str, args: argparse.Namespace, log: Path, port: int) -> Popen:
    """Migrate `url` with the tree's code, then start serving it on `port`."""
    env = _env(tree)
    subprocess.run(
        [RESPLOG, "migrate", "--database-url", url], check=True, env=env, capture_output=True
    )
    command = [RESPLOG, "serve", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--database-url", url, "--engine", "scripted"]
    command += ["--scripted-delay-ms", f"{1000 / args.rate:g}"]
    command += ["--scripted-tokens", str(args.tokens), *args.serve_arg]
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


def _tail(log: Path) -> str:
    return log.read_text()[-2000:]


async def start(tree: Path, url: str, args: argparse.Namespace, log: Path) -> Server:
    """The tree's server over `url`, once its `/health` answers."""
    port = _free_port()
    process = await asyncio.to_thread(_spawn, tree, url, args, log, port)
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base) as client:
        for _ in range(300):
            if process.poll() is not None:
                raise RuntimeError(f"server exited: {_tail(log)}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get("/health")).status_code == 200:
                    return Server(tree, _label(tree), base, process, log)
            await asyncio.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not become healthy: {_tail(log)}")


def stop(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


async def _one_httpx(client: httpx.AsyncClient, body: dict[str, object]) -> bool:
    """One streaming create, its SSE read as raw bytes: whether it completed."""
    seen, tail = False, b""
    async with client.stream("POST", "/v1/responses", json=body) as reply:
        if reply.status_code != 200:
            return False
        async for chunk in reply.aiter_raw():
            seen = seen or DONE in tail + chunk
            tail = chunk[-len(DONE) :]
    return seen


async def _one_sdk(client: object, body: dict[str, object]) -> bool:
    stream = await client.responses.create(**body)  # type: ignore[attr-defined]
    last = None
    async for event in stream:
        last = event.type
    return last == "response.completed"


async def one_round(server: Server, args: argparse.Namespace, per_stream: int) -> tuple[int, int]:
    """`args.streams` clients, `per_stream` creates each: (completed, failed)."""
    answer_s = args.tokens / args.rate
    done, failed = 0, 0
    limits = httpx.Limits(max_connections=args.streams, max_keepalive_connections=args.streams)
    async with httpx.AsyncClient(base_url=server.base, limits=limits, timeout=120) as http:
        if args.client == "openai":  # its own connection pool (of up to 1,000 connections)
            import openai

            sdk = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key="-", max_retries=0)

        async def stream(i: int) -> None:
            nonlocal done, failed
            await asyncio.sleep(answer_s * i / args.streams)
            for k in range(per_stream):
                body: dict[str, object] = {"model": "scripted", "input": f"s{i} r{k}"}
                body["stream"] = True
                try:
                    if args.client == "openai":
                        ok = await _one_sdk(sdk, body)
                    else:
                        ok = await _one_httpx(http, body)
                except (httpx.HTTPError, OSError) as exc:
                    print(f"  stream {i}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    ok = False
                done, failed = done + ok, failed + (not ok)

        await asyncio.gather(*(stream(i) for i in range(args.streams)))
        if args.client == "openai":
            await sdk.close()
    return done, failed


async def measure(server: Server, args: argparse.Namespace, n: int) -> None:
    load = os.getloadavg()[0]
    began_cpu, began = cpu_seconds(server.process.pid), time.monotonic()
    mine = time.process_time()
    done, failed = await one_round(server, args, args.per_stream)
    wall = time.monotonic() - began
    spent = cpu_seconds(server.process.pid) - began_cpu
    client = time.process_time() - mine
    per = spent / max(done, 1)
    server.cpu.append(per)
    server.rates.append(done / wall)
    print(
        f"  round {n} {server.label}: {done} responses ({failed} failed) in {wall:.1f} s, "
        f"server {spent:.2f} CPU s = {per * 1e3:.2f} ms a response "
        f"(client {client / max(done, 1) * 1e3:.2f} ms); load {load:.2f}",
        flush=True,
    )


async def _admin(pg: str, sql: str) -> None:
    dsn = pg.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def database(store: str, folder: Path, i: int, pg: str) -> AsyncIterator[str]:
    """A store for the i-th server: a SQLite file, or a fresh PostgreSQL database."""
    if store == "sqlite":
        yield f"sqlite+aiosqlite:///{folder / f'resplog{i}.db'}"
        return
    name = f"resplog_gpu_pace_{secrets.token_hex(4)}"
    await _admin(pg, f'CREATE DATABASE "{name}"')
    try:
        yield pg.rsplit("/", 1)[0] + f"/{name}"
    finally:
        await _admin(pg, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def bench_store(store: str, args: argparse.Namespace) -> None:
    print(
        f"\n## {store}: {args.streams} streams, {args.tokens} tokens at {args.rate:g}/s, "
        f"{args.per_stream} responses a stream a round",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="gpu_pace_") as tmp:
        folder = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            servers: list[Server] = []
            for i, tree in enumerate(args.tree):
                url = await stack.enter_async_context(database(store, folder, i, args.pg))
                server = await start(tree, url, args, folder / f"server{i}.log")
                stack.callback(stop, server)
                servers.append(server)
            for server in servers:
                await one_round(server, args, 1)  # warm-up
            for n in range(args.rounds):
                order = servers if n % 2 == 0 else servers[::-1]
                for server in order:
                    await measure(server, args, n + 1)
        report(servers)


def report(servers: list[Server]) -> None:
    """Each tree's median, and its ratio to the first tree's: of the medians, and the
    median of the round-by-round ratios (each round's two runs ran next to each other)."""
    first = servers[0].cpu
    print("\n| tree | server CPU a response, median | rounds (ms) | responses/s | / first |")
    print("|---|---|---|---|---|")
    for s in servers:
        mid = statistics.median(s.cpu)
        rounds = ", ".join(f"{v * 1e3:.2f}" for v in s.cpu)
        rate = statistics.median(s.rates)
        paired = statistics.median(b / a for a, b in zip(first, s.cpu, strict=True))
        ratio = f"{mid / statistics.median(first):.3f} (by round {paired:.3f})"
        print(f"| {s.label} | {mid * 1e3:.2f} ms | {rounds} | {rate:.1f} | {ratio} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="a resplog checkout to serve (repeat to compare; default: this one)",
    )
    p.add_argument(
        "--store",
        choices=["sqlite", "postgres"],
        action="append",
        help="store(s) to bench (repeatable; default: both)",
    )
    p.add_argument(
        "--pg",
        default=PG,
        help="PostgreSQL server (a database on it) to make each server's database on "
        "(default: $RESPLOG_TEST_PG_URL, else the test suite's)",
    )
    p.add_argument("--rate", type=float, default=100.0, help="tokens a second per stream")
    p.add_argument("--tokens", type=int, default=200, help="answer tokens a response")
    p.add_argument("--streams", type=int, default=64, help="concurrent streams")
    p.add_argument("--per-stream", type=int, default=10, help="responses a stream a round")
    p.add_argument("--rounds", type=int, default=4, help="measured rounds per tree and store")
    p.add_argument("--client", choices=["httpx", "openai"], default="httpx")
    p.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        help="one more argument for `resplog serve` (repeatable)",
    )
    args = p.parse_args()
    args.tree = [t.resolve() for t in (args.tree or [Path(__file__).resolve().parents[1]])]
    print(f"cores: {os.cpu_count()}, load average at start: {os.getloadavg()}")
    for store in args.store or ["sqlite", "postgres"]:
        asyncio.run(bench_store(store, args))


if __name__ == "__main__":
    main()
