"""The `erase` use-case: the content of responses and conversations removed from the log,
the proof kept (docs/guides/auditing.md, "Erasure").

Each event of an erased stream is rewritten with its content replaced by `ERASED`: message
text, instructions, tool arguments and outputs, reasoning, code, images and files,
metadata values, search queries, the request's user identifiers, log probabilities and
annotations; of the deltas of one text, only the first reads `ERASED` (`StreamRedactor`).
What stays is its type, position, digest, the lifecycle (ids, statuses, times, usage) and
the structure of its items, so that every read still decodes it. The event's content
digest, which its digest links (domain/chain.py), is kept beside it (`content_digest`):
the chain still verifies, against checkpoints taken before too. The row's snapshot and a
conversation's item rows are rewritten the same way, the blobs nothing refers to any more
are deleted, and the erasure (when and why, never what) is recorded.

Why commitments and not per-owner keys (crypto-shredding): keys would put a cipher on the
writer's hot path for every event and a key store beside the database that must outlive
every backup, while an erasure is rare; replacing the bytes by their digest's commitment
costs nothing until an erasure, and an erased event reads as what it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from domain import chain
from domain.errors import NotFound, ResplogError
from service.ports import Erasure, Head, Selection

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit

ERASED = "[erased]"

# Keys whose string values are content; a list or object under them is walked.
_TEXT = frozenset(
    {
        "text",
        "delta",
        "instructions",
        "arguments",
        "input",
        "output",
        "content",
        "refusal",
        "image_url",
        "file_data",
        "file_url",
        "filename",
        "file_id",
        "encrypted_content",
        "transcript",
        "result",
        "query",
        "queries",
        "prompt_cache_key",
        "safety_identifier",
        "user",
        "url",
        "title",
        "logs",
        "stdout",
        "stderr",
        "message",
    }
)
_EMPTIED = frozenset({"logprobs", "top_logprobs", "annotations", "sources", "results"})
# The values of these objects are all content, whatever their keys.
_VALUES = frozenset({"metadata"})
# Keys that are content only in objects of these types: elsewhere `code` is an error's
# code and `pattern` a JSON schema's, which are not.
_TYPED = {
    "code": frozenset({"code_interpreter_call", "response.code_interpreter_call_code.done"}),
    "pattern": frozenset({"find_in_page"}),
}
# What locates the text a delta event streams into: its type (a part's kind), item and
# part. Within one stream no two texts share these.
_TARGET = ("type", "item_id", "output_index", "content_index", "summary_index")

_json = msgspec.json.Encoder()


def _walk(value: Any, erase_strings: bool = False) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        kind = value.get("type")
        for key, item in value.items():
            if key in _EMPTIED and isinstance(item, list):
                out[key] = []
            elif key in _VALUES and isinstance(item, dict):
                out[key] = {k: ERASED for k in item}
            else:
                content = key in _TEXT or kind in _TYPED.get(key, ())
                out[key] = _walk(item, content)
        return out
    if isinstance(value, list):
        return [_walk(item, erase_strings) for item in value]
    if isinstance(value, str) and erase_strings and value:  # an empty one holds nothing
        return ERASED
    return value


def redact(raw: bytes) -> bytes:
    """`raw` (a JSON document: an event's data or facts, a snapshot, an item) with its
    content erased; the same document where it holds none."""
    return _json.encode(_walk(msgspec.json.decode(raw)))


class StreamRedactor:
    """`redact` for the events of one stream, fed in position order, such that each final
    text still equals its deltas: a text's first erased delta is `ERASED` and the others
    are empty, so that the deltas fold to the `ERASED` its done event, part and item hold
    (docs/invariants.md; `verify` folds an erased stream as any other)."""

    def __init__(self) -> None:
        self.seen: set[tuple[Any, ...]] = set()

    def data(self, raw: bytes) -> bytes:
        value = _walk(msgspec.json.decode(raw))
        if isinstance(value, dict) and value.get("delta") == ERASED:
            target = tuple(value.get(key) for key in _TARGET)
            if target in self.seen:
                value["delta"] = ""
            else:
                self.seen.add(target)
        return _json.encode(value)


class Erased(msgspec.Struct, frozen=True, kw_only=True):
    stream_id: str
    events: int
    already: bool = False  # erased before: nothing done (erasing is idempotent)


async def targets(
    audit: Audit, ids: Sequence[str], conversation: str | None, owner: str | None
) -> list[str]:
    """The streams to erase, each checked to exist and to have ended; `ResplogError` (and
    nothing erased) for the first that does not."""
    found: list[str] = list(ids)
    if conversation is not None:
        found.append(conversation)
    if owner is not None:
        async for item in audit.scan.streams(Selection(owner=owner)):
            if isinstance(item, Head):
                found.append(item.stream_id)
        for cid in await audit.conversations.ids():
            row = await audit.conversations.get(cid)
            if row is not None and row.owner == owner:
                found.append(cid)
    for sid in found:
        if sid.startswith("conv_"):
            if await audit.conversations.get(sid) is None:
                raise NotFound(f"no conversation {sid}")
            continue
        record = await audit.log.record(sid)
        if record is None:
            raise NotFound(f"no response {sid}")
        if record.status in ("queued", "in_progress"):
            raise ResplogError(
                f"{sid} is still {record.status}: cancel it first "
                f"(POST /v1/responses/{sid}/cancel), then erase it"
            )
    return list(dict.fromkeys(found))


async def erase(
    audit: Audit,
    stream_ids: Sequence[str],
    reason: str,
    clock: Callable[[], float] = time.time,
) -> list[Erased]:
    """Erase each stream (see the module's docstring); one transaction each."""
    if not reason.strip():
        raise ResplogError("say why: --reason is required and may not be empty")
    done = {e.stream_id for e in await audit.ledger.erasures(stream_ids)}
    results: list[Erased] = []
    for sid in stream_ids:
        if sid in done:
            results.append(Erased(stream_id=sid, events=0, already=True))
            continue
        results.append(await _erase_one(audit, sid, reason, clock()))
    return results


async def _erase_one(audit: Audit, sid: str, reason: str, now: float) -> Erased:
    rows = [row async for page in audit.ledger.rows([sid]) for row in page]
    changes: list[tuple[int, bytes, bytes | None, str]] = []
    redactor = StreamRedactor()
    previous = chain.GENESIS
    for row in rows:
        if row.content_digest is not None:
            content = bytes.fromhex(row.content_digest)
        else:
            content = chain.content(row.data, row.facts)
        previous = chain.link(previous, sid, row.position, row.type, content)
        if row.digest != previous.hex():
            # Erasing would hide whatever was done to it: it is for `verify` to report.
            raise ResplogError(
                f"{sid} @{row.position}: its chain does not verify (resplog verify --chain "
                f"{sid}); nothing was erased"
            )
        facts = None if row.facts is None else redact(row.facts)
        changes.append((row.position, redactor.data(row.data), facts, content.hex()))
    snapshot = metadata = None
    items: list[tuple[str, bytes]] = []
    if sid.startswith("conv_"):
        for audited in await audit.conversations.audited_items(sid):
            items.append((audited.item.id, redact(_json.encode(audited.item))))
        conv = await audit.conversations.get(sid)
        if conv is not None:
            metadata = _json.encode(dict.fromkeys(conv.metadata, ERASED))
    else:
        record = await audit.log.record(sid)
        snapshot = None if record is None else redact(record.snapshot)
    erasure = Erasure(stream_id=sid, erased_at=now, reason=reason)
    await audit.ledger.erase(sid, changes, erasure, snapshot, items, metadata)
    return Erased(stream_id=sid, events=len(changes))
