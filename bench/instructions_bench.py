"""Instructions a create costs the server, counted by valgrind's callgrind: a figure that does
not move with the box's speed, where CPU time does.

On the 2-core box the CPU a create costs moves by ±10 % from one run to the next and by
2.5 times from a fast hour to a slow one (docs/performance.md), so a change of a few percent
cannot be told apart in `burst_bench.py --against`. Callgrind counts the instructions the
process runs instead: the same code on the same input gives nearly the same count,
whatever else the machine is doing.

The bench runs `resplog serve` (scripted engine, zero delay, a fresh PostgreSQL database)
under `valgrind --tool=callgrind --instr-atstart=no`, about fifty times slower. Once it
answers and has served a few warm-up creates, counting is switched on
(`callgrind_control -i on`), `--creates` streaming creates go one after another on one
kept-alive connection (each read to its end, as `RawBurst` reads a burst), and the count
is dumped; then the server idles `--idle` seconds, dumped again, and that idle rate (its
timers and polls, about 1 M instructions a second) times the busy window is taken out.
With `--burst N`, `--bursts` bursts of N simultaneous streaming creates are counted the
same way: slowed fifty times, a burst's group commits batch differently from a real
one's, so that figure moves more (±4 %) and compares only with itself. `--new-connections`
counts the bursts again, on a server of its own, with each create on a connection of its
own opened and closed in the counted window, as `burst_bench.py`'s plain bursts are.

With `--against TREE` the same runs go to a server of that tree's code (`PYTHONPATH`),
alternating, `--rounds` times each; the bench prints the median of each and the ratio.

    .venv/bin/python bench/instructions_bench.py --against /tmp/before --rounds 3

An instruction is not a nanosecond: a change that saves memory traffic or cache misses
saves more time than its count says, and one that adds them costs more. Use it to tell a
change's direction and size; `burst_bench.py` gives the time. Needs valgrind (Debian's
package; `callgrind_control` comes with it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.burst_bench import RawBurst
from bench.databases import PG, drop_postgres, fresh_postgres
from tests.e2e.conftest import free_port

_TOTAL = re.compile(r"^(?:summary|totals): (\d+)", re.MULTILINE)


class Counted:
    """One server under callgrind: start it, count what a load costs, stop it."""

    def __init__(self, tree: Path | None, out: Path) -> None:
        self.tree, self.out = tree, out

    async def measure(self, args: argparse.Namespace) -> dict[str, float]:
        async with self._server(args) as (pid, base):
            figures = {"sequential": await self._count(pid, base, 1, args.creates, args)}
            if args.burst:
                figures["burst"] = await self._count(pid, base, args.burst, args.bursts, args)
        if args.burst and args.new_connections:
            # On a server of its own: a third count's dumps in one process came out wrong
            # here (a fifth of the count, and once below zero). The sequential creates first
            # there too, since a count depends on what the process ran before it (bursts
            # on new connections counted right after the warm-up cost 3.75 M instructions a
            # create, and 3.29 M after the sequential ones).
            async with self._server(args) as (pid, base):
                await self._count(pid, base, 1, args.creates, args)
                figures["burst, new connections"] = await self._count(
                    pid, base, args.burst, args.bursts, args, kept=False
                )
        return figures

    @contextlib.asynccontextmanager
    async def _server(self, args: argparse.Namespace) -> AsyncIterator[tuple[int, str]]:
        """A server under callgrind on a fresh database, answering: its pid and URL."""
        url, db = await fresh_postgres(PG)
        env = dict(os.environ)
        if self.tree is not None:
            env["PYTHONPATH"] = str(self.tree)
        port = free_port()
        log = (self.out / f"serve.{port}.log").open("wb")
        process = _serve(url, port, env, self.out / f"callgrind.{port}", log, args.tokens)
        base = f"http://127.0.0.1:{port}"
        try:
            await _healthy(base, process)
            yield process.pid, base
        finally:
            process.terminate()
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:  # under valgrind a shutdown can hang
                process.kill()
                process.wait(30)
            log.close()
            await drop_postgres(PG, db)
            for path in self.out.glob(f"callgrind.{port}*"):
                path.unlink()

    async def _count(
        self,
        pid: int,
        base: str,
        size: int,
        times: int,
        args: argparse.Namespace,
        *,
        kept: bool = True,
    ) -> float:
        """Instructions a create over `times` bursts of `size` (1: one after another),
        less the idle rate over the same window; `kept`: on kept-alive connections, else
        each on a connection of its own, opened and closed within the window."""
        raw = RawBurst(base, args.tokens, kept=kept)
        try:
            for _ in range(2):  # warm: imports, caches, the connections opened
                await raw.burst(size)
            _control("-i", "on", pid)
            began = time.monotonic()
            for _ in range(times):
                await raw.burst(size)
            await asyncio.sleep(0.5)  # the last group commit, the connections closing
            window = time.monotonic() - began
            busy = self._dump(pid)
            await asyncio.sleep(args.idle)
            idle = self._dump(pid)
            _control("-i", "off", pid)
        finally:
            raw.close()
        return (busy - idle / args.idle * window) / (size * times)

    def _dump(self, pid: int) -> int:
        """The instructions counted since the last dump."""
        before = set(self.out.glob("callgrind.*"))
        _control("-d", None, pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = set(self.out.glob("callgrind.*")) - before
            for path in new:
                found = _TOTAL.search(path.read_text(errors="replace"))
                if found:
                    path.unlink()
                    return int(found.group(1))
            time.sleep(0.2)
        raise RuntimeError("callgrind wrote no dump")


def _serve(
    url: str, port: int, env: dict[str, str], dumps: Path, log: IO[bytes], tokens: int
) -> subprocess.Popen[bytes]:
    """`resplog serve` under callgrind, counting nothing until told, on a migrated `url`."""
    python, resplog = sys.executable, str(Path(sys.executable).with_name("resplog"))
    migrate = [python, resplog, "migrate", "--database-url", url]
    subprocess.run(migrate, check=True, capture_output=True, env=env)
    serve = [python, resplog, "serve", "--host", "127.0.0.1", "--port", str(port)]
    serve += ["--database-url", url, "--engine", "scripted", "--scripted-delay-ms", "0"]
    serve += ["--scripted-tokens", str(tokens)]
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    valgrind.append(f"--callgrind-out-file={dumps}")
    return subprocess.Popen([*valgrind, *serve], stdout=log, stderr=subprocess.STDOUT, env=env)


def _control(flag: str, value: str | None, pid: int) -> None:
    command = ["callgrind_control", flag, *([value] if value else []), str(pid)]
    subprocess.run(command, check=True, capture_output=True)


async def _healthy(base: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300  # an interpreter under valgrind starts slowly
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError("the server under valgrind exited")
            try:
                if (await client.get("/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.5)
    raise RuntimeError("the server under valgrind did not answer")


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--creates", type=int, default=40, help="sequential streaming creates")
    p.add_argument("--burst", type=int, default=0, help="burst size (0: no bursts)")
    p.add_argument("--bursts", type=int, default=4)
    p.add_argument("--tokens", type=int, default=8, help="scripted answer length")
    p.add_argument("--idle", type=float, default=5.0, help="seconds of idle counted")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--against", type=Path, help="another tree, run beside this one")
    p.add_argument(
        "--new-connections",
        action="store_true",
        help="with --burst: the bursts again, each create on a new connection",
    )
    args = p.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("needs valgrind (Debian: apt-get install valgrind)")
    servers: dict[str, Path | None] = {"this tree": None}
    if args.against is not None:
        servers = {args.against.name: args.against.resolve(), "this tree": None}
    got: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name, tree in servers.items():
                figures = await Counted(tree, Path(tmp)).measure(args)
                for kind, value in figures.items():
                    got[name].setdefault(kind, []).append(value)
                shown = ", ".join(f"{k} {v / 1e6:.3f} M" for k, v in figures.items())
                print(f"round {round_ + 1}, {name}: {shown}", flush=True)
    print(f"\ninstructions a streaming create ({args.tokens} tokens), medians of {args.rounds}:")
    names = list(servers)
    kinds = list(got[names[0]])
    labels = {
        "sequential": f"{args.creates} one after another, kept-alive",
        "burst": f"bursts of {args.burst}, kept-alive",
        "burst, new connections": f"bursts of {args.burst}, new connections",
    }
    if len(names) == 1:
        print("| creates | M instructions a create | spread |\n|---|---|---|")
        for kind in kinds:
            values = got[names[0]][kind]
            spread = f"{min(values) / 1e6:.3f} to {max(values) / 1e6:.3f}"
            print(f"| {labels[kind]} | {statistics.median(values) / 1e6:.3f} | {spread} |")
        return
    before, after = names
    print(f"| creates | {before} | this tree | this tree / {before} |\n|---|---|---|---|")
    for kind in kinds:
        a, b = statistics.median(got[before][kind]), statistics.median(got[after][kind])
        print(f"| {labels[kind]} | {a / 1e6:.3f} M | {b / 1e6:.3f} M | {b / a:.3f} |")


if __name__ == "__main__":
    asyncio.run(main())
