"""Export benchmark: `resplog export` (and `verify --all`) on logs of growing size, with the
child process's peak RSS, to show that memory stays bounded (prints figures; not a test).
See docs/performance.md.

    .venv/bin/python bench/export_bench.py                  # PostgreSQL (fresh database)
    .venv/bin/python bench/export_bench.py --sqlite         # the embedded store
    .venv/bin/python bench/export_bench.py --sizes 10000,100000,1000000

The log is filled with completed responses made by the real aggregate (created,
in_progress, `--deltas` text deltas, the closing events, completed), committed many streams
per transaction. After each fill the CLI runs as a child process writing to a file; its
peak resident set size comes from `wait4`'s rusage, taken by a minimal launcher process so
that it is the command's own (see `measure`). `baseline` is an export that selects nothing:
the interpreter and its imports.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.store.factory import open_store
from adapters.store.migrate import upgrade_async
from adapters.store.rows import encode_append, merge
from adapters.store.sql import SqlEventStore
from bench.databases import database_arguments, drop_postgres, fresh_postgres
from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import create
from domain.events import RequestFacts
from domain.generation import Finished, TextDelta, TokenUsage
from domain.objects import InputMessage, InputText, ResponseObject

RESPLOG = str(Path(sys.executable).with_name("resplog"))
STREAMS_PER_COMMIT = 50


def stream_batch(deltas: int, created_at: int):  # type: ignore[no-untyped-def]
    """One completed response as a single store batch (`created` ... `completed`)."""
    rid = f"resp_{secrets.token_hex(24)}"
    response = ResponseObject(
        id=rid, created_at=created_at, status="in_progress", model="bench-model"
    )
    question = InputMessage(id=f"msg_{rid}", role="user", content=[InputText(text="Hello")])
    decision = create(response, RequestFacts(owner="bench", input=[question]))
    events, state = list(decision.events), decision.state
    for i in range(deltas):
        decision = emit(state, TextDelta(text=f" token{i}"))
        events += decision.events
        state = decision.state
    usage = TokenUsage(input_tokens=5, output_tokens=deltas)
    decision = finish(state, Finished(reason="stop", usage=usage), now=created_at)
    events += decision.events
    return merge([encode_append(rid, -1, events)])


async def fill(store: SqlEventStore, target: int, have: int, deltas: int) -> tuple[int, int]:
    """Append completed responses until the log holds at least `target` events."""
    streams = 0
    created = int(time.time()) - 86400
    while have < target:
        batches = [stream_batch(deltas, created + streams + i) for i in range(STREAMS_PER_COMMIT)]
        failed = await store.commit(batches)
        assert not failed, failed
        have += sum(len(b.rows) for b in batches)
        streams += len(batches)
    return have, streams


# The child's peak RSS must be its own. Linux keeps a process's `maxrss` across exec, and a
# child forked (or vforked) from this process starts with this process's high-water mark,
# which here holds the whole fill. So a minimal interpreter (`-S`, ~8 MiB) forks the
# command and reports its rusage: the command's figure is then max(~8 MiB, its own).
_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss, file=sys.stderr)
"""


def measure(args: list[str], out: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one `resplog` run writing stdout to `out`."""
    with out.open("wb") as sink:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-S", "-c", _LAUNCHER, RESPLOG, *args],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - start
    code, rss = map(int, done.stderr.split())
    if code != 0:
        raise RuntimeError(f"resplog {' '.join(args)} exited {code}")
    return wall, rss


def report(label: str, events: int, runs: list[tuple[float, int]], out: Path) -> None:
    wall = statistics.median(w for w, _ in runs)
    rss = statistics.median(r for _, r in runs) / 1024
    rate = f"{events / wall:10,.0f}" if events else f"{'-':>10}"
    size = out.stat().st_size / 2**20
    print(f"{label:<10} {events:>9,} {wall:8.2f} {rate} {rss:9.1f} {size:9.1f}")


async def run(args: argparse.Namespace) -> None:
    tmp = tempfile.TemporaryDirectory()
    out = Path(tmp.name) / "export.jsonl"
    name = ""
    if args.sqlite:
        url = f"sqlite:///{tmp.name}/bench.db"
    else:
        url, name = await fresh_postgres(args.database_url)
    try:
        await upgrade_async(url)
        store = await open_store(url, listen=False)
        print(
            f"# {store.dialect}; responses of {args.deltas} deltas; median of {args.repeat} runs;"
            f" load {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores"
        )
        heads = ("events", "wall s", "events/s", "RSS MiB", "out MiB")
        print(
            f"{'command':<10} "
            + " ".join(f"{h:>{w}}" for h, w in zip(heads, (9, 8, 10, 9, 9), strict=True))
        )
        db = ["--database-url", url]
        base = [measure(["export", "--owner", "nobody", *db], out) for _ in range(args.repeat)]
        report("baseline", 0, base, out)
        have = 0
        for size in args.sizes:
            have, _ = await fill(store, size, have, args.deltas)
            runs = [measure(["export", *db], out) for _ in range(args.repeat)]
            report("export", have, runs, out)
            if args.verify:
                runs = [measure(["verify", "--all", *db], out) for _ in range(args.repeat)]
                report("verify", have, runs, out)
        await store.close()
    finally:
        if name:
            await drop_postgres(args.database_url, name)
        tmp.cleanup()


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    database_arguments(p)
    p.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[10_000, 100_000],
        help="log sizes (events) to export, comma-separated, growing",
    )
    p.add_argument("--deltas", type=int, default=200, help="text deltas per response")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-verify", dest="verify", action="store_false", help="skip verify --all")
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
