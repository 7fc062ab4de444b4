"""A response's events for `resplog events`: from its log, or live until its end, each
checked to follow the one before (a hole is reported, never passed over)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import msgspec

from domain.errors import NotFound, ResplogError
from service.ports import ResponseRow, StoredEvent

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit


class Dense:
    """One stream's positions as they are read, checked to run on with none missing: a
    reading command reports a hole (or events its row does not count) instead of passing
    over it, and `resplog verify` explains it."""

    def __init__(self, rid: str, record: ResponseRow | None, after: int = -1) -> None:
        self.rid = rid
        self.record = record
        self.due = after + 1

    def check(self, stored: StoredEvent) -> None:
        if stored.position != self.due:
            self._damaged(f"position {stored.position} where {self.due} was due")
        self.due += 1

    def end(self) -> None:
        """After the last event: as many as the row counts (none missing at the end)."""
        if self.record is not None and self.due != self.record.version + 1:
            self._damaged(f"{self.due} events where its row counts {self.record.version + 1}")

    def _damaged(self, what: str) -> None:
        raise ResplogError(
            f"the log of {self.rid} is damaged: {what} (see resplog verify {self.rid})"
        )


class Timeline(msgspec.Struct, frozen=True):
    """When the response's first event was recorded (offsets count from it, whatever is
    skipped), and its events after the position asked for."""

    start: float | None
    events: AsyncIterator[StoredEvent]


async def timeline(audit: Audit, rid: str, *, after: int = -1, follow: bool = False) -> Timeline:
    """The events of `rid` after `after`; with `follow`, live until its terminal one.
    `NotFound` if the response has neither a row nor an event."""
    record = await audit.log.record(rid)
    first = await audit.store.read(rid, -1, 1)
    if record is None and not first:
        raise NotFound(f"no response {rid} in this database")
    start = first[0].recorded_at if first else None
    return Timeline(start, _dense(audit, rid, record, after, follow))


async def _dense(
    audit: Audit, rid: str, record: ResponseRow | None, after: int, follow: bool
) -> AsyncIterator[StoredEvent]:
    dense = Dense(rid, record, after)
    source = audit.store.subscribe(rid, after) if follow else audit.log.events(rid, after)
    async for stored in source:
        dense.check(stored)
        yield stored
    if not follow:
        dense.end()
