"""Streams and read-model rows for the audit tests, as the store would hold them."""

from __future__ import annotations

import msgspec

from domain.events import LIFECYCLE_TYPES, AnyEvent, ResponseCreated, encode, encode_json
from service.ports import ResponseRow, StoredEvent
from tests.integration import streams

replace = msgspec.structs.replace


def stored(rid: str, events: list[AnyEvent], start: float = 1_000.0) -> list[StoredEvent]:
    """Each event as its log row, recorded 10 ms apart."""
    rows = []
    for i, event in enumerate(events):
        enc = encode(event)
        rows.append(
            StoredEvent(rid, event.sequence_number, enc.type, enc.data, enc.facts, start + i / 100)
        )
    return rows


def record(rid: str, events: list[AnyEvent], **changes: object) -> ResponseRow:
    """The row the store writes for these events (written out here, not by the code under
    test), with `changes`."""
    created = events[0]
    assert isinstance(created, ResponseCreated) and created.facts is not None
    last = [e for e in events if isinstance(e, LIFECYCLE_TYPES)][-1]
    r = created.response
    row = ResponseRow(
        id=rid,
        owner=created.facts.owner,
        status=last.response.status,
        model=r.model,
        background=r.background,
        store=r.store,
        previous_response_id=r.previous_response_id,
        created_at=float(r.created_at),
        updated_at=2_000.0,
        version=events[-1].sequence_number,
        snapshot_version=last.sequence_number,
        snapshot=encode_json(last.response),
    )
    return replace(row, **changes)


def log(**kwargs: object) -> tuple[str, list[AnyEvent]]:
    """A response made by the aggregate's commands: its id and events."""
    rid = streams.new_id()
    return rid, streams.events_of(streams.script(rid, **kwargs))  # type: ignore[arg-type]
