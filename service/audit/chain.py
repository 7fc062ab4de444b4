"""The hash chain checked: each stream's events against their digests and the row's head,
and the log against signed checkpoints (`resplog verify --chain`, `--checkpoint`, `--file`);
the checkpoint of the log as it is (`resplog checkpoint`, `serve --checkpoint-every-s`).

What each finding means (docs/guides/auditing.md has the table):
- `chain`: an event's stored digest is not the link of its bytes to the previous digest:
  its bytes were edited, or an event was inserted, deleted or moved there.
- `unchained`: an event without a digest.
- `head`: the row's head digest or version is not the stream's last event's.
- `erased`: an event's content was replaced by its digest with no erasure on record.
- `checkpoint`: the chain recomputed from the bytes differs, at the position a checkpoint
  recorded, from the digest it signed: the stream was rewritten (a fresh chain included).
- `truncated`: the stream ends before the position a checkpoint recorded.
- `removed`: a stream a checkpoint recorded is not in the log.
- `inconsistent`: a later checkpoint does not extend an earlier one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence

import msgspec

from domain import chain
from domain.errors import NotFound
from service.audit.signing import Checkpoint, CheckpointError, Leaf, Signer, leaf_hashes, sign
from service.audit.verify import Finding
from service.audit.verifying import Report
from service.ports import ChainHead, ChainRow, Ledger

Emit = Callable[[Finding], None]


def _name(checkpoint: Checkpoint, index: int) -> str:
    return f"checkpoint {index + 1} (root {checkpoint.statement.root[:12]}…)"


class StreamChain:
    """One stream's chain: `feed` its events in position order, then `finish`."""

    def __init__(
        self,
        stream_id: str,
        head: ChainHead | None,
        wanted: dict[int, list[tuple[str, str]]],
        *,
        check_stored: bool = True,
        erased: bool | None = None,
    ) -> None:
        self.stream_id = stream_id
        # Whether the stream has an erasure record (None: unknown, as in an export).
        self.erased = erased
        self.head = head
        self.wanted = wanted  # position → [(checkpoint name, its digest there)]
        self.check_stored = check_stored  # an export without digests has none to check
        self.findings: list[Finding] = []
        self.computed = chain.GENESIS  # the chain recomputed from the bytes alone
        self.stored: str | None = None  # the last event's stored digest
        self.last = -1
        self.events = 0
        self.broken = False

    def _find(self, position: int | None, kind: str, message: str) -> None:
        self.findings.append(
            Finding(stream_id=self.stream_id, position=position, kind=kind, message=message)
        )

    def feed(self, row: ChainRow) -> None:
        self.events += 1
        position = row.position
        if position != self.last + 1 and not self.broken:
            self.broken = True
            self._find(
                position,
                "chain",
                f"follows position {self.last}: an event was deleted, inserted or moved",
            )
        if row.content_digest is not None:  # erased: its bytes are gone, its digest kept
            content = bytes.fromhex(row.content_digest)
            if self.erased is False and not self.broken:
                # Bytes replaced and their digest kept, with no erasure on record: an
                # erasure is the one thing allowed to do that.
                self.broken = True
                self._find(
                    position, "erased", "the event's content was replaced with no erasure on record"
                )
        else:
            content = chain.content(row.data, row.facts)
        computed = chain.link(self.computed, self.stream_id, position, row.type, content)
        if self.check_stored and not self.broken:
            if row.digest is None:
                self.broken = True
                self._find(position, "unchained", "the event has no digest")
            else:
                previous = chain.GENESIS if self.stored is None else bytes.fromhex(self.stored)
                link = chain.link(previous, self.stream_id, position, row.type, content)
                if link.hex() != row.digest:
                    self.broken = True
                    self._find(
                        position,
                        "chain",
                        "its digest is not that of its bytes after the previous event's: "
                        "the event was edited, or one was inserted, deleted or moved here",
                    )
        self.computed = computed
        self.stored = row.digest
        self.last = position
        for name, digest in self.wanted.get(position, ()):
            if computed.hex() != digest:
                self._find(
                    position,
                    "checkpoint",
                    f"the chain up to here differs from {name}: the stream was rewritten "
                    "at or before this position",
                )

    def finish(self) -> list[Finding]:
        for position, names in sorted(self.wanted.items()):
            if position > self.last:
                for name, _ in names:
                    self._find(
                        position,
                        "truncated",
                        f"{name} recorded it up to position {position}; the log ends at "
                        f"{self.last}",
                    )
        head = self.head
        if (
            head is not None
            and self.check_stored
            and (head.version != self.last or head.head_digest != self.stored)
        ):
            self._find(
                None,
                "head",
                f"the row's head (version {head.version}, digest "
                f"{(head.head_digest or 'none')[:12]}…) is not the stream's last event's "
                f"({self.last}, {(self.stored or 'none')[:12]}…)",
            )
        return self.findings


