"""The export file: JSON Lines that carry the log byte for byte, and the checks that make
`import` all-or-nothing per file.

    {"kind":"resplog.export","format":1,"exported_at":…,"filters":{…}}     first line
    {"kind":"response","id":"resp_…","events":N,"updated_at":…,…}           per response,
    {"kind":"event","stream_id":"resp_…","position":0,"type":…,"data":"…",   then its N
     "facts":"…"|null,"recorded_at":…}                                       events in order
    {"kind":"conversation","id":"conv_…","events":N}                        per
    {"kind":"event","stream_id":"conv_…",…}                                  conversation,
                                                                             its N events
    {"kind":"end","responses":R,"events":E,"conversations":C}                last line

`data` and `facts` are the stored text as JSON strings, so they come back exactly as they
were whatever reads the file in between; `recorded_at` is a JSON number that round-trips. A
response line carries only what no event records (`updated_at`, the cancel flag and its
reason, the delete flag, the lease): the rest of the row is rebuilt from the events by the
same fold `verify` uses, so an imported row equals the fold by construction, and a file
whose log does not verify is refused.

A conversation's stream (format 2) needs no row line at all: every column of its read
model is stamped by one of its events, so `service/audit/conversation_check.rebuild` makes
the rows from the events, and `check_conversation` (what `verify` runs) must pass on them.
Files of format 1 (no conversations) still import.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from domain.errors import ArchiveError
from domain.reasons import CancelReason
from service.audit.conversation_check import check_conversation, rebuild
from service.audit.records import FLAGS, flags_of
from service.audit.verify import StreamCheck
from service.ports import ChainRow, Imported, ImportedConversation, ResponseRow, StoredEvent

FORMAT = 2
READS = (1, 2)  # the formats this version imports
HEADER_KIND = "resplog.export"


class Header(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag=HEADER_KIND):
    format: int
    exported_at: float
    filters: dict[str, Any] = msgspec.field(default_factory=dict)


class ResponseLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="response"):
    """The columns of the row that no event records (`records.FLAGS`, every one of them)."""

    id: str
    events: int
    updated_at: float
    cancel_requested_at: float | None = None
    cancel_reason: CancelReason | None = None  # absent from files of before it existed
    deleted_at: float | None = None
    lease_owner: str | None = None
    lease_expires_at: float | None = None


class EventLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="event"):
    stream_id: str
    position: int
    type: str
    data: str
    facts: str | None
    recorded_at: float
    # The event's link in its stream's hash chain (domain/chain.py); absent from files
    # written before it existed. `content_digest` only on an erased event, whose bytes
    # are gone: the chain links that instead.
    digest: str | None = None
    content_digest: str | None = None


class ConversationLine(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="conversation"
):
    id: str
    events: int


class End(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="end"):
    responses: int
    events: int
    conversations: int = 0  # absent from files of format 1


Line = Header | ResponseLine | ConversationLine | EventLine | End

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Line)


def _line(value: Line) -> bytes:
    return _encoder.encode(value) + b"\n"


def header(exported_at: float, filters: dict[str, Any]) -> bytes:
    return _line(Header(format=FORMAT, exported_at=exported_at, filters=filters))


def end(responses: int, events: int, conversations: int = 0) -> bytes:
    return _line(End(responses=responses, events=events, conversations=conversations))


def conversation_line(conversation_id: str, events: int) -> bytes:
    return _line(ConversationLine(id=conversation_id, events=events))


def response_line(record: ResponseRow, events: int) -> bytes:
    return _line(ResponseLine(id=record.id, events=events, **flags_of(record)))


def event_line(
    stored: StoredEvent, digest: str | None = None, content_digest: str | None = None
) -> bytes:
    return _line(
        EventLine(
            stream_id=stored.stream_id,
            position=stored.position,
            type=stored.type,
            data=stored.data.decode(),
            facts=None if stored.facts is None else stored.facts.decode(),
            recorded_at=stored.recorded_at,
            digest=digest,
            content_digest=content_digest,
        )
    )


def chain_rows(lines: Iterable[bytes]) -> Iterator[ChainRow]:
    """The events of an export file as the chain sees them (offline verification,
    service/audit/chain.py), and the file's own counts checked: a file cut short, or one
    whose streams or events do not add up to its end line (a stream's lines removed),
    raises `ArchiveError`, as for a line that is not an export's. What the chain does not
    cover (the fold, the rows), `import` checks."""
    streams = events = 0
    ended: End | None = None
    for number, raw in enumerate(lines, 1):
        line = _decode(number, raw)
        if number == 1 and not isinstance(line, Header):
            raise ArchiveError("not a resplog export: the first line is not its header")
        if isinstance(line, EventLine):
            events += 1
            yield ChainRow(
                line.stream_id,
                line.position,
                line.type,
                line.data.encode(),
                None if line.facts is None else line.facts.encode(),
                line.digest,
                line.content_digest,
            )
        elif isinstance(line, ResponseLine | ConversationLine):
            streams += 1
        elif isinstance(line, End):
            ended = line
    if ended is None:
        raise ArchiveError("the file is cut short: it does not end with the export's last line")
    if (streams, events) != (ended.responses + ended.conversations, ended.events):
        raise ArchiveError(
            f"the file holds {streams} streams and {events} events, its last line says "
            f"{ended.responses + ended.conversations} and {ended.events}: lines were removed "
            "or added"
        )


# --- reading ----------------------------------------------------------------------------------


def _fail(number: int, why: str) -> ArchiveError:
    return ArchiveError(f"line {number}: {why}")


def _decode(number: int, raw: bytes) -> Line:
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise _fail(number, f"not an export line ({exc})") from None


class _Pending:
    """The stream being read (a response's or a conversation's): its line, and its events
    so far."""

    def __init__(self, number: int, line: ResponseLine | ConversationLine) -> None:
        self.number = number
        self.line = line
        self.events: list[StoredEvent] = []

    def add(self, number: int, line: EventLine) -> None:
        if line.stream_id != self.line.id:
            raise _fail(number, f"an event of {line.stream_id} among those of {self.line.id}")
        if len(self.events) >= self.line.events:
            raise _fail(number, f"more events of {self.line.id} than its {self.line.events}")
        data = line.data.encode()
        facts = None if line.facts is None else line.facts.encode()
        self.events.append(
            StoredEvent(line.stream_id, line.position, line.type, data, facts, line.recorded_at)
        )

    def close(self, number: int) -> Imported | ImportedConversation:
        line = self.line
        if len(self.events) != line.events:
            raise _fail(number, f"{line.id} has {len(self.events)} of its {line.events} events")
        if isinstance(line, ConversationLine):
            return self._conversation(line)
        check = StreamCheck(line.id, None, row_expected=False)
        for stored in self.events:
            check.feed(stored)
        findings = check.finish()
        if findings:
            raise _fail(self.number, f"{line.id} does not verify: {findings[0].line()}")
        rebuilt = check.derived(**{name: getattr(line, name) for name in FLAGS})
        if not check.terminal or rebuilt is None:
            raise _fail(self.number, f"{line.id} has not ended; only ended responses are imported")
        return Imported(record=rebuilt, events=self.events, line=self.number)

    def _conversation(self, line: ConversationLine) -> ImportedConversation:
        rebuilt = rebuild(line.id, self.events)
        if rebuilt is None:
            raise _fail(self.number, f"{line.id} does not begin with conversation.created")
        kept = [(i.item_id, i.deleted_at is not None) for i in rebuilt.items]
        findings = check_conversation(rebuilt.row, self.events, kept)
        if findings:
            raise _fail(self.number, f"{line.id} does not verify: {findings[0].line()}")
        return ImportedConversation(rebuilt=rebuilt, events=self.events, line=self.number)


def read(lines: Iterable[bytes]) -> Iterator[Imported | ImportedConversation]:
    """Each response and conversation of an export file, checked; raises `ArchiveError`
    naming the line of the first problem (a file must be read to its end before anything
    of it is trusted)."""
    numbered = enumerate(lines, 1)
    first = next(numbered, None)
    head = None if first is None else _decode(*first)
    if not isinstance(head, Header):
        raise ArchiveError("not a resplog export: the first line is not its header")
    if head.format not in READS:
        raise _fail(1, f"export format {head.format}; this resplog reads formats 1 and 2")
    pending: _Pending | None = None
    seen: set[str] = set()
    responses = events = conversations = 0
    for number, raw in numbered:
        line = _decode(number, raw)
        if isinstance(line, End):
            if pending is not None:
                yield pending.close(number)
            counts = (line.responses, line.events, line.conversations)
            if counts != (responses, events, conversations):
                raise _fail(
                    number,
                    f"the file ends with {responses} responses, {events} events and "
                    f"{conversations} conversations, its last line says {line.responses}, "
                    f"{line.events} and {line.conversations}",
                )
            if next(numbered, None) is not None:
                raise _fail(number + 1, "lines after the end of the export")
            return
        if isinstance(line, Header):
            raise _fail(number, "a second header")
        if isinstance(line, ResponseLine | ConversationLine):
            if pending is not None:
                yield pending.close(number)
            if line.id in seen:
                raise _fail(number, f"{line.id} appears twice")
            seen.add(line.id)
            pending = _Pending(number, line)
            if isinstance(line, ResponseLine):
                responses += 1
            else:
                conversations += 1
        else:
            if pending is None:
                raise _fail(number, "an event before any response line")
            pending.add(number, line)
            events += 1
    raise ArchiveError("the file is cut short: it does not end with the export's last line")
