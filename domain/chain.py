"""The hash chain of a stream and the Merkle tree of a checkpoint: pure functions of bytes.

Each event's digest commits to its stream, position, type, the digest of its content (the
event's bytes as a reader receives them: `data`, and `facts` or their absence) and the
previous event's digest (`GENESIS` before the first). The content digest is a separate
step so that erasure can drop the bytes and keep the proof: an erased event keeps its
content digest (adapters/store/erase.py), and its event digest is recomputed from that.

A checkpoint's tree is RFC 9162's (Certificate Transparency): a leaf hash is
`SHA-256(0x00 || leaf)`, a node's `SHA-256(0x01 || left || right)`, the left subtree the
largest power of two below the count. Its leaves are the streams' heads, `(id, position,
digest)`, sorted by id (docs/guides/auditing.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

GENESIS = bytes(32)  # the "previous digest" of a stream's first event

_sha256 = hashlib.sha256


def content(data: bytes, facts: bytes | None) -> bytes:
    """The digest of an event's content: its data, then its facts (or their absence), each
    length-prefixed so that no two pairs hash the same bytes."""
    h = _sha256(b"%d:" % len(data))
    h.update(data)
    if facts is None:
        h.update(b"-")
    else:
        h.update(b"%d:" % len(facts))
        h.update(facts)
    return h.digest()


def link(
    previous: bytes, stream_id: str, position: int, type_: str, content_digest: bytes
) -> bytes:
    """The digest of an event from its previous event's digest and its content digest. The
    two digests are fixed-width; the id and type hold no NUL, so the text is unambiguous."""
    # One buffer, one hash call: the object's creation and each update cost more than the
    # hashing of these hundred bytes (the writer links every event).
    return _sha256(
        b"%b%b%d\x00%b\x00%b"
        % (previous, content_digest, position, type_.encode(), stream_id.encode())
    ).digest()


def leaf(stream_id: str, position: int, digest: bytes) -> bytes:
    """A checkpoint's leaf for one stream's head."""
    return b"%s\x00%d\x00%s" % (stream_id.encode(), position, digest)


def leaf_hash(data: bytes) -> bytes:
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


def root(hashes: Sequence[bytes]) -> bytes:
    """The Merkle tree hash of leaf hashes (RFC 9162 §2.1.1); the empty tree's is SHA-256
    of nothing."""
    if not hashes:
        return _sha256(b"").digest()
    level = list(hashes)
    # Bottom-up pairing gives RFC 9162's tree: a lone last node is carried up unchanged.
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def inclusion(hashes: Sequence[bytes], index: int) -> list[bytes]:
    """The audit path of leaf `index` (RFC 9162 §2.1.3.1), bottom first."""
    path: list[bytes] = []
    level, i = list(hashes), index
    while len(level) > 1:
        sibling = i ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        paired = [node_hash(level[j], level[j + 1]) for j in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level, i = paired, i // 2
    return path


def included(leaf_h: bytes, index: int, size: int, path: Sequence[bytes], expected: bytes) -> bool:
    """Whether `path` proves leaf hash `leaf_h` at `index` in a tree of `size` leaves whose
    root is `expected` (RFC 9162 §2.1.3.2)."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf_h
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == expected