def _wanted(checkpoints: Sequence[Checkpoint]) -> dict[str, dict[int, list[tuple[str, str]]]]:
    wanted: dict[str, dict[int, list[tuple[str, str]]]] = {}
    for index, checkpoint in enumerate(checkpoints):
        name = _name(checkpoint, index)
        for sid, position, digest in checkpoint.leaves:
            wanted.setdefault(sid, {}).setdefault(position, []).append((name, digest))
    return wanted


async def check_rows(
    pages: AsyncIterator[list[ChainRow]] | Iterable[list[ChainRow]],
    heads: Sequence[ChainHead] | None,
    checkpoints: Sequence[Checkpoint],
    emit: Emit | None = None,
    *,
    complete: bool = True,
    check_stored: bool = True,
    erased: set[str] | None = None,
) -> Report:
    """Check every stream of `pages` (in stream, position order); `complete`: they are the
    whole log, so a stream a checkpoint or a row has and the pages do not is reported."""
    report = Report()
    by_id = {h.stream_id: h for h in heads or ()}
    wanted = _wanted(checkpoints)
    seen: set[str] = set()
    current: StreamChain | None = None

    def close(stream: StreamChain | None) -> None:
        if stream is None:
            return
        report.streams += 1
        _report(report, stream.finish(), emit)

    async def each() -> AsyncIterator[list[ChainRow]]:
        if isinstance(pages, AsyncIterator):
            async for page in pages:
                yield page
        else:
            for page in pages:
                yield page

    async for page in each():
        for row in page:
            if current is None or row.stream_id != current.stream_id:
                close(current)
                seen.add(row.stream_id)
                current = StreamChain(
                    row.stream_id,
                    by_id.get(row.stream_id),
                    wanted.get(row.stream_id, {}),
                    check_stored=check_stored,
                    erased=None if erased is None else row.stream_id in erased,
                )
            current.feed(row)
            report.events += 1
    close(current)
    if complete:
        missing: list[Finding] = []
        for index, checkpoint in enumerate(checkpoints):
            for sid, position, _ in checkpoint.leaves:
                if sid not in seen:
                    missing.append(
                        Finding(
                            stream_id=sid,
                            position=position,
                            kind="removed",
                            message=f"{_name(checkpoint, index)} recorded it; it is not in the log",
                        )
                    )
        _report(report, missing, emit)
    return report


def _report(report: Report, findings: list[Finding], emit: Emit | None) -> None:
    for finding in findings:
        report.violations.append(finding)
        if emit is not None:
            emit(finding)


async def verify_chain(
    ledger: Ledger,
    checkpoints: Sequence[Checkpoint],
    stream_ids: Sequence[str] | None = None,
    emit: Emit | None = None,
) -> Report:
    """The log's chain (or the given streams') against its rows and `checkpoints`."""
    heads = await ledger.heads()
    if stream_ids is not None:
        wanted = set(stream_ids)
        heads = [h for h in heads if h.stream_id in wanted]
        checkpoints = [_only(c, wanted) for c in checkpoints]
    erased = {e.stream_id for e in await ledger.erasures(stream_ids)}
    return await check_rows(
        ledger.rows(stream_ids), heads, checkpoints, emit, complete=True, erased=erased
    )


def _only(checkpoint: Checkpoint, ids: set[str]) -> Checkpoint:
    leaves = [leaf for leaf in checkpoint.leaves if leaf[0] in ids]
    return Checkpoint(statement=checkpoint.statement, leaves=leaves, body=checkpoint.body)


def consistent(checkpoints: Sequence[Checkpoint], emit: Emit | None = None) -> Report:
    """Whether each checkpoint extends every earlier one (by their signed times): each
    stream of the earlier is in the later, at the same or a later position, and at the same
    position with the same digest. (Whether the later one's chain passes through the
    earlier one's digest at a later position is for the log to say: `verify --all` with
    both checks each against it.)"""
    report = Report()
    ordered = sorted(enumerate(checkpoints), key=lambda c: c[1].statement.created_at)
    findings: list[Finding] = []
    for a, (i, earlier) in enumerate(ordered):
        for j, later in ordered[a + 1 :]:
            heads = later.heads()
            for sid, position, digest in earlier.leaves:
                then = heads.get(sid)
                why = None
                if then is None:
                    why = "is not in"
                elif then[0] < position:
                    why = f"is at position {then[0]}, set back, in"
                elif then[0] == position and then[1] != digest:
                    why = "has another digest at the same position in"
                if why is not None:
                    findings.append(
                        Finding(
                            stream_id=sid,
                            position=position,
                            kind="inconsistent",
                            message=f"recorded by {_name(earlier, i)}, it {why} {_name(later, j)}",
                        )
                    )
    report.streams = len({leaf[0] for c in checkpoints for leaf in c.leaves})
    _report(report, findings, emit)
    return report


