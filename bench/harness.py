"""The benches' harness: a `resplog serve` (scripted engine) on SQLite or on a PostgreSQL
database of its own, dropped after; the CPU a process and its children spend, from /proc;
each figure printed beside its baseline from the same run."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import shutil
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from tests.e2e.conftest import Server, start_server, stop_server

# The server the benches create their databases on (the test suite's, by default).
PG = os.environ.get("RESPLOG_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
# Every bench database's name starts with this, so that benches sharing a server can tell
# their databases apart.
PREFIX = os.environ.get("RESPLOG_BENCH_DB_PREFIX", "resplog_bench_")
TICKS = os.sysconf("SC_CLK_TCK")


def parser(doc: str) -> argparse.ArgumentParser:
    """A bench's parser: its docstring's first paragraph as the description, the rest (the
    command that reruns it) as the epilog."""
    head, _, rest = doc.strip().partition("\n\n")
    return argparse.ArgumentParser(
        description=" ".join(head.split()),
        epilog=rest,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def database_arguments(p: argparse.ArgumentParser, *, sqlite: bool = True) -> None:
    """`--database-url`: the PostgreSQL server the bench database is made on; `--sqlite`."""
    p.add_argument(
        "--database-url",
        default=PG,
        help="PostgreSQL server to create the bench's database on (dropped after)",
    )
    if sqlite:
        p.add_argument("--sqlite", action="store_true", help="the embedded SQLite store instead")


def dsn(url: str) -> str:
    """`url` as asyncpg takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _admin(admin_url: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn(admin_url))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def fresh_postgres(admin_url: str = PG) -> tuple[str, str]:
    """An empty database on `admin_url`'s server: its URL (same driver) and its name."""
    name = f"{PREFIX}{secrets.token_hex(5)}"
    await _admin(admin_url, f'CREATE DATABASE "{name}"')
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), name


async def drop_postgres(admin_url: str, name: str) -> None:
    await _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A temporary directory (server logs, SQLite files), removed after."""
    path = Path(tempfile.mkdtemp(prefix="resplog-bench-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def database(sqlite: bool, tmp: Path, admin_url: str = PG) -> Iterator[str]:
    """A database URL: a SQLite file in `tmp`, or a fresh PostgreSQL database, dropped after."""
    if sqlite:
        yield f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
        return
    url, name = asyncio.run(fresh_postgres(admin_url))
    try:
        yield url
    finally:
        asyncio.run(drop_postgres(admin_url, name))


def scripted(delay_ms: float = 0.0) -> tuple[str, ...]:
    """The scripted engine at `delay_ms` a delta (a request's `scripted_delay_ms` and
    `scripted_tokens` metadata set its own pace and length)."""
    return ("--engine", "scripted", "--scripted-delay-ms", f"{delay_ms:g}")


@contextlib.contextmanager
def serving(
    *extra: str,
    sqlite: bool = False,
    admin_url: str = PG,
    engine: Sequence[str] = scripted(),
    processes: int = 1,
    tree: Path | None = None,
) -> Iterator[Server]:
    """`resplog serve` with `extra` flags on its own database, ready (its `/health`
    answered), stopped and its database dropped after; `tree`: a checkout whose code it runs
    (migrations included) instead of the one on this interpreter's path."""
    more = ("--processes", str(processes)) if processes > 1 else ()
    env = {**os.environ, "PYTHONPATH": str(tree)} if tree else None
    with workdir() as tmp, database(sqlite, tmp, admin_url) as url:
        kind = "sqlite" if sqlite else "postgres"
        log = tmp / "server.log"
        server = start_server(url, kind, log, *extra, *more, engine=tuple(engine), env=env)
        try:
            yield server
        finally:
            stop_server(server)


def _stat(pid: str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _on_cpu(pid: int) -> float:
    """Seconds `pid` has run: its threads' `schedstat` (the scheduler's count, in ns; `stat`'s
    times move in 10 ms ticks), or `stat`'s ticks where the kernel keeps no `schedstat`."""
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9
    except (OSError, ValueError, IndexError):
        fields = _stat(str(pid))
        return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_seconds(pid: int) -> float:
    """CPU time so far of `pid` and its live descendants (`serve --processes N` serves in
    children)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):  # exited while we looked
                parents[int(entry.name)] = int(_stat(entry.name)[1])
    tree = {pid}
    while joining := {c for c, p in parents.items() if p in tree} - tree:
        tree |= joining
    total = 0.0
    for member in tree:
        with contextlib.suppress(OSError):  # exited meanwhile
            total += _on_cpu(member)
    return total


def postgres_cpu() -> float:
    """CPU seconds so far of this machine's PostgreSQL processes (0 where it runs elsewhere)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                    fields = _stat(entry.name)
                    total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def pct(values: Sequence[float], p: float) -> float:
    """The `p`th percentile of `values` (nearest rank; NaN for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Table:
    """Figures, each beside its baseline from the same run and their ratio, printed as a
    Markdown table (as docs/performance.md holds them)."""

    def __init__(self, title: str, unit: str) -> None:
        self.title, self.unit = title, unit
        self.rows: list[tuple[str, float, str, float | None]] = []

    def add(
        self, figure: str, value: float, baseline: str = "", against: float | None = None
    ) -> None:
        """`figure`'s `value`, beside `baseline`'s value `against` (none: no baseline)."""
        self.rows.append((figure, value, baseline, against))

    def print(self) -> None:
        print(f"\n{self.title}\n")
        print(f"| figure | {self.unit} | baseline | {self.unit} | ratio |")
        print("|---|---|---|---|---|")
        for figure, value, baseline, against in self.rows:
            if against is None:
                print(f"| {figure} | {_figure(value)} | | | |")
                continue
            ratio = f"{value / against:.2f}x" if against else ""
            print(f"| {figure} | {_figure(value)} | {baseline} | {_figure(against)} | {ratio} |")


def _figure(value: float) -> str:
    """Three significant digits or more: 1,234 / 123 / 12.3 / 1.23."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
