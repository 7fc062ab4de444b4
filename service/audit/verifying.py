"""The `verify` use-case: every stream (or the given ones) re-folded and checked, and with
everything, each conversation against its read model; the findings gathered in a `Report`.
(`resplog verify --jobs N` runs `Verifier`s over slices of the log in processes of its own.)"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from domain.errors import NotFound
from service.audit.conversation_check import check_conversation
from service.audit.progress import Opener, Progress
from service.audit.verify import Finding, StreamCheck
from service.ports import Head, LogReader, Selection, StoredEvent

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit

Emit = Callable[[Finding], None]
Source = AsyncIterator[Head | StoredEvent]


class Report(msgspec.Struct, kw_only=True):
    streams: int = 0
    events: int = 0
    violations: list[Finding] = msgspec.field(default_factory=list)
    warnings: list[Finding] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, other: Report) -> None:
        self.streams += other.streams
        self.events += other.events
        self.violations += other.violations
        self.warnings += other.warnings


class Verifier:
    """Checks the streams of a source as they come, each finding told to `emit`."""

    def __init__(self, log: LogReader, bar: Progress, stale_after: float, emit: Emit | None):
        self.log = log
        self.bar = bar
        self.stale_after = stale_after
        self.emit = emit
        self.report = Report()

    async def run(self, source: Source) -> None:
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
            check.recheck(await self.log.record(check.stream_id))
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


async def sources(audit: Audit, ids: list[str]) -> tuple[int, Source]:
    """How many streams, and the streams: the given ones (each must exist), or every
    response's and then the orphaned ones."""
    if ids:
        missing = sorted(set(ids) - await audit.log.existing(ids))
        if missing:
            raise NotFound(f"no response {missing[0]} in this database")
        return len(ids), audit.scan.streams_of(ids)

    async def everything() -> Source:
        async for item in audit.scan.streams(Selection()):
            yield item
        async for item in audit.scan.orphans():
            yield item

    return await audit.scan.count(Selection()), everything()


async def check_conversations(audit: Audit, report: Report, emit: Emit | None) -> None:
    """Each conversation stream against its read model (service/audit/conversation_check)."""
    for cid in await audit.conversations.ids():
        row = await audit.conversations.get(cid)
        if row is None:
            continue
        events = await audit.store.read(cid)
        items = [(a.item.id, a.deleted) for a in await audit.conversations.audited_items(cid)]
        found = check_conversation(row, events, items)
        report.streams += 1
        report.events += len(events)
        report.violations += found
        if emit is not None:
            for finding in found:
                emit(finding)


# Checks the streams some other way than one `Verifier` here (in parts, in processes).
Parts = Callable[[Progress], Awaitable[Report]]


async def verify_log(
    audit: Audit,
    ids: list[str],
    *,
    stale_after: float,
    progress: Opener,
    emit: Emit | None,
    conversations: bool = False,
    parts: Parts | None = None,
) -> Report:
    """The given streams, or (no ids) every stream; with `conversations`, every
    conversation after them."""
    total, source = await sources(audit, ids)
    with progress(total) as bar:
        if parts is not None:
            report = await parts(bar)
        else:
            verifier = Verifier(audit.log, bar, stale_after, emit)
            await verifier.run(source)
            report = verifier.report
        bar.done()
    if conversations:
        await check_conversations(audit, report, emit)
    return report