async def leaves(ledger: Ledger) -> list[Leaf]:
    """Every stream's head, as a checkpoint's leaf (a stream with no head digest yet, which
    only a log written before the chain and not migrated has, is left out)."""
    return [
        (h.stream_id, h.version, h.head_digest)
        for h in await ledger.heads()
        if h.head_digest is not None and h.version >= 0
    ]


async def checkpoint(ledger: Ledger, key: Signer, now: float) -> Checkpoint:
    return sign(key, await leaves(ledger), now)


class Integrity(msgspec.Struct, frozen=True, kw_only=True):
    """A stream's state for the audit view: its chain checked, the latest checkpoint that
    holds it (its number, and whether the chain passes through the digest it recorded),
    and its erasure."""

    chain: str  # "intact", "broken", "unchained" (no digests: written before the chain)
    broken_at: int | None = None
    checkpoint: int | None = None
    in_checkpoint: bool | None = None  # None: no checkpoint, or none that holds it
    erased_at: float | None = None
    erased_because: str | None = None


async def integrity(ledger: Ledger, stream_id: str, head: ChainHead | None) -> Integrity:
    latest = await ledger.latest_checkpoint()
    leaf: tuple[int, str] | None = None
    if latest is not None:
        try:
            found = _leaves.decode(latest.body).leaves
        except msgspec.DecodeError:
            found = []
        for sid, position, digest in found:
            if sid == stream_id:
                leaf = (position, digest)
                break
    wanted = {} if leaf is None else {leaf[0]: [("the checkpoint", leaf[1])]}
    erasure = next(iter(await ledger.erasures([stream_id])), None)
    check = StreamChain(stream_id, head, wanted, erased=erasure is not None)
    async for page in ledger.rows([stream_id]):
        for row in page:
            check.feed(row)
    findings = check.finish()
    broken = [f for f in findings if f.kind in ("chain", "unchained", "head", "erased")]
    return Integrity(
        chain="intact" if not broken else broken[0].kind.replace("chain", "broken"),
        broken_at=broken[0].position if broken else None,
        checkpoint=None if latest is None else latest.number,
        in_checkpoint=None
        if leaf is None
        else not any(f.kind in ("checkpoint", "truncated") for f in findings),
        erased_at=None if erasure is None else erasure.erased_at,
        erased_because=None if erasure is None else erasure.reason,
    )


class _Leaves(msgspec.Struct, frozen=True):
    leaves: list[tuple[str, int, str]]


_leaves = msgspec.json.Decoder(_Leaves)


async def keep_checkpointing(
    ledger: Ledger, key: Signer, every: float, clock: Callable[[], float]
) -> bool:
    """One step of `serve --checkpoint-every-s`: a checkpoint saved, unless one was saved
    less than half the period ago (by this process or another of the same database, so
    that N processes do not write N each period). Whether it saved one."""
    latest = await ledger.latest_checkpoint()
    now = clock()
    if latest is not None and now - latest.created_at < every / 2:
        return False
    made = await checkpoint(ledger, key, now)
    await ledger.save_checkpoint(now, made.statement.root, made.body)
    return True


class Proof(msgspec.Struct, frozen=True, kw_only=True):
    """That a stream's head is a leaf of a signed checkpoint (RFC 9162's audit path): what
    docs/guides/verify_proof.py checks with the checkpoint and the public key alone."""

    checkpoint: int | None  # its number in the database (None: a checkpoint file given)
    statement: str  # the checkpoint's signed statement, as in its file
    stream_id: str
    position: int
    digest: str
    index: int
    size: int
    path: list[str]


class _File(msgspec.Struct, frozen=True):
    statement: str
    leaves: list[tuple[str, int, str]]


_proof_file = msgspec.json.Decoder(_File)


async def prove(ledger: Ledger, stream_id: str, body: bytes | None = None) -> Proof:
    """The inclusion proof of `stream_id` in the checkpoint `body` (a file's bytes), or in
    the latest the database keeps; `NotFound` where there is none or it does not hold
    the stream."""
    number = None
    if body is None:
        latest = await ledger.latest_checkpoint()
        if latest is None:
            raise NotFound(
                "no checkpoint yet (resplog checkpoint --save, serve --checkpoint-every-s)"
            )
        number, body = latest.number, latest.body
    try:
        found = _proof_file.decode(body)
    except msgspec.DecodeError as exc:
        raise CheckpointError(f"not a resplog checkpoint ({exc})") from None
    index = next((i for i, leaf in enumerate(found.leaves) if leaf[0] == stream_id), None)
    if index is None:
        which = "the checkpoint" if number is None else f"checkpoint {number}"
        raise NotFound(
            f"{stream_id} is not in {which} (one taken after it was created will hold it)"
        )
    _, position, digest = found.leaves[index]
    hashes = leaf_hashes(list(found.leaves))
    return Proof(
        checkpoint=number,
        statement=found.statement,
        stream_id=stream_id,
        position=position,
        digest=digest,
        index=index,
        size=len(hashes),
        path=[h.hex() for h in chain.inclusion(hashes, index)],
    )
