"""`verify`'s checks of one stream against the log's invariants (docs/invariants.md), fed
row by row in position order so that a stream of any length is checked in constant memory.

What is checked: positions dense from 0; every row decodes and its `type` column names its
event; the first event is `response.created` with the request; exactly one terminal event and
nothing after it; every transition legal (the strict `evolve`); the read-model row equals the
fold (compared when the fold reaches the row's version, so a stream that grows while it is
read is compared at the version the row was read at). A stream that is still running is legal;
one whose lease expired long ago, or that has had no event for long without a lease, is a
warning, not a violation.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from domain.errors import CorruptEvent, InvalidTransition
from domain.events import (
    LIFECYCLE_TYPES,
    AnyEvent,
    ResponseCreated,
    encode_json,
    tag_of,
)
from domain.fold.replay import evolve
from domain.objects import TERMINAL_STATUSES, ResponseObject
from domain.state import ResponseState
from service.audit.records import COMPARED, flags_of
from service.ports import ResponseRow, StoredEvent

Severity = Literal["violation", "warning"]
# A reference to a blob the store could not put back (adapters/store/blobs.py writes them).
_REFERENCE = re.compile(
    rb'[{,]"(?:image_url|file_data|schema|parameters)":blob:sha256:([0-9a-f]{64})'
)
_MARK = b":blob:sha256:"
_snapshot = msgspec.json.Decoder(ResponseObject)


def _unresolved(raw: bytes | None) -> re.Match[bytes] | None:
    # A plain substring test first: almost no event holds a reference, and `in` finds
    # that faster than the pattern, which tries a match at every `{` and `,`.
    return _REFERENCE.search(raw) if raw and _MARK in raw else None


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One violation (or warning) of one stream; `position` is None when it is the row's."""

    stream_id: str
    position: int | None
    # gap, corrupt, blob, request, terminal, transition, read_model, no_row, no_events, stale
    kind: str
    message: str
    severity: Severity = "violation"

    def line(self) -> str:
        where = "-" if self.position is None else str(self.position)
        return f"{self.severity}: {self.stream_id} @{where}: {self.kind}: {self.message}"


