"""`resplog verify`: re-fold every stream (or the given ones) and report each violation of
the log's invariants with its stream and position; exit 1 if there is any.

`--all --jobs N` checks the responses in N processes, each a slice of them in the scan's
order (`LogScan.cuts`), while this one checks the orphaned streams and, after, the
conversations: a stream is folded in Python, a CPU's work (about 20 µs an event), so one
process is what held a whole-log check back (docs/performance.md, "verify --all")."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue as queues
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import click
import msgspec

from adapters.cli.common import database_option, main
from adapters.cli.output import Bar, counted, print_json
from adapters.cli.params import Duration, json_option, progress_option, response_id
from adapters.cli.store import opened, run
from domain.errors import NotFound, ResplogError
from service.audit.conversation_check import check_conversation
from service.audit.verify import Finding, StreamCheck
from service.ports import StoredEvent

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue

    from adapters.store.scan import Head, LogScan, Selection


class Report(msgspec.Struct, kw_only=True):
    streams: int = 0
    events: int = 0
    violations: list[Finding] = msgspec.field(default_factory=list)
    warnings: list[Finding] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        bad = len({f.stream_id for f in self.violations})
        head = "ok" if self.ok else "FAILED"
        return (
            f"{head}: {counted(self.streams, 'stream')}, {counted(self.events, 'event')} "
            f"checked; {counted(len(self.violations), 'violation')} in "
            f"{counted(bad, 'stream')}, {counted(len(self.warnings), 'warning')}"
        )

    def add(self, other: Report) -> None:
        self.streams += other.streams
        self.events += other.events
        self.violations += other.violations
        self.warnings += other.warnings


class Progress(Protocol):
    def stream(self, n: int = 1) -> None: ...
    def event(self, n: int = 1) -> None: ...


Emit = Callable[[Finding], None]


class _Verifier:
    def __init__(self, scan: LogScan, bar: Progress, stale_after: float, emit: Emit | None) -> None:
        self.scan = scan
        self.bar = bar
        self.stale_after = stale_after
        self.emit = emit
        self.report = Report()

    async def run(self, source: AsyncIterator[Head | StoredEvent]) -> None:
        from adapters.store.scan import Head

        check: StreamCheck | None = None
        async for item in source:
            if isinstance(item, Head):
                await self._finish(check)
                check = StreamCheck(item.stream_id, item.record)
            else:
                assert check is not None
                check.feed(item)
                self.bar.event()
        await self._finish(check)

    async def _finish(self, check: StreamCheck | None) -> None:
        if check is None:
            return
        if check.behind:  # the log moved on while we read: is the row really behind?
            check.recheck(await self.scan.record(check.stream_id))
        found = check.finish()
        stale = check.stale(time.time(), self.stale_after)
        self.report.streams += 1
        self.report.events += check.events
        self.report.violations += found
        self.report.warnings += [stale] if stale else []
        if self.emit is not None:
            for finding in [*found, *([stale] if stale else [])]:
                self.emit(finding)
        self.bar.stream()


async def _sources(scan: LogScan, ids: list[str]) -> tuple[int, AsyncIterator[Head | StoredEvent]]:
    from adapters.store.scan import Selection

    if ids:
        missing = sorted(set(ids) - await scan.existing(ids))
        if missing:
            raise NotFound(f"no response {missing[0]} in this database")
        return len(ids), scan.streams_of(ids)

    async def everything() -> AsyncIterator[Head | StoredEvent]:
        async for item in scan.streams(Selection()):
            yield item
        async for item in scan.orphans():
            yield item

    return await scan.count(Selection()), everything()


# --- --all --jobs N ------------------------------------------------------------------------


class _Relay:
    """A part's progress, sent to the parent a few times a second rather than per event."""

    def __init__(self, out: Queue[Any]) -> None:
        self.out = out
        self.streams = self.events = 0
        self.sent = time.monotonic()

    def stream(self, n: int = 1) -> None:
        self.streams += n
        if time.monotonic() - self.sent > 0.25:
            self.flush()

    def event(self, n: int = 1) -> None:
        self.events += n

    def flush(self) -> None:
        self.out.put(("progress", self.streams, self.events))
        self.streams = self.events = 0
        self.sent = time.monotonic()


def _part(index: int, url: str, selection: Selection, stale_after: float, out: Queue[Any]) -> None:
    """One part of `verify --all --jobs N`, in a process of its own: its findings as it
    makes them, its progress, then its report (or why it could not finish) to the parent."""

    async def work() -> Report:
        from adapters.store.scan import LogScan

        exit_with_parent()
        async with opened(url) as store:
            scan = LogScan(store)
            relay = _Relay(out)
            verifier = _Verifier(scan, relay, stale_after, lambda f: out.put(("finding", f)))
            await verifier.run(scan.streams(selection))
            relay.flush()
            return verifier.report

    try:
        out.put(("done", index, run(work())))
    except ResplogError as exc:  # the store's own: "cannot use the database …"
        out.put(("failed", str(exc)))
    except Exception as exc:
        out.put(("failed", f"unexpected {type(exc).__name__}: {exc}"))


