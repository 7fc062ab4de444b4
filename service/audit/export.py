"""The `export` use-case: the log of the selected ended responses, then every
conversation's, written as an export file (service/audit/archive.py) in constant memory,
each stream checked as `import` will check it while it is written."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from domain import chain
from domain.errors import ResplogError
from domain.objects import TERMINAL_STATUSES
from service.audit import archive
from service.audit.conversation_check import check_conversation
from service.audit.progress import Opener
from service.audit.verify import StreamCheck
from service.ports import Head, ResponseRow, Selection, StoredEvent

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit

ENDED = tuple(sorted(TERMINAL_STATUSES))
RUNNING = ("queued", "in_progress")

Write = Callable[[bytes], object]


class Exported(msgspec.Struct, frozen=True, kw_only=True):
    responses: int
    events: int
    skipped: int  # responses still running, left out
    conversations: int


class Filters(msgspec.Struct, frozen=True, kw_only=True):
    """Which streams: created in [since, until), of an owner (recorded in the file)."""

    since: float | None = None
    until: float | None = None
    owner: str | None = None

    def selection(self, statuses: tuple[str, ...]) -> Selection:
        return Selection(owner=self.owner, since=self.since, until=self.until, statuses=statuses)


async def export_log(
    audit: Audit,
    filters: Filters,
    write: Write,
    progress: Opener,
    clock: Callable[[], float] = time.time,
) -> Exported:
    """Write the export of the selected streams; a damaged stream stops it before the
    file's end line, so the file is one that `import` refuses as cut short, and the error
    names the stream."""
    link = _Linker(await _kept(audit))
    skipped = await audit.scan.count(filters.selection(RUNNING))
    total = await audit.scan.count(filters.selection(ENDED))
    responses = events = 0
    write(archive.header(clock(), msgspec.structs.asdict(filters)))
    checked: _Checked | None = None
    with progress(total) as bar:
        async for item in audit.scan.streams(filters.selection(ENDED)):
            if isinstance(item, Head):
                assert item.record is not None
                if checked is not None:
                    checked.finish()
                checked = _Checked(item.record)
                write(archive.response_line(item.record, item.record.version + 1))
                responses += 1
                bar.stream()
            else:
                assert checked is not None
                checked.feed(item)
                write(link.line(item))
                events += 1
                bar.event()
        if checked is not None:
            checked.finish()
        bar.done()
    conversations = 0
    for cid in await audit.conversations.ids():
        n = await _export_conversation(audit, cid, filters, write, link)
        if n is not None:
            conversations += 1
            events += n
    write(archive.end(responses, events, conversations))
    return Exported(
        responses=responses, events=events, skipped=skipped, conversations=conversations
    )


async def _export_conversation(
    audit: Audit, cid: str, filters: Filters, write: Write, link: _Linker
) -> int | None:
    """One conversation's stream, checked as `verify` checks it (a damaged one stops the
    export, as for a response); None if the filters leave it out."""
    row = await audit.conversations.get(cid)
    if row is None or (filters.owner is not None and row.owner != filters.owner):
        return None
    if filters.since is not None and row.created_at < filters.since:
        return None
    if filters.until is not None and row.created_at >= filters.until:
        return None
    events = await audit.store.read(cid)
    items = [(a.item.id, a.deleted) for a in await audit.conversations.audited_items(cid)]
    found = check_conversation(row, events, items)
    if found:
        raise ResplogError(
            f"the log of {cid} is damaged ({found[0].line()}); the export stopped there, "
            f"incomplete (see resplog verify {cid})"
        )
    write(archive.conversation_line(cid, len(events)))
    for stored in events:
        write(link.line(stored))
    return len(events)


async def _kept(audit: Audit) -> dict[tuple[str, int], str]:
    """The content digests of the erased events (their bytes are gone: the chain links
    these), by (stream, position)."""
    erased = [e.stream_id for e in await audit.ledger.erasures()]
    kept: dict[tuple[str, int], str] = {}
    if erased:
        async for page in audit.ledger.rows(erased):
            for row in page:
                if row.content_digest is not None:
                    kept[(row.stream_id, row.position)] = row.content_digest
    return kept


class _Linker:
    """Each exported event's line with its digest, the stream's chain recomputed from the
    bytes written (domain/chain.py), so that the file can be checked against a checkpoint
    with no database (`resplog verify --file`)."""

    def __init__(self, kept: dict[tuple[str, int], str]) -> None:
        self.kept = kept
        self.previous = chain.GENESIS

    def line(self, stored: StoredEvent) -> bytes:
        if stored.position == 0:
            self.previous = chain.GENESIS
        kept = self.kept.get((stored.stream_id, stored.position))
        content = bytes.fromhex(kept) if kept else chain.content(stored.data, stored.facts)
        self.previous = chain.link(
            self.previous, stored.stream_id, stored.position, stored.type, content
        )
        return archive.event_line(stored, self.previous.hex(), kept)


class _Checked:
    """One exported stream, checked as `import` will check it (the same fold, as many events
    as its row counts) while it is written, so a damaged log is reported by the export and
    never found first by the import of its file."""

    def __init__(self, record: ResponseRow) -> None:
        self.record = record
        self.check = StreamCheck(record.id, None, row_expected=False)
        self.events = 0

    def feed(self, stored: StoredEvent) -> None:
        # An event beyond what the row counts is never written: the file stays one that
        # `import` refuses as cut short, whichever damaged stream the scan meets first.
        if self.events == self.record.version + 1:
            self._damaged(f"more than the {self.events} events its row counts")
        self.check.feed(stored)
        self.events += 1

    def _damaged(self, why: str) -> None:
        rid = self.record.id
        raise ResplogError(
            f"the log of {rid} is damaged ({why}); the export stopped there, "
            f"incomplete (see resplog verify {rid})"
        )

    def finish(self) -> None:
        counted = self.record.version + 1
        found = self.check.finish()  # as import: any finding refuses the stream
        why = found[0].line() if found else None
        if why is None and self.events != counted:
            why = f"{self.events} events where its row counts {counted}"
        if why is not None:
            self._damaged(why)