class StreamCheck:
    """Checks one stream: `feed` its rows in position order, then `finish`."""

    def __init__(self, stream_id: str, record: ResponseRow | None, *, row_expected: bool = True):
        self.stream_id = stream_id
        self.record = record
        self.row_expected = row_expected
        self.findings: list[Finding] = []
        self.state = ResponseState()
        self.created: ResponseCreated | None = None
        self.snapshot: tuple[int, ResponseObject] | None = None  # the last lifecycle event's
        self.last = -1
        self.events = 0
        self.broken = False  # the fold stopped at a violation; later checks are structural
        self.terminal_at: int | None = None
        self.trailing: list[int] = []  # [first position, count] of events after the terminal
        self.compared = False

    # --- feeding --------------------------------------------------------------------------

    def feed(self, stored: StoredEvent) -> None:
        pos = stored.position
        self.events += 1
        if pos != self.last + 1:
            self._gap(pos)
        self.last = pos
        if self._after_terminal(stored):
            return
        unresolved = _unresolved(stored.facts) or _unresolved(stored.data)
        if unresolved is not None:
            # The store put back every blob it has whose content matches its hash.
            digest = unresolved.group(1).decode()
            self._violation(
                pos, "blob", f"blob sha256:{digest} is missing or its content does not match"
            )
            self.broken = True
            return
        event = self._decode(stored)
        if event is None:
            return
        if pos == 0:
            self._check_request(event)
        if not self.broken:
            self._fold(event)
        if not self.broken and self.record is not None and pos == self.record.version:
            self._compare(self.record)

    def _gap(self, pos: int) -> None:
        first, last = self.last + 1, pos - 1
        missing = f"position {first} is" if first == last else f"positions {first}..{last} are"
        self._violation(first, "gap", f"{missing} missing (the next stored is {pos})")

    def _after_terminal(self, stored: StoredEvent) -> bool:
        if self.terminal_at is None:
            if stored.terminal:
                self.terminal_at = stored.position
            return False
        if stored.terminal:
            self._violation(
                stored.position,
                "terminal",
                f"a second terminal event ({stored.type}); the first is at {self.terminal_at}",
            )
        elif self.trailing:
            self.trailing[1] += 1
        else:
            self.trailing = [stored.position, 1]
        self.broken = True
        return True

    def _decode(self, stored: StoredEvent) -> AnyEvent | None:
        try:
            event = stored.event()
        except CorruptEvent as exc:
            self._violation(stored.position, "corrupt", exc.reason)
            return None
        tag = tag_of(type(event))
        if tag != stored.type:
            self._violation(
                stored.position, "corrupt", f"type column {stored.type!r}, data {tag!r}"
            )
            return None
        return event

    def _check_request(self, event: AnyEvent) -> None:
        if not isinstance(event, ResponseCreated):
            why = f"the stream starts with {tag_of(type(event))}, not response.created"
        elif event.facts is None:
            why = "response.created carries no request (input items, owner)"
        elif event.response.id != self.stream_id:
            why = f"response.created is for {event.response.id}"
        else:
            self.created = event
            return
        self._violation(0, "request", why)

    def _fold(self, event: AnyEvent) -> None:
        try:
            self.state = evolve(self.state, event)
        except InvalidTransition as exc:
            self._violation(event.sequence_number, "transition", str(exc))
            return
        if isinstance(event, LIFECYCLE_TYPES):
            self.snapshot = (event.sequence_number, event.response)

    def _violation(self, position: int | None, kind: str, message: str) -> None:
        self.findings.append(
            Finding(stream_id=self.stream_id, position=position, kind=kind, message=message)
        )
        self.broken = True

    # --- the read model -------------------------------------------------------------------

    def derived(self, **flags: Any) -> ResponseRow | None:
        """The row the fold so far implies, with `flags` for the columns that no event
        records (`records.FLAGS`, `updated_at` at least); None while the fold is broken or
        empty. The snapshot is encoded as the store encodes it (`adapters/store/rows.py`)."""
        if self.broken or self.created is None or self.snapshot is None:
            return None
        facts, created = self.created.facts, self.created.response
        assert facts is not None
        position, snapshot = self.snapshot
        return ResponseRow(
            id=self.stream_id,
            owner=facts.owner,
            status=snapshot.status,
            model=created.model,
            background=created.background,
            store=created.store,
            previous_response_id=created.previous_response_id,
            created_at=float(created.created_at),
            version=self.state.version,
            snapshot_version=position,
            snapshot=encode_json(snapshot),
            **flags,
        )

    def _compare(self, record: ResponseRow) -> None:
        self.compared = True
        want = self.derived(**flags_of(record))
        if want is None or self.snapshot is None:
            return
        diffs = [
            f"{name} {getattr(record, name)!r} (log: {getattr(want, name)!r})"
            for name in COMPARED
            if getattr(record, name) != getattr(want, name)
        ]
        diffs += _snapshot_diff(record.snapshot, self.snapshot[1])
        if diffs:
            self._violation(
                record.version, "read_model", "the row differs from the fold: " + "; ".join(diffs)
            )

    # --- the end --------------------------------------------------------------------------

    @property
    def terminal(self) -> bool:
        return self.terminal_at is not None

    @property
    def behind(self) -> bool:
        """The log went on past a running row's version: re-read the row (`recheck`) to tell
        a concurrent append from a row that was not updated."""
        rec = self.record
        return rec is not None and not rec.terminal and self.last > rec.version

    def recheck(self, fresh: ResponseRow | None) -> None:
        if fresh is not None and fresh.version < self.last:
            self._violation(
                None,
                "read_model",
                f"the row is at version {fresh.version} but the log goes on to {self.last}",
            )

    def finish(self) -> list[Finding]:
        """Everything found, once the last row was fed (the row's checks happen here)."""
        if self.trailing:
            first, count = self.trailing
            self._violation(
                first,
                "terminal",
                f"{count} event(s) after the terminal event at {self.terminal_at}",
            )
        rec = self.record
        if self.events == 0:
            self._violation(None, "no_events", "a read-model row with no events")
        elif rec is None:
            if self.row_expected:
                self._violation(None, "no_row", f"{self.events} events but no read-model row")
        elif not self.compared and self.last < rec.version:
            # (A log that goes on past a terminal row's version has events after its terminal
            # event, or a status the comparison already refused.)
            self._violation(
                None,
                "read_model",
                f"the row is at version {rec.version}, the log ends at {self.last}",
            )
        return self.findings

    def stale(self, now: float, after: float) -> Finding | None:
        """A warning for a running response nobody seems to be generating."""
        rec = self.record
        if rec is None or rec.status in TERMINAL_STATUSES:
            return None
        if rec.lease_expires_at is not None:
            late = now - rec.lease_expires_at
            if late <= after:
                return None
            holder = rec.lease_owner or "?"
            why = f"still {rec.status}; its lease (held by {holder}) expired {late:.0f} s ago"
        else:
            idle = now - rec.updated_at
            if idle <= after:
                return None
            why = f"still {rec.status} with no lease; no event for {idle:.0f} s"
        return Finding(
            stream_id=self.stream_id, position=None, kind="stale", message=why, severity="warning"
        )


def _snapshot_diff(stored: bytes, want: ResponseObject) -> list[str]:
    try:
        have = _snapshot.decode(stored)
    except msgspec.DecodeError as exc:
        return [f"snapshot is not a response object ({exc})"]
    if have == want:
        return []
    fields = [f for f in want.__struct_fields__ if getattr(have, f) != getattr(want, f)]
    return [f"snapshot differs in {', '.join(fields)}"]