def exit_with_parent() -> None:
    """End this part's process the moment its parent is gone, killed included (a `daemon`
    process is stopped only by a parent that exits normally), rather than read on for
    nobody: the parent's sentinel, a pipe, becomes readable when the parent ends."""
    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        asyncio.get_running_loop().add_reader(parent.sentinel, os._exit, 1)


async def _parts(
    scan: LogScan, url: str, jobs: int, stale_after: float, bar: Bar, emit: Emit | None
) -> Report:
    """Every response stream in `jobs` processes, the orphans here meanwhile."""
    from adapters.store.scan import Selection

    cuts = await scan.cuts(Selection(), jobs)
    slices = [
        Selection(after=a, through=b) for a, b in zip([None, *cuts], [*cuts, None], strict=True)
    ]
    context = multiprocessing.get_context("spawn")  # no copy of this process's loop or pool
    out: Queue[Any] = context.Queue()
    procs = [
        context.Process(target=_part, args=(i, url, part, stale_after, out), daemon=True)
        for i, part in enumerate(slices)
    ]
    for proc in procs:
        proc.start()
    try:
        here = _Verifier(scan, bar, stale_after, emit)
        gathering = asyncio.ensure_future(_gather(out, procs, bar, emit))
        try:
            await here.run(scan.orphans())
        except BaseException:
            gathering.cancel()
            raise
        report = Report()
        for part in await gathering:
            report.add(part)
        report.add(here.report)
        return report
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join()


async def _gather(
    out: Queue[Any], procs: Sequence[BaseProcess], bar: Bar, emit: Emit | None
) -> list[Report]:
    """The parts' reports, in the order of their slices; their findings and progress
    passed on as they come."""
    reports: dict[int, Report] = {}
    while len(reports) < len(procs):
        try:
            message = await asyncio.to_thread(out.get, True, 0.5)
        except queues.Empty:
            lost = [p for i, p in enumerate(procs) if p.exitcode is not None and i not in reports]
            if lost:  # a part that ended without a word: killed, or out of memory
                raise ResplogError(
                    f"a verify process ended without its report (exit code {lost[0].exitcode})"
                ) from None
            continue
        kind, *rest = message
        if kind == "progress":
            bar.stream(rest[0])
            bar.event(rest[1])
        elif kind == "finding":
            if emit is not None:
                emit(rest[0])
        elif kind == "failed":
            raise ResplogError(rest[0])
        else:
            reports[rest[0]] = rest[1]
    return [reports[i] for i in range(len(procs))]


async def _conversations(store: Any, report: Report, *, echo: bool) -> None:
    """Each conversation stream against its read model (service/audit/conversation_check)."""
    from adapters.store.conversations import SqlConversations, audited_items, conversation_ids

    rows = SqlConversations(store)
    for cid in await conversation_ids(store):
        row = await rows.get(cid)
        if row is None:
            continue
        events = await store.read(cid)
        items = [(a.item.id, a.deleted) for a in await audited_items(store, cid)]
        found = check_conversation(row, events, items)
        report.streams += 1
        report.events += len(events)
        report.violations += found
        if echo:
            for finding in found:
                click.echo(finding.line())


@main.command()
@database_option
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--all", "everything", is_flag=True, help="Every stream in the database.")
@click.option(
    "--stale-after",
    type=Duration,
    default="10m",
    show_default=True,
    help="Warn about a running response whose lease expired (or, without a lease, whose "
    "last event was) longer ago than this.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --all: check the responses in N processes at once, a slice of them each "
    "(a core each; the database serves them all). The findings are the same; their lines "
    "come in the order they are found.",
)
@progress_option
@json_option
def verify(
    database_url: str,
    ids: tuple[str, ...],
    everything: bool,
    stale_after: float,
    jobs: int,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Check the log's invariants: dense positions, one terminal event and it is last, legal
    transitions, the read model equals the fold, the request in the first event; with
    --all, every conversation's stream against its read model too."""
    if everything == bool(ids):
        raise click.UsageError("give response ids or --all")
    if jobs > 1 and not everything:
        raise click.UsageError("--jobs is for --all")
    for rid in ids:
        response_id(rid)
    emit: Emit | None = None if as_json else lambda finding: click.echo(finding.line())

    async def work() -> Report:
        from adapters.store.scan import LogScan

        async with opened(database_url) as store:
            scan = LogScan(store)
            total, source = await _sources(scan, list(dict.fromkeys(ids)))
            with Bar("verifying", total, False if len(ids) == 1 else progress) as bar:
                if jobs > 1:
                    report = await _parts(scan, database_url, jobs, stale_after, bar, emit)
                else:
                    verifier = _Verifier(scan, bar, stale_after, emit)
                    await verifier.run(source)
                    report = verifier.report
                bar.done()
            if everything:
                await _conversations(store, report, echo=not as_json)
            return report

    report = run(work())
    if as_json:
        print_json({"ok": report.ok, **msgspec.structs.asdict(report)})
    else:
        click.echo(report.summary())
    if not report.ok:
        raise click.exceptions.Exit(1)
