"""Memory soak: does a server's RSS stay flat under a steady load, or grow with every response?

Starts `resplog serve` (scripted engine, no delay) on a fresh PostgreSQL database (or
SQLite), keeps `--clients` streaming creates of `--tokens` tokens each in flight for
`--responses` responses, and prints the server's RSS (from /proc/<pid>/status) every
`--every` responses, with the growth per 100,000 responses since the end of the warm-up
(`--warmup` responses). The target: under 1 MiB per 100,000 responses once warm. Exits 1
past `--max-growth-mib` (when given). With `--url` and `--pid` it loads a server already
running instead. Not a test.

    .venv/bin/python bench/memory_bench.py --clients 30 --tokens 200 --responses 60000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx

PG = os.environ.get("RESPLOG_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
RESPLOG = str(Path(sys.executable).with_name("resplog"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


class Load:
    """`clients` loops, each streaming one create after another until `total` are done."""

    def __init__(self, url: str, pid: int, args: argparse.Namespace) -> None:
        self.url, self.pid, self.args = url, pid, args
        self.done = self.errors = 0
        self.first_error = ""
        self.warm: tuple[int, float] | None = None
        self.started = time.monotonic()

    async def run(self) -> float:
        """The growth in MiB per 100,000 responses after the warm-up."""
        limits = httpx.Limits(max_connections=self.args.clients)
        async with httpx.AsyncClient(base_url=self.url, timeout=60, limits=limits) as http:
            await asyncio.gather(*(self._client(http) for _ in range(self.args.clients)))
        return self._report(final=True)

    async def _client(self, http: httpx.AsyncClient) -> None:
        body = {
            "model": "scripted",
            "input": "How does the log keep a response?",
            "stream": True,
            "metadata": {"scripted_tokens": str(self.args.tokens), "scripted_delay_ms": "0"},
        }
        while self.done + self.errors < self.args.responses:
            try:
                async with http.stream("POST", "/v1/responses", json=body) as answer:
                    async for _ in answer.aiter_raw():
                        pass
                    error = "" if answer.status_code == 200 else f"HTTP {answer.status_code}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            if error:
                self.errors += 1
                self.first_error = self.first_error or error
                continue
            self.done += 1
            if self.done == self.args.warmup:
                self.warm = (self.done, rss_mib(self.pid))
            if self.done % self.args.every == 0:
                self._report()

    def _report(self, *, final: bool = False) -> float:
        now = rss_mib(self.pid)
        rate = self.done / (time.monotonic() - self.started)
        growth = float("nan")
        since = "warming up" if self.warm is None else "the baseline"
        if self.warm is not None and self.done > self.warm[0]:
            growth = (now - self.warm[1]) / (self.done - self.warm[0]) * 100_000
            since = f"{growth:+.2f} MiB per 100,000 since the warm-up"
        label = "end" if final else "at"
        print(
            f"{label} {self.done:>8,} responses: RSS {now:7.1f} MiB  "
            f"({since}; {rate:.0f}/s, {self.errors} errors)",
            flush=True,
        )
        if final and self.first_error:
            print(f"first error: {self.first_error}")
        return growth


async def _database(sqlite: bool, tmp: Path) -> tuple[str, str | None]:
    if sqlite:
        return f"sqlite+aiosqlite:///{tmp / 'resplog.db'}", None
    name = f"resplog_bench_{secrets.token_hex(5)}"
    await _admin(f'CREATE DATABASE "{name}"')
    base, _, _ = PG.rpartition("/")
    return f"{base}/{name}", name


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(PG.replace("+asyncpg", ""))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _serve(url: str, tmp: Path, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    subprocess.run([RESPLOG, "migrate", "--database-url", url], check=True, capture_output=True)
    log = (tmp / "server.log").open("wb")
    port = 18000 + secrets.randbelow(20000)
    command = [RESPLOG, "serve", "--port", str(port), "--database-url", url, *extra]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError((tmp / "server.log").read_text())
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return server, base
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server did not start")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--clients", type=int, default=30, help="streaming clients at once")
    p.add_argument("--tokens", type=int, default=200, help="tokens of each response")
    p.add_argument("--responses", type=int, default=60_000, help="responses in all")
    p.add_argument("--warmup", type=int, default=10_000, help="responses before the baseline")
    p.add_argument("--every", type=int, default=10_000, help="print the RSS every N responses")
    p.add_argument("--sqlite", action="store_true", help="the embedded SQLite store")
    p.add_argument("--max-growth-mib", type=float, help="exit 1 past this per 100,000")
    p.add_argument("--url", help="load this running server instead of starting one")
    p.add_argument("--pid", type=int, help="the running server's process id (with --url)")
    p.add_argument("--serve-arg", action="append", default=[], help="one more `serve` flag")
    args = p.parse_args()
    if args.url:
        if args.pid is None:
            p.error("--url needs --pid")
        growth = asyncio.run(Load(args.url, args.pid, args).run())
    else:
        growth = _own_server(args)
    return 1 if args.max_growth_mib is not None and not growth <= args.max_growth_mib else 0


def _own_server(args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        url, name = asyncio.run(_database(args.sqlite, Path(tmp)))
        try:
            server, base = _serve(url, Path(tmp), args.serve_arg)
            try:
                print(f"server {base} (pid {server.pid}) on {url.split('://')[0]}", flush=True)
                return asyncio.run(Load(base, server.pid, args).run())
            finally:
                server.terminate()
                server.wait(30)
        finally:
            if name is not None:
                asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    sys.exit(main())
