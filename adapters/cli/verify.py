"""`resplog verify`: re-fold every stream (or the given ones) and report each violation of
the log's invariants with its stream and position; exit 1 if there is any."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import click
import msgspec

from adapters.cli.common import database_option, main
from adapters.cli.output import Bar, counted, print_json
from adapters.cli.params import Duration, json_option, progress_option, response_id
from adapters.cli.store import opened, run
from domain.errors import NotFound
from service.audit.conversation_check import check_conversation
from service.audit.verify import Finding, StreamCheck
from service.ports import StoredEvent

if TYPE_CHECKING:
    from adapters.store.scan import Head, LogScan


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


class _Verifier:
    def __init__(self, scan: LogScan, bar: Bar, stale_after: float, echo: bool) -> None:
        self.scan = scan
        self.bar = bar
        self.stale_after = stale_after
        self.echo = echo
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
        if self.echo:
            for finding in [*found, *([stale] if stale else [])]:
                click.echo(finding.line())
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
@progress_option
@json_option
def verify(
    database_url: str,
    ids: tuple[str, ...],
    everything: bool,
    stale_after: float,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Check the log's invariants: dense positions, one terminal event and it is last, legal
    transitions, the read model equals the fold, the request in the first event; with
    --all, every conversation's stream against its read model too."""
    if everything == bool(ids):
        raise click.UsageError("give response ids or --all")
    for rid in ids:
        response_id(rid)

    async def work() -> Report:
        from adapters.store.scan import LogScan

        async with opened(database_url) as store:
            scan = LogScan(store)
            total, source = await _sources(scan, list(dict.fromkeys(ids)))
            with Bar("verifying", total, False if len(ids) == 1 else progress) as bar:
                verifier = _Verifier(scan, bar, stale_after, echo=not as_json)
                await verifier.run(source)
                bar.done()
            if everything:
                await _conversations(store, verifier.report, echo=not as_json)
            return verifier.report

    report = run(work())
    if as_json:
        print_json({"ok": report.ok, **msgspec.structs.asdict(report)})
    else:
        click.echo(report.summary())
    if not report.ok:
        raise click.exceptions.Exit(1)
