"""`verify`'s checks of one stream (service/audit/verify.py), one per invariant."""

from __future__ import annotations

import msgspec
import pytest

from domain.events import ResponseCompleted, ResponseQueued, encode
from service.audit.verify import Finding, StreamCheck
from service.ports import ResponseRow, StoredEvent
from tests.integration import streams
from tests.unit.audit_helpers import log, record, replace, stored


def check(rid: str, rows: list[StoredEvent], row: ResponseRow | None) -> list[Finding]:
    c = StreamCheck(rid, row)
    for r in rows:
        c.feed(r)
    return c.finish()


def kinds(found: list[Finding]) -> list[tuple[str, int | None]]:
    return [(f.kind, f.position) for f in found]


@pytest.mark.parametrize(
    "shape",
    [
        {"end": "completed"},
        {"end": "incomplete", "deltas": 2},
        {"end": "failed", "background": True},
        {"end": "cancelled", "background": True, "deltas": 0},
        {"end": "open", "deltas": 3},
    ],
)
def test_every_log_the_commands_write_verifies(shape: dict[str, object]) -> None:
    """Completed, incomplete, failed, cancelled and running logs have no findings."""
    rid, events = log(**shape)
    assert check(rid, stored(rid, events), record(rid, events)) == []


def test_a_log_with_every_event_type_verifies() -> None:
    """Reasoning, summaries, refusals and function calls fold and match their row."""
    rid = streams.new_id()
    events = streams.events_of(streams.every_tag_script(rid))
    assert check(rid, stored(rid, events), record(rid, events)) == []


def test_a_deleted_middle_event_is_a_gap_at_the_missing_position() -> None:
    """Positions must be dense: the missing one is named."""
    rid, events = log(deltas=4)
    rows = stored(rid, events)
    del rows[5]
    found = check(rid, rows, record(rid, events))
    assert kinds(found) == [("gap", 5)]
    assert "position 5 is missing" in found[0].message


def test_a_second_terminal_event_is_reported_at_its_position() -> None:
    """Exactly one terminal event: a second one is a violation where it stands."""
    rid, events = log(deltas=1)
    extra = replace(events[-1], sequence_number=len(events))
    found = check(rid, stored(rid, [*events, extra]), record(rid, events))
    assert kinds(found) == [("terminal", len(events))]
    assert f"the first is at {len(events) - 1}" in found[0].message


def test_events_after_the_terminal_event_are_reported_once_with_their_count() -> None:
    """The terminal event must be last; what follows is one finding, at the first."""
    rid, events = log(deltas=2)
    _, more = log(deltas=4)
    tail = [replace(e, sequence_number=len(events) + i) for i, e in enumerate(more[4:7])]
    found = check(rid, stored(rid, [*events, *tail]), record(rid, events))
    assert kinds(found) == [("terminal", len(events))]
    assert found[0].message.startswith("3 event(s) after the terminal event")


def test_an_illegal_transition_is_reported_where_the_fold_refuses_it() -> None:
    """A plain response cannot go back to queued after in_progress."""
    rid, events = log(deltas=2)
    queued = ResponseQueued(sequence_number=1, response=events[1].response)  # type: ignore[union-attr]
    events = [events[0], queued, *events[2:]]
    found = check(rid, stored(rid, events), record(rid, events))
    assert kinds(found) == [("transition", 1)]
    assert "must be followed by response.in_progress" in found[0].message


def test_a_row_that_differs_from_the_fold_names_what_differs() -> None:
    """The read model must equal the fold: status, columns and the snapshot's fields."""
    rid, events = log(deltas=2)
    final = events[-1]
    assert isinstance(final, ResponseCompleted)
    other = msgspec.json.encode(replace(final.response, status="failed", temperature=0.5))
    row = record(rid, events, status="failed", owner="mallory", snapshot=other)
    found = check(rid, stored(rid, events), row)
    assert kinds(found) == [("read_model", len(events) - 1)]
    message = found[0].message
    assert "status 'failed'" in message and "owner 'mallory'" in message
    assert "snapshot differs in status, temperature" in message


