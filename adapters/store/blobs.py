"""Images and files of requests stored once: the request facts of the log keep a reference
(`"image_url":blob:sha256:<hex>`) in place of each data URL over `THRESHOLD`, the `blobs`
table keeps the data URL once, and every read of the log puts it back.

Why the swap is done on the facts' text and not on the decoded request: the log promises
the exact bytes back, and the blob holds the data URL exactly as the facts' JSON held it
(escapes and all), so putting it back is a byte-for-byte inverse with no re-encoding.

Why the reference is a bare token and not a JSON string: in msgspec's output a `"` inside a
string is always escaped, so `{"image_url":` or `,"image_url":` followed by anything but a
JSON value can only be a reference written here. A client that sends the text
`blob:sha256:<hex>` (in metadata, a tool schema, an image URL) sends a JSON string, which
never matches, so it can never be resolved into somebody else's blob. The stored facts with
a reference are not JSON until resolved: a reader that forgot to resolve fails loudly
(`CorruptEvent`), it never shows a reference to a client.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.store.tables import blobs as t_blobs
from adapters.store.tables import conversation_items as t_items
from adapters.store.tables import events as t_events
from domain.events import LIFECYCLE_TAGS
from domain.objects import FormatJsonSchema, ResponseObject
from service.ports import StoredEvent

# Data URLs shorter than this stay inline: a reference (78 bytes) and a row would cost more
# than they save.
THRESHOLD = 4096

# Parts of the response object that every lifecycle event carries whole (issue: a 1 MiB
# json_schema was stored in three events): over this size they are stored once too.
PART_THRESHOLD = 16384

_KEY = r'[{,]"(?:image_url|file_data)":'
# A data URL as a JSON string (the string's body may hold escapes).
_DATA = re.compile(f'({_KEY})"(data:[^"\\\\]*(?:\\\\.[^"\\\\]*)*)"')
# Data URLs are put back as JSON strings, parts as the JSON values they were.
_REF = re.compile(r'([{,]"(image_url|file_data|schema|parameters)":)blob:sha256:([0-9a-f]{64})')
_STRINGS = frozenset({"image_url", "file_data"})
MARK = "blob:sha256:"
_MARK_BYTES = MARK.encode()


def extract(facts: str, blobs: dict[str, str]) -> str:
    """`facts` with each data URL over `THRESHOLD` replaced by its reference; the data URLs
    are added to `blobs` (by their hex SHA-256)."""
    if '"data:' not in facts:
        return facts

    def swap(match: re.Match[str]) -> str:
        body = match.group(2)
        if len(body) < THRESHOLD:
            return match.group(0)
        digest = hashlib.sha256(body.encode()).hexdigest()
        blobs[digest] = body
        return f"{match.group(1)}{MARK}{digest}"

    return _DATA.sub(swap, facts)


def references(facts: str | bytes | None) -> set[str]:
    """The blobs (hex SHA-256) that `facts` refers to."""
    if facts is None:
        return set()
    text = facts.decode() if isinstance(facts, bytes) else facts
    if MARK not in text:
        return set()
    return {m.group(3) for m in _REF.finditer(text)}


def put_back(facts: str, found: Mapping[str, str]) -> str:
    """`facts` with every reference whose blob is in `found` replaced by the data URL; a
    missing one stays a reference (and the facts do not decode: `verify` names it)."""

    def swap(match: re.Match[str]) -> str:
        body = found.get(match.group(3))
        if body is None:
            return match.group(0)
        return f'{match.group(1)}"{body}"' if match.group(2) in _STRINGS else match.group(1) + body

    return _REF.sub(swap, facts)


def extract_parts(data: str, parts: Iterable[tuple[str, bytes]], blobs: dict[str, str]) -> str:
    """`data` (an event's wire JSON) with each large part, given as its key and its JSON
    encoding (the bytes the event's encoding holds), replaced by a reference. A part that
    is not found as it was encoded is left alone."""
    for key, encoded in parts:
        if len(encoded) < PART_THRESHOLD:
            continue
        value = encoded.decode()
        digest = hashlib.sha256(encoded).hexdigest()
        # A whole JSON value is never a prefix of another at the same place, so the match
        # ends where the value does.
        swapped = data
        for lead in "{,":
            swapped = swapped.replace(f'{lead}"{key}":{value}', f'{lead}"{key}":{MARK}{digest}')
        if swapped != data:
            blobs[digest] = value
            data = swapped
    return data


def needs(raw: bytes | None) -> bool:
    return raw is not None and _MARK_BYTES in raw


def _needs(event: StoredEvent) -> bool:
    return needs(event.facts) or needs(event.data)


_data = attrgetter("data")
_facts = attrgetter("facts")


def any_reference(events: Sequence[StoredEvent]) -> bool:
    """Whether any of `events` may need `resolve`: one search of their bytes joined (in C,
    where a test per event costs a Python call each). Joining can add a match across two
    events' bytes, never lose one, and `resolve` checks each event again."""
    return _MARK_BYTES in b"\n".join(map(_data, events)) or _MARK_BYTES in b"\n".join(
        filter(None, map(_facts, events))
    )


async def load(conn: AsyncConnection, digests: Iterable[str]) -> dict[str, str]:
    """The blobs of these digests that exist."""
    wanted = sorted(set(digests))
    found: dict[str, str] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        query = sa.select(t_blobs.c.sha256, t_blobs.c.data).where(t_blobs.c.sha256.in_(chunk))
        for row in await conn.execute(query):
            # A blob whose content does not match its hash is left out, as a missing one
            # is: the read fails (`verify` names it) rather than hand out altered bytes.
            if hashlib.sha256(row.data.encode()).hexdigest() == row.sha256:
                found[row.sha256] = row.data
    return found


async def resolve(conn: AsyncConnection, events: Sequence[StoredEvent]) -> list[StoredEvent]:
    """`events` with the references of their data and facts resolved (one query for all)."""
    carrying = [e for e in events if _needs(e)]
    if not carrying:
        return list(events)
    found = await load(
        conn, {d for e in carrying for d in references(e.facts) | references(e.data)}
    )
    return [_put_back(e, found) if _needs(e) else e for e in events]


def _put_back(event: StoredEvent, found: Mapping[str, str]) -> StoredEvent:
    data = put_back(event.data.decode(), found).encode() if needs(event.data) else event.data
    facts = event.facts
    if facts is not None and needs(facts):
        facts = put_back(facts.decode(), found).encode()
    return msgspec.structs.replace(event, data=data, facts=facts)


async def resolve_facts(conn: AsyncConnection, facts: str | None) -> str | None:
    if facts is None or MARK not in facts:
        return facts
    return put_back(facts, await load(conn, references(facts)))


async def store(conn: AsyncConnection, blobs: Mapping[str, str], now: float) -> None:
    """Write the blobs that are not there yet; bump `used_at` of those that are (which also
    locks the row on PostgreSQL, so a concurrent `gc` cannot delete it under us)."""
    if not blobs:
        return
    rows = [
        {"sha256": k, "data": v, "size": len(v.encode()), "created_at": now, "used_at": now}
        for k, v in sorted(blobs.items())
    ]
    if conn.dialect.name == "postgresql":
        pg = postgresql.insert(t_blobs)
        await conn.execute(
            pg.on_conflict_do_update(
                index_elements=["sha256"], set_={"used_at": pg.excluded.used_at}
            ),
            rows,
        )
    else:
        lite = sqlite.insert(t_blobs)
        await conn.execute(
            lite.on_conflict_do_update(
                index_elements=["sha256"], set_={"used_at": lite.excluded.used_at}
            ),
            rows,
        )


async def sweep(conn: AsyncConnection, before: float) -> int:
    """Delete the blobs no event refers to any more and that no request has stored since
    `before`; returns how many. The `used_at` guard keeps a blob that a create in flight
    is reusing: its upsert bumps `used_at` (and on PostgreSQL holds the row until it
    commits, after which the delete re-checks the guard and leaves the row)."""
    old = sa.select(t_blobs.c.sha256).where(t_blobs.c.used_at < before)
    candidates = set((await conn.execute(old)).scalars())
    if not candidates:
        # Finding the references reads every event that may hold one (a scan of the whole
        # log, docs/performance.md "The log at 1 M, 10 M and 100 M events"): not for nothing.
        return 0
    referenced: set[str] = set()
    e = t_events.c
    pattern = f'%":{MARK}%'
    facts = sa.select(e.facts).where(e.facts.like(pattern))
    carriers = sorted({*LIFECYCLE_TAGS, "conversation.items.added"})
    data = sa.select(e.data).where(e.type.in_(carriers), e.data.like(pattern))
    items = sa.select(t_items.c.data).where(t_items.c.data.like(pattern))
    for query in (facts, data, items):
        for text in (await conn.execute(query)).scalars():
            referenced |= references(text)
    unused = sorted(candidates - referenced)
    gone = 0
    for start in range(0, len(unused), 500):
        chunk = unused[start : start + 500]
        result = await conn.execute(
            sa.delete(t_blobs).where(t_blobs.c.sha256.in_(chunk), t_blobs.c.used_at < before)
        )
        gone += int(result.rowcount)
    return gone


def large_parts(response: ResponseObject) -> list[tuple[str, bytes]]:
    """The parts of a response object that may be large, as (key, JSON encoding): the
    `text.format` json_schema and each tool's `parameters`."""
    parts: list[tuple[str, bytes]] = []
    fmt = response.text.format
    if isinstance(fmt, FormatJsonSchema):
        parts.append(("schema", msgspec.json.encode(fmt.schema)))
    for tool in response.tools:
        parameters = tool.get("parameters")
        if isinstance(parameters, dict):
            parts.append(("parameters", msgspec.json.encode(parameters)))
    return [(k, v) for k, v in parts if len(v) >= PART_THRESHOLD]
