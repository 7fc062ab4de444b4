"""The `import` use-case: an export file read and checked whole before anything is
written, refused if the database holds any of its streams, then written a batch of whole
streams per transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from domain.errors import Conflict
from service.audit import archive
from service.audit.progress import Opener
from service.ports import Imported, ImportedConversation

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit

Stream = Imported | ImportedConversation
# The file's lines, from its first, each time it is called (it is read twice).
Lines = Callable[[], Iterable[bytes]]


def stream_id(imported: Stream) -> str:
    if isinstance(imported, ImportedConversation):
        return imported.rebuilt.row.id
    return imported.record.id


def _check(lines: Lines) -> tuple[list[str], int]:
    """The whole file, read and checked before anything is written: its ids and events."""
    ids: list[str] = []
    events = 0
    for imported in archive.read(lines()):
        ids.append(stream_id(imported))
        events += len(imported.events)
    return ids, events


def _batches(lines: Lines, max_events: int) -> Iterator[list[Stream]]:
    batch: list[Stream] = []
    size = 0
    for imported in archive.read(lines()):
        if batch and size + len(imported.events) > max_events:
            yield batch
            batch, size = [], 0
        batch.append(imported)
        size += len(imported.events)
    if batch:
        yield batch


async def import_log(
    audit: Audit, lines: Lines, batch_events: int, progress: Opener
) -> tuple[list[str], int]:
    """Load the file into a database that holds none of its streams: the ids of the
    streams written, and their events. A response is never split across batches."""
    ids, events = _check(lines)
    clash = await audit.archive.existing(ids)
    if clash:
        first = next(i for i in ids if i in clash)
        streams = f"{len(clash)} stream{'' if len(clash) == 1 else 's'}"
        raise Conflict(
            f"the database already holds {streams} of the file (first: {first}); "
            "nothing was imported"
        )
    with progress(len(ids)) as bar:
        for batch in _batches(lines, batch_events):
            await audit.archive.insert(batch)
            for imported in batch:
                bar.stream()
                bar.event(len(imported.events))
        bar.done()
    return ids, events
