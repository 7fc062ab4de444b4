"""`resplog export` and `resplog import`: the log of ended responses as JSON Lines (format in
`service/audit/archive.py`), streamed in constant memory, and back into a database.

A response that is still running is skipped, with a note on stderr: its log is not final, and
an imported copy would be a running response nobody generates. Export it once it has ended.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from adapters.cli.common import database_option, main
from adapters.cli.output import Bar, counted
from adapters.cli.params import Moment, progress_option
from adapters.cli.store import opened, run
from domain.errors import Conflict, ResplogError
from domain.objects import TERMINAL_STATUSES
from service.audit import archive
from service.audit.verify import StreamCheck
from service.ports import ResponseRow, StoredEvent

ENDED = tuple(sorted(TERMINAL_STATUSES))
RUNNING = ("queued", "in_progress")


@main.command()
@database_option
@click.option("--since", type=Moment, default=None, help="Created at or after.")
@click.option("--until", type=Moment, default=None, help="Created before.")
@click.option("--owner", default=None, help="Only this owner's responses.")
@progress_option
def export(
    database_url: str,
    since: float | None,
    until: float | None,
    owner: str | None,
    progress: bool | None,
) -> None:
    """Write every event of the selected ended responses to stdout as JSON Lines."""
    out = sys.stdout.buffer
    filters: dict[str, Any] = {"since": since, "until": until, "owner": owner}

    async def work() -> tuple[int, int, int, int]:
        from adapters.store.conversations import conversation_ids
        from adapters.store.scan import Head, LogScan, Selection

        async with opened(database_url) as store:
            scan = LogScan(store)
            ended = Selection(owner=owner, since=since, until=until, statuses=ENDED)
            running = Selection(owner=owner, since=since, until=until, statuses=RUNNING)
            skipped = await scan.count(running)
            total = await scan.count(ended)
            responses = events = 0
            out.write(archive.header(time.time(), filters))
            # A damaged stream stops the export before its end line: the file is then one
            # that `import` refuses as cut short, and the error names the stream.
            checked: _Checked | None = None
            with Bar("exporting", total, progress) as bar:
                async for item in scan.streams(ended):
                    if isinstance(item, Head):
                        assert item.record is not None
                        if checked is not None:
                            checked.finish()
                        checked = _Checked(item.record)
                        out.write(archive.response_line(item.record, item.record.version + 1))
                        responses += 1
                        bar.stream()
                    else:
                        assert checked is not None
                        checked.feed(item)
                        out.write(archive.event_line(item))
                        events += 1
                        bar.event()
                if checked is not None:
                    checked.finish()
                bar.done()
            conversations = 0
            for cid in await conversation_ids(store):
                n = await _export_conversation(store, cid, filters, out)
                if n is not None:
                    conversations += 1
                    events += n
            out.write(archive.end(responses, events, conversations))
            out.flush()
            return responses, events, skipped, conversations

    responses, events, skipped, conversations = run(work())
    click.echo(
        f"exported {counted(responses, 'response')}, "
        f"{counted(conversations, 'conversation')}, {counted(events, 'event')}",
        err=True,
    )
    if skipped:
        click.echo(
            f"note: skipped {counted(skipped, 'response')} still running; export them once "
            "they end",
            err=True,
        )


async def _export_conversation(
    store: Any, cid: str, filters: dict[str, Any], out: Any
) -> int | None:
    """One conversation's stream, checked as `verify` checks it (a damaged one stops the
    export, as for a response); None if the filters leave it out."""
    from adapters.store.conversations import SqlConversations, audited_items
    from service.audit.conversation_check import check_conversation

    row = await SqlConversations(store).get(cid)
    if row is None or (filters["owner"] is not None and row.owner != filters["owner"]):
        return None
    if filters["since"] is not None and row.created_at < filters["since"]:
        return None
    if filters["until"] is not None and row.created_at >= filters["until"]:
        return None
    events = await store.read(cid)
    items = [(a.item.id, a.deleted) for a in await audited_items(store, cid)]
    found = check_conversation(row, events, items)
    if found:
        raise ResplogError(
            f"the log of {cid} is damaged ({found[0].line()}); the export stopped there, "
            f"incomplete (see resplog verify {cid})"
        )
    out.write(archive.conversation_line(cid, len(events)))
    for stored in events:
        out.write(archive.event_line(stored))
    return len(events)


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


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        yield from f


Stream = archive.Imported | archive.ImportedConversation


def _batches(path: Path, max_events: int) -> Iterator[list[Stream]]:
    batch: list[Stream] = []
    size = 0
    for imported in archive.read(_lines(path)):
        if batch and size + len(imported.events) > max_events:
            yield batch
            batch, size = [], 0
        batch.append(imported)
        size += len(imported.events)
    if batch:
        yield batch


def _check(path: Path) -> tuple[list[str], int]:
    """The whole file, read and checked before anything is written: its ids and events."""
    ids: list[str] = []
    events = 0
    for imported in archive.read(_lines(path)):
        ids.append(stream_id(imported))
        events += len(imported.events)
    return ids, events


def stream_id(imported: Stream) -> str:
    if isinstance(imported, archive.ImportedConversation):
        return imported.rebuilt.row.id
    return imported.record.id


@main.command("import")
@database_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--batch-events",
    type=click.IntRange(1),
    default=5000,
    show_default=True,
    help="Events per transaction (a response is never split).",
)
@progress_option
def import_log(database_url: str, file: Path, batch_events: int, progress: bool | None) -> None:
    """Load an export file into a (migrated) database that holds none of its responses
    and conversations."""

    async def work() -> tuple[list[str], int]:
        from adapters.store import archive as archive_store
        from adapters.store.scan import LogScan

        async with opened(database_url) as store:
            ids, events = _check(file)
            clash = await LogScan(store).existing(ids)
            if clash:
                first = next(i for i in ids if i in clash)
                raise Conflict(
                    f"the database already holds {counted(len(clash), 'stream')} of the file "
                    f"(first: {first}); nothing was imported"
                )
            with Bar("importing", len(ids), progress) as bar:
                for batch in _batches(file, batch_events):
                    await archive_store.insert(store, batch)
                    for imported in batch:
                        bar.stream()
                        bar.event(len(imported.events))
                bar.done()
            return ids, events

    ids, events = run(work())
    chats = sum(1 for i in ids if i.startswith("conv_"))
    click.echo(
        f"imported {counted(len(ids) - chats, 'response')}, "
        f"{counted(chats, 'conversation')}, {counted(events, 'event')}"
    )