def test_a_row_whose_version_is_past_the_log_is_a_violation() -> None:
    """A row that claims events the log does not have."""
    rid, events = log(deltas=2)
    found = check(rid, stored(rid, events), record(rid, events, version=len(events) + 3))
    assert kinds(found) == [("read_model", None)]


def test_a_running_row_behind_the_log_is_wrong_only_if_a_fresh_read_agrees() -> None:
    """A stream that grew while it was read is compared at the row's version; a re-read row
    that is still behind is a violation."""
    rid, events = log(deltas=5, end="open")
    at = 4
    early = record(rid, events[: at + 1])
    c = StreamCheck(rid, early)
    for r in stored(rid, events):
        c.feed(r)
    assert c.behind
    c.recheck(record(rid, events))
    assert c.finish() == []
    late = StreamCheck(rid, early)
    for r in stored(rid, events):
        late.feed(r)
    late.recheck(early)
    assert kinds(late.finish()) == [("read_model", None)]


def test_a_stream_without_a_row_and_a_row_without_events() -> None:
    """Both halves must exist."""
    rid, events = log(deltas=1)
    assert kinds(check(rid, stored(rid, events), None)) == [("no_row", None)]
    assert kinds(check(rid, [], record(rid, events))) == [("no_events", None)]


def test_a_corrupt_row_and_a_lying_type_column() -> None:
    """A row that does not decode, and one whose `type` is not its data's, are named."""
    rid, events = log(deltas=3)
    rows = stored(rid, events)
    rows[3] = replace(rows[3], data=b"{not json")
    rows[5] = replace(rows[5], type="response.refusal.delta")
    found = check(rid, rows, record(rid, events))
    assert kinds(found) == [("corrupt", 3), ("corrupt", 5)]


def test_a_stream_that_does_not_start_with_its_request() -> None:
    """The whole request must be in the first event."""
    rid, events = log(deltas=1)
    bare = replace(events[0], facts=None)
    enc = encode(bare)
    rows = stored(rid, events)
    rows[0] = replace(rows[0], facts=enc.facts)
    found = check(rid, rows, record(rid, events))
    assert ("request", 0) in kinds(found)


def test_every_violation_is_reported_not_only_the_first() -> None:
    """Checking goes on after a violation: a gap and a second terminal event both show."""
    rid, events = log(deltas=4)
    extra = replace(events[-1], sequence_number=len(events))
    rows = stored(rid, [*events, extra])
    del rows[3]
    assert kinds(check(rid, rows, record(rid, events))) == [("gap", 3), ("terminal", len(events))]


def test_a_running_response_is_legal_but_a_long_expired_lease_is_a_warning() -> None:
    """Running is fine; a lease long expired (or no event for long without one) warns."""
    rid, events = log(deltas=2, end="open")
    row = record(rid, events, updated_at=1_000.0)
    c = StreamCheck(rid, row)
    assert c.stale(now=1_100.0, after=600) is None
    warning = c.stale(now=5_000.0, after=600)
    assert warning is not None and warning.severity == "warning"
    assert "no lease" in warning.message
    leased = StreamCheck(rid, replace(row, lease_owner="w1", lease_expires_at=4_000.0))
    assert leased.stale(now=4_100.0, after=600) is None
    expired = leased.stale(now=9_000.0, after=600)
    assert expired is not None and "held by w1" in expired.message
    done_id, done = log(deltas=1)
    assert StreamCheck(done_id, record(done_id, done)).stale(now=9e9, after=0) is None


def test_a_finding_is_one_line_with_stream_and_position() -> None:
    """What `verify` prints."""
    f = Finding(stream_id="resp_1", position=7, kind="gap", message="position 7 is missing")
    assert f.line() == "violation: resp_1 @7: gap: position 7 is missing"
    assert Finding(stream_id="resp_1", position=None, kind="no_row", message="x").line() == (
        "violation: resp_1 @-: no_row: x"
    )
