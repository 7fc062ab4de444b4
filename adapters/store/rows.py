"""How an append becomes rows: the encoded events of one stream and the read-model change
they imply (the row to insert on position 0, the guarded update otherwise).

Pure and shared by both stores and by the group-commit writer; the encoding happens in the
appending task, so the flusher only ships ready rows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec

from adapters.store import blobs as blob_store
from adapters.store.tables import values_of
from domain import chain
from domain.events import (
    LIFECYCLE_TAGS,
    LIFECYCLE_TYPES,
    AnyEvent,
    LifecycleEvent,
    ResponseCreated,
    encode,
    encode_json,
    tag_of,
)
from domain.objects import TERMINAL_STATUSES
from service.ports import ResponseRow, StoredEvent

# The events that carry the whole response object; the last one in a batch is the snapshot.
_LIFECYCLE = LIFECYCLE_TYPES

# (position, type, data, facts, recorded_at): one event row, in the table's column order.
Row = tuple[int, str, str, str | None, float]


class Lifecycle(msgspec.Struct, frozen=True):
    """The latest lifecycle event of a batch: the row's new status and snapshot."""

    position: int
    status: str
    snapshot: str


class Append(msgspec.Struct, frozen=True, kw_only=True):
    """Rows of one stream after `expected_version`, encoded once: one caller's append, or
    all of a stream's appends in one flush chained by `merge` (one guard, one row change).
    `events` are the same rows as the `StoredEvent`s that tails are handed once they
    commit, with their facts as sent (`rows` hold references to `blobs` instead of the
    large data URLs, `adapters/store/blobs.py`)."""

    stream_id: str
    expected_version: int
    rows: list[Row]
    events: list[StoredEvent]
    created: ResponseRow | None
    lifecycle: Lifecycle | None
    blobs: dict[str, str] = msgspec.field(default_factory=dict)
    lease: bool = False  # lease the stream this batch creates to its writer (`leased`)
    # Each event's content digest (`domain/chain.py`), taken in the appending task; the
    # store links them into the stream's chain when it commits (`chained`).
    contents: list[bytes] = msgspec.field(default_factory=list)
    # Each event's digest (hex), set by `chained` from the stream's previous digest.
    digests: list[str] = msgspec.field(default_factory=list)

    @property
    def last(self) -> int:
        return self.expected_version + len(self.rows)

    @property
    def head(self) -> str | None:
        """The digest of the batch's last event (once `chained`)."""
        return self.digests[-1] if self.digests else None


def chained(batch: Append, previous: bytes) -> Append:
    """`batch` with each event's digest, from `previous`, the digest of the event at
    `expected_version` (`chain.GENESIS` for a new stream). A few hundred nanoseconds an
    event: the content digests, which cost in proportion to the bytes, are already taken."""
    digests: list[str] = []
    link, sid = chain.link, batch.stream_id
    for (position, type_, *_), content in zip(batch.rows, batch.contents, strict=True):
        previous = link(previous, sid, position, type_, content)
        digests.append(previous.hex())
    return msgspec.structs.replace(batch, digests=digests)


def leased(batch: Append) -> bool:
    """Whether the insert that creates `batch`'s stream leases it to the writing process:
    always for a stream created `in_progress` (its creator generates it), and for a queued
    (background) one its creator asked for (`EventWriter.append`'s `lease`: it took one of
    its own slots for it). Either way no moment passes with the stream running, or about
    to, and nobody's lease on it; and no other process's worker can claim it meanwhile."""
    status = None if batch.lifecycle is None else batch.lifecycle.status
    if status in TERMINAL_STATUSES:  # created and ended in one flush: nothing to hold
        return False
    return batch.lease or status == "in_progress"


def response_json(event: LifecycleEvent, wire: bytes) -> bytes:
    """The JSON of `event.response`, cut from the event's wire bytes (`wire`, from
    `encode`) rather than encoded again: a lifecycle event goes on the wire as
    `{"type":…,"sequence_number":…,"response":{…}}`, the response its last member (its
    facts are kept apart). What comes before it is checked; a layout that differs is
    encoded afresh. Three lifecycle events a create, each with the whole response."""
    head = b'{"type":"%s","sequence_number":%d,"response":' % (
        tag_of(type(event)).encode(),
        event.sequence_number,
    )
    if wire.startswith(head) and wire.endswith(b"}"):
        return wire[len(head) : -1]
    return encode_json(event.response)


def _new_row(stream_id: str, event: AnyEvent, recorded_at: float, wire: bytes) -> ResponseRow:
    """The row as `response.created` makes it; `row_insert` brings its status, snapshot and
    version up to the end of the batch that creates it."""
    if not isinstance(event, ResponseCreated):
        raise ValueError(f"{stream_id}: a stream must start with response.created")
    if event.facts is None:
        raise ValueError(f"{stream_id}: response.created must carry its request facts (owner)")
    if event.response.id != stream_id:
        raise ValueError(f"{stream_id}: response.created is for {event.response.id}")
    r = event.response
    return ResponseRow(
        id=stream_id,
        owner=event.facts.owner,
        status=r.status,
        model=r.model,
        background=r.background,
        store=r.store,
        previous_response_id=r.previous_response_id,
        created_at=float(r.created_at),
        updated_at=recorded_at,
        version=0,
        snapshot_version=0,
        snapshot=response_json(event, wire),
    )


def encode_append(
    stream_id: str,
    expected_version: int,
    events: Sequence[AnyEvent],
    recorded_at: float | None = None,
    *,
    lease: bool = False,
) -> Append:
    """Encode one append; refuses events whose sequence numbers do not follow the version.

    `recorded_at` (default: now) is when the log accepted the events; the row keeps it, so
    a replay shows the same value as the live tail did. `lease`: see `leased`.
    """
    if expected_version < -1:
        raise ValueError(f"{stream_id}: expected version {expected_version} is below -1")
    now = time.time() if recorded_at is None else recorded_at
    rows: list[Row] = []
    stored: list[StoredEvent] = []
    last_lifecycle: tuple[int, LifecycleEvent, bytes] | None = None
    created: ResponseRow | None = None
    blobs: dict[str, str] = {}
    contents: list[bytes] = []
    content = chain.content
    for offset, event in enumerate(events):
        position = expected_version + 1 + offset
        if event.sequence_number != position:
            raise ValueError(
                f"{stream_id}: event {offset} has sequence_number {event.sequence_number}, "
                f"expected {position}"
            )
        enc = encode(event)
        facts = None if enc.facts is None else blob_store.extract(enc.facts.decode(), blobs)
        data = enc.data.decode()
        # By tag first: `isinstance` against the tuple costs 0.5 µs for each of the many
        # events that are none of them; it stays, to narrow the type.
        if enc.type in LIFECYCLE_TAGS and isinstance(event, _LIFECYCLE):
            if len(enc.data) >= blob_store.PART_THRESHOLD:
                parts = blob_store.large_parts(event.response)
                data = blob_store.extract_parts(data, parts, blobs)
            last_lifecycle = (position, event, enc.data)
        if position == 0:
            created = _new_row(stream_id, event, now, enc.data)
        rows.append((position, enc.type, data, facts, now))
        stored.append(StoredEvent(stream_id, position, enc.type, enc.data, enc.facts, now))
        contents.append(content(enc.data, enc.facts))
    lifecycle = None
    if last_lifecycle is not None:  # the batch's last: the row's snapshot
        position, event, wire = last_lifecycle
        snapshot = response_json(event, wire).decode()
        lifecycle = Lifecycle(position, event.response.status, snapshot)
    return Append(
        stream_id=stream_id,
        expected_version=expected_version,
        rows=rows,
        events=stored,
        created=created,
        lifecycle=lifecycle,
        blobs=blobs,
        lease=lease,
        contents=contents,
    )


def merge(appends: Sequence[Append]) -> Append:
    """Chain the appends of one stream (each continues the previous) into one batch."""
    first = appends[0]
    if len(appends) == 1:
        return first
    rows, events = list(first.rows), list(first.events)
    lifecycle = first.lifecycle
    blobs = dict(first.blobs)
    contents = list(first.contents)
    for append in appends[1:]:
        rows.extend(append.rows)
        events.extend(append.events)
        contents.extend(append.contents)
        lifecycle = append.lifecycle or lifecycle
        blobs.update(append.blobs)
    return Append(
        stream_id=first.stream_id,
        expected_version=first.expected_version,
        rows=rows,
        events=events,
        created=first.created,
        lifecycle=lifecycle,
        blobs=blobs,
        lease=first.lease,
        contents=contents,
    )


# The columns a stream's creation sets, in the order of `row_insert`'s values (the dialects'
# INSERT statements list them so); the others start NULL (no cancel, no delete) or are the
# lease, which the dialect sets itself. The head digest comes last (`row_insert`).
INSERT_COLUMNS = (
    "id",
    "owner",
    "status",
    "model",
    "background",
    "store",
    "previous_response_id",
    "created_at",
    "updated_at",
    "version",
    "snapshot_version",
    "snapshot",
    "head_digest",
)


def row_insert(batch: Append, now: float) -> tuple[object, ...]:
    """The new read-model row of a stream created by `batch` (in INSERT_COLUMNS order)."""
    new, life = batch.created, batch.lifecycle
    if new is None or life is None:
        raise ValueError(f"{batch.stream_id}: a new stream must start with response.created")
    values = values_of(new)
    values.update(
        status=life.status,
        updated_at=now,
        version=batch.last,
        snapshot_version=life.position,
        snapshot=life.snapshot,
        head_digest=batch.head,
    )
    return tuple(values[name] for name in INSERT_COLUMNS)


def row_change(batch: Append, now: float) -> tuple[object, ...]:
    """(version, updated_at, status, snapshot, snapshot_version, id, expected_version,
    head_digest): the guarded update of an existing row; the lifecycle columns are NULL
    (kept) when the batch holds no lifecycle event."""
    life = batch.lifecycle
    return (
        batch.last,
        now,
        None if life is None else life.status,
        None if life is None else life.snapshot,
        None if life is None else life.position,
        batch.stream_id,
        batch.expected_version,
        batch.head,
    )
